// The offload I/O engine (offload/offload_file.hpp) on its own: records round-trip through the
// background thread byte for byte (oracle: the bytes written), a read queued after a write of the
// same buffer sees that write (the FIFO that lets two buffers do read-ahead and write-behind), O_DIRECT
// on a disk file system and the buffered fallback on tmpfs give the same bytes, the space is
// reserved at creation, and each failure is an IoError naming the file: a missing directory, a
// file-size limit (EFBIG, the stand-in for a full device that needs no root), a truncated file,
// a second user of the file (refused, the live file intact), a link or FIFO at the name (untouched).
#include "core/error.hpp"
#include "offload/offload_file.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <unistd.h>
#include <filesystem>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <vector>

namespace trident {
namespace {

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

void fill_pattern(void* p, std::int64_t n, int seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::int64_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((i * 31 + seed * 7) & 0xff);
}

// Round trip of three records of uneven sizes in `dir`, with FIFO reuse of one buffer.
void round_trip(const std::string& dir, bool try_direct) {
  if (test::runtime().world().rank() != 0) return;
  const std::string path = dir + "/trident-offload-test.bin";
  const std::vector<std::int64_t> rec = {10000, 4096, 123457};
  OffloadFile f(path, rec, try_direct);
  if (!try_direct) {
    EXPECT_FALSE(f.direct());
  }
  std::printf("%s: %s I/O\n", dir.c_str(), f.direct() ? "O_DIRECT" : "buffered");
  EXPECT_EQ(f.file_bytes(), OffloadFile::aligned(10000) + 4096 + OffloadFile::aligned(123457));
  EXPECT_EQ(static_cast<std::int64_t>(std::filesystem::file_size(path)), f.file_bytes()) << "space reserved up front";
  AlignedHostBuffer a(123457, MemCategory::other), b(123457, MemCategory::other);
  for (int r = 0; r < 3; ++r) {
    fill_pattern(a.data(), rec[static_cast<size_t>(r)], r);
    f.wait(f.write_async(r, a.data()));
  }
  // Write record 1 from b, then read record 2 into b: the read must not overtake the write.
  fill_pattern(b.data(), rec[1], 11);
  f.write_async(1, b.data());
  const auto rd = f.read_async(2, b.data());
  f.wait(rd);
  std::vector<unsigned char> want(static_cast<size_t>(rec[2]));
  fill_pattern(want.data(), rec[2], 2);
  EXPECT_EQ(std::memcmp(b.data(), want.data(), want.size()), 0);
  f.wait(f.read_async(1, a.data()));
  fill_pattern(want.data(), rec[1], 11);
  EXPECT_EQ(std::memcmp(a.data(), want.data(), static_cast<size_t>(rec[1])), 0) << "the later write of record 1";
  // Buffered partial reads (what a checkpoint snapshot does) see the same bytes.
  std::vector<unsigned char> part(100);
  f.read_bytes(f.record_offset(0) + 50, 100, part.data());
  fill_pattern(want.data(), rec[0], 0);
  EXPECT_EQ(std::memcmp(part.data(), want.data() + 50, 100), 0);
  const OffloadStats s = f.stats();
  EXPECT_EQ(s.bytes_written, OffloadFile::aligned(10000) + 2 * 4096 + OffloadFile::aligned(123457));
}

TEST(OffloadFile, RoundTripOnDisk) { round_trip(test::scratch_dir(), true); }

// Buffered I/O (what a file system without O_DIRECT gets: tmpfs before Linux 6.6) on tmpfs.
TEST(OffloadFile, RoundTripBufferedOnTmpfs) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string dir = "/dev/shm/trident-offload-test-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  round_trip(dir, false);
  std::filesystem::remove_all(dir);
}

TEST(OffloadFile, FileIsRemovedWithTheObject) {
  const std::string path = test::scratch_dir() + "/trident-offload-gone." + std::to_string(test::runtime().world().rank()) + ".bin";
  { OffloadFile f(path, {4096}); }
  EXPECT_FALSE(std::filesystem::exists(path)) << "offload files are scratch";
}

TEST(OffloadFile, MissingDirectoryNamesTheFile) {
  const std::string path = test::scratch_dir() + "/no/such/dir/trident-offload.0.bin";
  const std::string msg = what_of([&] { OffloadFile f(path, {4096}); });
  EXPECT_NE(msg.find("offload file '" + path + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(OffloadFile, ASecondUserOfTheFileIsRefusedAndLeavesItsContentAlone) {
  // Two runs with the same offload_path and rank: the second is refused by the lock, and the live
  // file keeps its records (it once truncated the file on open, before it found the lock, and the
  // first run then read zeros: "truncated: read 0 of ... bytes").
  const std::string path = test::scratch_dir() + "/trident-offload-shared." + std::to_string(test::runtime().world().rank()) + ".bin";
  OffloadFile live(path, {4096});
  AlignedHostBuffer a(4096, MemCategory::other), b(4096, MemCategory::other);
  fill_pattern(a.data(), 4096, 5);
  live.wait(live.write_async(0, a.data()));
  const std::string msg = what_of([&] { OffloadFile second(path, {4096}); });
  EXPECT_NE(msg.find("another process uses it"), std::string::npos) << msg;
  EXPECT_EQ(static_cast<std::int64_t>(std::filesystem::file_size(path)), live.file_bytes());
  live.wait(live.read_async(0, b.data()));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 4096), 0) << "the live file's record survives the refused open";
}

TEST(OffloadFile, ALinkOrAFifoAtTheNameIsRefusedAndLeftAlone) {
  // Never written through a link (it overwrote the link's target, a checkpoint, then removed the
  // link), never a FIFO or device (removed as if it were a stale file).
  const std::string dir = test::scratch_dir() + "/offload-special." + std::to_string(test::runtime().world().rank());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string target = dir + "/precious.h5", link = dir + "/trident-offload.0.bin";
  { std::FILE* f = std::fopen(target.c_str(), "w"); std::fputs("a checkpoint", f); std::fclose(f); }
  std::filesystem::create_symlink(target, link);
  std::string msg = what_of([&] { OffloadFile f(link, {4096}); });
  EXPECT_NE(msg.find("it is a symbolic link"), std::string::npos) << msg;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(std::filesystem::file_size(target), 12u) << "the link's target is untouched";
  std::filesystem::remove(link);
  ASSERT_EQ(::mkfifo(link.c_str(), 0600), 0);
  msg = what_of([&] { OffloadFile f(link, {4096}); });
  EXPECT_NE(msg.find("is not a regular file"), std::string::npos) << msg;
  EXPECT_TRUE(std::filesystem::is_fifo(link)) << "not removed";
  std::filesystem::remove(link);
  std::filesystem::create_hard_link(target, link);  // O_NOFOLLOW does not see a hard link
  msg = what_of([&] { OffloadFile f(link, {4096}); });
  EXPECT_NE(msg.find("has other names (a hard link)"), std::string::npos) << msg;
  EXPECT_EQ(std::filesystem::file_size(target), 12u) << "the other name's file is untouched";
  std::filesystem::remove_all(dir);
}

TEST(OffloadFile, FileSizeLimitIsAnErrorNotAKill) {
  const std::string path = test::scratch_dir() + "/trident-offload-efbig." + std::to_string(test::runtime().world().rank()) + ".bin";
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 1 << 20;  // 1 MiB: the file wants 8 MiB
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &low), 0);
  const std::string msg = what_of([&] { OffloadFile f(path, {8 << 20}); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_NE(msg.find("offload file '" + path + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot reserve 8.0 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ulimit -f"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(path)) << "a failed reservation leaves no file";
}

TEST(OffloadFile, TruncatedFileFailsEveryLaterRequest) {
  const std::string path = test::scratch_dir() + "/trident-offload-trunc." + std::to_string(test::runtime().world().rank()) + ".bin";
  OffloadFile f(path, {4096, 4096, 4096, 4096});
  AlignedHostBuffer a(4096, MemCategory::other);
  for (int r = 0; r < 4; ++r) f.write_async(r, a.data());
  f.drain();
  f.truncate_for_test();  // half: records 2 and 3 are gone
  f.wait(f.read_async(1, a.data()));
  std::string msg = what_of([&] { f.wait(f.read_async(3, a.data())); });
  EXPECT_NE(msg.find("offload file '" + path + "': truncated"), std::string::npos) << msg;
  msg = what_of([&] { f.wait(f.read_async(0, a.data())); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << "the first failure is kept: " << msg;
}

}  // namespace
}  // namespace trident
