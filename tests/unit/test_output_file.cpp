// io/output_file.hpp's writes on their own: AtomicFile and write_file_atomically. Oracles: the
// bytes written, the directory listing (no temporary file is ever left behind), and the file a
// refused or failed write must leave as it was. A full disk is stood in for by a file-size limit
// (RLIMIT_FSIZE: EFBIG, no root needed), as in unit_offload_file.
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "io/token_file.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/resource.h>
#include <vector>

namespace trident {
namespace {

namespace fs = std::filesystem;

/// A fresh directory per test under the binary's scratch directory.
std::string fresh_dir(const std::string& name) {
  const std::string d = test::scratch_dir() + "/output_file." + name + "." + std::to_string(test::runtime().world().rank());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(OutputFile, AtomicFileWrittenInPiecesAppearsWholeAtCommit) {
  const std::string dir = fresh_dir("pieces"), path = dir + "/out.bin";
  std::string want;
  {
    AtomicFile f(path);
    EXPECT_EQ(fs::path(f.temp_path()).parent_path(), fs::path(dir)) << "the temporary file lies beside the output";
    for (int i = 0; i < 3; ++i) {
      const std::string piece(1000 + 7 * i, static_cast<char>('a' + i));
      f.write(piece.data(), piece.size());
      want += piece;
      EXPECT_FALSE(fs::exists(path)) << "the output appears only at commit";
    }
    f.commit(/*replace=*/false);
  }
  EXPECT_EQ(contents(path), want);
  EXPECT_EQ(listing(dir), std::vector<std::string>{"out.bin"}) << "no temporary file is left";
}

TEST(OutputFile, AtomicFileWithoutCommitLeavesNothing) {
  const std::string dir = fresh_dir("abandon"), path = dir + "/out.bin";
  try {
    AtomicFile f(path);
    f.write("partial", 7);
    throw Error("the source failed");  // as a failed read of a checkpoint in the middle of an export
  } catch (const Error&) {
  }
  EXPECT_TRUE(listing(dir).empty()) << "neither the output nor the temporary file";
}

TEST(OutputFile, CommitWithoutReplaceRefusesAnExistingFileAndKeepsIt) {
  const std::string dir = fresh_dir("exists"), path = dir + "/out.bin";
  write_file_atomically(path, "first", /*replace=*/false);
  EXPECT_EQ(contents(path), "first");
  {
    AtomicFile f(path);  // the file "appeared" after a check: commit must not replace it
    f.write("second", 6);
    EXPECT_THROW(f.commit(/*replace=*/false), ConfigError);
  }
  EXPECT_THROW(write_file_atomically(path, "third", /*replace=*/false), ConfigError);
  EXPECT_EQ(contents(path), "first");
  EXPECT_EQ(listing(dir), std::vector<std::string>{"out.bin"});
  write_file_atomically(path, "fourth", /*replace=*/true);
  EXPECT_EQ(contents(path), "fourth");
  EXPECT_EQ(listing(dir), std::vector<std::string>{"out.bin"});
}

TEST(OutputFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const std::string dir = fresh_dir("efbig"), path = dir + "/out.bin";
  write_file_atomically(path, "the last good one", /*replace=*/true);
  std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal, as the trainer installs it
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
  std::string msg;
  try {
    AtomicFile f(path);
    const std::vector<char> block(3000, 'x');
    f.write(block.data(), block.size());
    f.write(block.data(), block.size());  // past the limit
    f.commit(/*replace=*/true);
  } catch (const IoError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_NE(msg.find("cannot write '" + path + "'"), std::string::npos) << msg;
  EXPECT_EQ(contents(path), "the last good one");
  EXPECT_EQ(listing(dir), std::vector<std::string>{"out.bin"});
}

// close() flushes without moving: a set of files written together appears only at the commits, and
// a set abandoned after close() leaves nothing (ckpt export's all-or-nothing). leftover_temporaries
// finds what a killed write leaves (regular files of the temporary-name pattern only).
TEST(OutputFile, ClosedFilesAppearOnlyAtCommitAndLeftoversAreFound) {
  const std::string dir = fresh_dir("set"), a = dir + "/a.bin", b = dir + "/b.bin";
  {
    AtomicFile fa(a), fb(b);
    fa.write("aa", 2);
    fa.close();
    fa.close();  // idempotent
    EXPECT_THROW(fa.write("x", 1), IoError);
    fb.write("bbb", 3);
    fb.close();
    EXPECT_EQ(listing(dir).size(), 2u);  // the two temporary files, no output yet
    EXPECT_FALSE(fs::exists(a) || fs::exists(b));
  }
  EXPECT_TRUE(listing(dir).empty()) << "abandoned after close(): nothing left";
  {
    AtomicFile fa(a), fb(b);
    fa.write("aa", 2);
    fb.write("bbb", 3);
    fa.close();
    fb.close();
    fa.commit(false);
    fb.commit(false);
    EXPECT_THROW(fa.commit(true), IoError);  // at most once
  }
  EXPECT_EQ(contents(a), "aa");
  EXPECT_EQ(contents(b), "bbb");
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"a.bin", "b.bin"}));
  // A killed write's leftover, a look-alike symbolic link, and names that do not fit the pattern.
  std::ofstream(dir + "/.a.bin.Xy12Z9") << "half";
  fs::create_symlink(a, dir + "/.a.bin.AAAAAA");
  std::ofstream(dir + "/.a.bin.toolong7") << "x";
  std::ofstream(dir + "/.b.bin.Xy12Z9") << "x";
  EXPECT_EQ(leftover_temporaries(a), std::vector<std::string>{dir + "/.a.bin.Xy12Z9"});
  // The directory form, with a predicate on the output's name (ckpt export's shards of any count).
  EXPECT_EQ(leftover_temporaries(dir, [](const std::string& n) { return n.size() == 5 && n.substr(1) == ".bin"; }),
            (std::vector<std::string>{dir + "/.a.bin.Xy12Z9", dir + "/.b.bin.Xy12Z9"}));
}

TEST(OutputFile, AMissingDirectoryIsNamed) {
  const std::string path = fresh_dir("missing") + "/no/such/dir/out.bin";
  try {
    AtomicFile f(path);
    FAIL() << "created a file in a missing directory";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create a temporary file beside '" + path + "'"), std::string::npos)
        << e.what();
  }
}

// What --force may replace (check_output_file with replace_checkpoint, as `ckpt reshard` and
// `import` ask): never a token file, also when the file starts with a user block (HDF5 then
// finds its signature at 512, 1024, ...: h5jam's files; the check once looked at offset 0 only);
// a plain file, yes; nothing without force. (Replacing a checkpoint: cli_ckpt.)
TEST(OutputFile, ForceNeverReplacesATokenFileEvenBehindAUserBlock) {
  const std::string d = fresh_dir("force_hdf5");
  const std::string tok = d + "/tok.h5";
  TokenFileInfo info;
  info.tokenizer = "byte";
  info.vocab_size = 256;
  for (int i = 0; i < 256; ++i) info.vocab.push_back(i);
  write_token_file(tok, info, std::vector<std::int32_t>(100, 7), std::vector<std::int32_t>(10, 8));
  OutputRules rules;
  rules.force = true;
  rules.replace_checkpoint = true;
  EXPECT_THROW(check_output_file(tok, "the output", rules), ConfigError);
  for (const std::size_t ub : {std::size_t{512}, std::size_t{2048}}) {
    const std::string jammed = d + "/tok_ub" + std::to_string(ub) + ".h5";
    std::ofstream(jammed, std::ios::binary) << std::string(ub, '\0') << contents(tok);
    EXPECT_THROW(check_output_file(jammed, "the output", rules), ConfigError) << "user block " << ub;
  }
  const std::string plain = d + "/plain.h5";
  std::ofstream(plain) << "hello\n";
  EXPECT_NO_THROW(check_output_file(plain, "the output", rules));
  rules.force = false;
  EXPECT_THROW(check_output_file(plain, "the output", rules), ConfigError);
}

// OutputDirLock: a second writer is refused while the first holds the lock (flock conflicts
// between two open file descriptions, also within one process), the lock file goes with the
// holder, and a file left behind by a holder that died is simply taken over.
TEST(OutputFile, OutputDirLockAdmitsOneWriterAndLeavesNoFile) {
  const std::string d = fresh_dir("dir_lock");
  {
    const OutputDirLock first(d, ".lock", "export");
    EXPECT_TRUE(fs::exists(d + "/.lock"));
    try {
      const OutputDirLock second(d, ".lock", "export");
      ADD_FAILURE() << "a second writer was admitted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + d + "' is in use: another export is writing into it"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(listing(d), std::vector<std::string>{}) << "the lock file outlived its holder";
  std::ofstream(d + "/.lock") << "host x pid 1\n";  // left by a killed holder: no lock on it
  { const OutputDirLock again(d, ".lock", "export"); }
  EXPECT_EQ(listing(d), std::vector<std::string>{});
}

}  // namespace
}  // namespace trident
