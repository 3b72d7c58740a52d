// The run directory (train/run_dir.hpp) and the resume choice (train/resume.hpp) of
// `trident train`: each check's error and exit status, what opening a run directory writes and
// locks, and which checkpoint every form of --resume picks, on real checkpoints of a tiny model.
#include "core/error.hpp"
#include "io/token_file.hpp"
#include "mpi/trainer_fixture.hpp"
#include "test_env.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/run_lock.hpp"
#include "train/model_schema.hpp"
#include "train/resume.hpp"
#include "train/run_dir.hpp"
#include "train/step_timers.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace trident {
namespace {

namespace fs = std::filesystem;

Communicator& world() { return test::runtime().world(); }

/// A fresh directory name under the scratch directory, the same on every rank (removed first).
std::string fresh_dir(const std::string& name) {
  const std::string dir = test::scratch_dir() + "/" + name;
  if (world().rank() == 0) fs::remove_all(dir);
  world().barrier();
  return dir;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::int64_t> csv_steps(const std::string& path) {
  std::vector<std::int64_t> steps;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line))
    if (!line.empty()) steps.push_back(std::atoll(line.c_str()));
  return steps;
}

/// Runs `f`, expecting a collective error of type E with `exit_code` whose message contains `part`.
template <class E, class F>
void expect_error(F&& f, const std::string& part, int exit_code) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_TRUE(e.collective()) << e.what();  // every rank raises it: main() exits cleanly
    EXPECT_EQ(e.exit_code(), exit_code) << e.what();
  }
}

// ---- run directory ----------------------------------------------------------------------------

/// Claims run directory `out` as `trident train` does first (run lock required, file locking on).
RunDirClaim claim_of(const std::string& out, RunLockMode mode = RunLockMode::required) {
  return RunDirClaim(world(), out, CheckpointDir(out + "/checkpoints"), mode, true);
}

RunDirOptions run_dir_options(const std::string& out_dir) {
  RunDirOptions o;
  o.out_dir = out_dir;
  o.deck_ini = "[train]\nmax_steps = 5\n";
  o.leg = "aaaaaaaa";
  return o;
}

TEST(RunDir, CheckAcceptsANewDirectory) {
  const std::string out = fresh_dir("rd_new");
  EXPECT_NO_THROW(check_run_dir(world(), out, CheckpointDir(out + "/checkpoints"), false));
  EXPECT_NO_THROW(check_run_dir(world(), out, CheckpointDir(out + "/checkpoints"), true));
  EXPECT_FALSE(fs::exists(out));  // checking creates nothing
}

TEST(RunDir, CheckRefusesAnOutDirThatIsAFile) {
  const std::string out = fresh_dir("rd_file");
  if (world().rank() == 0) std::ofstream(out) << "x";
  world().barrier();
  expect_error<ConfigError>([&] { check_run_dir(world(), out, CheckpointDir(out + "/checkpoints"), true); },
                        "cannot set up the run directory: [train] out_dir '" + out + "' exists and is not a directory",
                        2);
}

TEST(RunDir, CheckRefusesALatestPointerThatIsNotAFile) {
  const std::string out = fresh_dir("rd_latest");
  if (world().rank() == 0) fs::create_directories(out + "/checkpoints/latest");
  world().barrier();
  expect_error<IoError>([&] { check_run_dir(world(), out, CheckpointDir(out + "/checkpoints"), true); },
                        "'" + out + "/checkpoints/latest' is not a file: remove it", 1);
}

TEST(RunDir, CheckRefusesCheckpointsWithoutResumeAsADeckError) {
  const std::string out = fresh_dir("rd_old_run");
  if (world().rank() == 0) {
    fs::create_directories(out + "/checkpoints");
    std::ofstream(out + "/checkpoints/step_00000004.h5") << "x";
    std::ofstream(out + "/checkpoints/step_00000008.h5") << "x";
  }
  world().barrier();
  const CheckpointDir ckdir(out + "/checkpoints");
  expect_error<ConfigError>([&] { check_run_dir(world(), out, ckdir, false); },
                            "[train] out_dir '" + out + "' already holds checkpoints (up to step 8): pass --resume "
                            "to continue that run, or choose another [train] out_dir",
                            2);
  EXPECT_NO_THROW(check_run_dir(world(), out, ckdir, true));
}

TEST(RunDir, OpenWritesTheDeckOpensTheCsvFilesAndCreatesTheCheckpointDirectory) {
  const std::string out = fresh_dir("rd_open") + "/nested/run";
  RunDirOptions opt = run_dir_options(out);
  opt.sample_log = true;
  {
    const RunDirClaim claim = claim_of(out);
    const RunDir rd(world(), opt, claim);
    EXPECT_EQ(rd.metrics() != nullptr, world().rank() == 0);
    EXPECT_EQ(rd.sample_log() != nullptr, world().rank() == 0);
    EXPECT_EQ(read_file(out + "/deck.ini"), opt.deck_ini);
    EXPECT_TRUE(fs::is_directory(out + "/checkpoints"));
    EXPECT_TRUE(fs::is_regular_file(out + "/metrics.csv"));
    EXPECT_TRUE(fs::is_regular_file(out + "/samples.csv"));
    if (rd.metrics()) {
      MetricsRow row;
      row.step = 1;
      rd.metrics()->write(row);
    }
    world().barrier();
    EXPECT_EQ(csv_steps(out + "/metrics.csv"), std::vector<std::int64_t>{1});
    // The leg, then the columns added after it (mem_checkpoint, then the numerics columns).
    EXPECT_NE(read_file(out + "/metrics.csv").find(",aaaaaaaa,0,"), std::string::npos);
  }
  world().barrier();
  const std::string out2 = fresh_dir("rd_open_no_samples");
  const RunDirClaim claim2 = claim_of(out2);
  const RunDir rd(world(), run_dir_options(out2), claim2);
  EXPECT_EQ(rd.sample_log(), nullptr);
  EXPECT_FALSE(fs::exists(out2 + "/samples.csv"));
}

TEST(RunDir, ClaimHoldsTheRunLockUntilItIsDestroyed) {
  const std::string out = fresh_dir("rd_lock");
  {
    const RunDirClaim claim = claim_of(out);
    EXPECT_EQ(claim.locked(), world().rank() == 0);
    EXPECT_TRUE(fs::is_directory(out + "/checkpoints"));
    // A second job on the same directory is refused on every rank, as a usage error (exit
    // status 2) naming the holder.
    expect_error<ConfigError>([&] { RunDirClaim second = claim_of(out); },
                              "cannot set up the run directory: run directory '" + out +
                                  "' is in use by another Trident job (host ",
                              2);
    if (world().rank() == 0) {
      try {
        RunLock lock(out);
        ADD_FAILURE() << "a second RunLock was granted";
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(" pid " + std::to_string(::getpid()) + ")"), std::string::npos)
            << e.what();
      }
    }
    // run_lock = off goes without a lock only where the file system grants none: here it grants
    // one, so the holder is still respected (was: the second claim went ahead unlocked).
    expect_error<ConfigError>([&] { RunDirClaim second = claim_of(out, RunLockMode::off); },
                              "cannot set up the run directory: run directory '" + out +
                                  "' is in use by another Trident job (host ",
                              2);
  }
  world().barrier();
  {
    // ... and on a free directory it takes the lock like required.
    const RunDirClaim off = claim_of(out, RunLockMode::off);
    EXPECT_EQ(off.locked(), world().rank() == 0);
  }
  world().barrier();
  EXPECT_NO_THROW(RunDirClaim again = claim_of(out));
}

TEST(RunDir, ClaimRefusesAnOutDirThatIsAFile) {
  const std::string out = fresh_dir("rd_claim_file");
  if (world().rank() == 0) std::ofstream(out) << "x";
  world().barrier();
  expect_error<ConfigError>([&] { RunDirClaim c = claim_of(out); },
                        "cannot set up the run directory: [train] out_dir '" + out + "' exists and is not a directory",
                        2);
}

// The start-up probe writes and reads back a small checkpoint the way saves do, and leaves
// nothing behind in the checkpoint directory.
TEST(RunDir, ClaimProbesTheCheckpointDirectoryAndLeavesNothingThere) {
  const std::string out = fresh_dir("rd_probe");
  for (bool file_locking : {true, false}) {
    const RunDirClaim claim(world(), out, CheckpointDir(out + "/checkpoints"), RunLockMode::required, file_locking);
    world().barrier();
    EXPECT_TRUE(fs::is_empty(out + "/checkpoints"));
  }
}

TEST(RunDir, OpenKeepsTheMetricsRowsUpToTheResumedStep) {
  const std::string out = fresh_dir("rd_metrics");
  const RunDirClaim claim = claim_of(out);
  {
    const RunDir first(world(), run_dir_options(out), claim);
    for (std::int64_t s = 1; s <= 5 && first.metrics(); ++s) {
      MetricsRow row;
      row.step = s;
      first.metrics()->write(row);
    }
  }
  world().barrier();
  RunDirOptions resumed = run_dir_options(out);
  resumed.resumed_step = 3;
  resumed.lineage = "aaaaaaaa@0";
  resumed.leg = "bbbbbbbb";
  { const RunDir second(world(), resumed, claim); }
  world().barrier();
  EXPECT_EQ(csv_steps(out + "/metrics.csv"), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(csv_steps(out + "/metrics.superseded.csv"), (std::vector<std::int64_t>{4, 5}));
  world().barrier();
  // A run from step 0 sets every row aside.
  { const RunDir third(world(), run_dir_options(out), claim); }
  world().barrier();
  EXPECT_TRUE(csv_steps(out + "/metrics.csv").empty());
  EXPECT_EQ(csv_steps(out + "/metrics.superseded.csv").size(), 5u);
}

TEST(RunDir, MetricsRowsOfEveryVersionFollowTheirLeg) {
  // Columns are only appended: rows written before mem_checkpoint end at the leg, newer rows
  // carry it after the leg. A resume keeps each row by its own leg, whatever its length.
  const std::string out = fresh_dir("rd_metrics_versions");  // collective
  if (world().rank() != 0) return;                              // the rest is local
  fs::create_directories(out);
  const std::string path = out + "/metrics.csv";
  const std::string values = ",2.5,,1e-3,0.5,1000,10,0.1,100,1,1,2,0,3,0,0.5,0";  // train_loss..bubble
  {
    std::ofstream f(path);
    f << "step,train_loss,val_loss,lr,grad_norm,tokens_per_sec,ms_per_step,mfu,peak_mem_mib,mem_params,mem_grads,"
         "mem_optimizer,mem_gathered,mem_activations,mem_comm,comm_mib,bubble,leg\n";
    for (int s = 1; s <= 3; ++s) f << s << values << ",aaaaaaaa\n";         // the old format
    for (int s = 3; s <= 4; ++s) f << s << values << ",cccccccc,12.5\n";    // the new format
  }
  { MetricsCsv resumed(path, 4, "aaaaaaaa@0;cccccccc@2", "dddddddd"); }
  EXPECT_EQ(csv_steps(path), (std::vector<std::int64_t>{1, 2, 3, 4}));
  const std::string kept = read_file(path);
  EXPECT_NE(kept.find("2" + values + ",aaaaaaaa\n"), std::string::npos);
  EXPECT_NE(kept.find("3" + values + ",cccccccc,12.5\n"), std::string::npos);
  EXPECT_EQ(kept.find("3" + values + ",aaaaaaaa\n"), std::string::npos);  // a step of the branch left
  EXPECT_NE(read_file(out + "/metrics.superseded.csv").find("3" + values + ",aaaaaaaa\n"), std::string::npos);
  EXPECT_EQ(kept.substr(0, kept.find('\n')).substr(kept.find(",leg")),
            ",leg,mem_checkpoint,skipped,skipped_steps,loss_z,loss_scale,overflow_steps," + step_breakdown_columns() +
                ",offload_read_mib,offload_write_mib,offload_wait_ms");
}

TEST(RunDir, AMetricsRowCutShortByAKillIsSetAsideAndNamedSo) {
  // A kill while a row was written leaves it without its end of line (and its leg): the resume
  // moves it aside as before, and its warning says it was cut short, not another history.
  const std::string out = fresh_dir("rd_metrics_cut");  // collective
  if (world().rank() != 0) return;                       // the rest is local
  fs::create_directories(out);
  const std::string path = out + "/metrics.csv";
  const std::string values = ",2.5,,1e-3,0.5,1000,10,0.1,100,1,1,2,0,3,0,0.5,0";
  {
    std::ofstream f(path);
    f << "step,train_loss,val_loss,lr,grad_norm,tokens_per_sec,ms_per_step,mfu,peak_mem_mib,mem_params,mem_grads,"
         "mem_optimizer,mem_gathered,mem_activations,mem_comm,comm_mib,bubble,leg\n";
    for (int s = 1; s <= 3; ++s) f << s << values << ",aaaaaaaa\n";
    f << "4,2.49,,1e-3,0.5";  // cut short
  }
  testing::internal::CaptureStdout();  // log::info
  testing::internal::CaptureStderr();  // log::warn
  { MetricsCsv resumed(path, 4, "aaaaaaaa@0", "bbbbbbbb"); }
  const std::string log = testing::internal::GetCapturedStderr() + testing::internal::GetCapturedStdout();
  EXPECT_EQ(csv_steps(path), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_NE(read_file(out + "/metrics.superseded.csv").find("\n4,2.49,,1e-3,0.5\n"), std::string::npos);
  EXPECT_NE(log.find("the last row of " + path + " (step 4) was cut short"), std::string::npos) << log;
  EXPECT_NE(log.find("that step is not trained again, so metrics.csv keeps no row for it"), std::string::npos) << log;
  EXPECT_EQ(log.find("not in the history"), std::string::npos) << log;
  // A whole row that only lacks its newline, of a step after the resumed one: set aside as any
  // later step is, not called cut short.
  {
    std::ofstream f(path, std::ios::app);
    f << "4" << values << ",aaaaaaaa\n5" << values << ",aaaaaaaa";
  }
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  { MetricsCsv resumed(path, 3, "aaaaaaaa@0", "cccccccc"); }
  const std::string log2 = testing::internal::GetCapturedStderr() + testing::internal::GetCapturedStdout();
  EXPECT_EQ(csv_steps(path), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(log2.find("cut short"), std::string::npos) << log2;
  EXPECT_NE(log2.find("(steps 4-5) are not in the history"), std::string::npos) << log2;
}

TEST(RunDir, HandEditedMetricsKeepEveryRowAndSetAsideWhatIsNotARow) {
  // A metrics.csv whose header was deleted by hand keeps its first row (it was once read as the
  // header and lost at the resume's rewrite); lines that are not rows (text pasted in, a second
  // header) go to metrics.superseded.csv with a warning instead of staying among the rows.
  const std::string out = fresh_dir("rd_metrics_edited");  // collective
  if (world().rank() != 0) return;                          // the rest is local
  fs::create_directories(out);
  const std::string path = out + "/metrics.csv";
  const std::string values = ",2.5,,1e-3,0.5,1000,10,0.1,100,1,1,2,0,3,0,0.5,0";
  {
    std::ofstream f(path);
    f << "1" << values << ",aaaaaaaa\n";  // no header line
    f << "2" << values << ",aaaaaaaa\n";
    f << "step,train_loss,val_loss\n";     // a header pasted again
    f << "note: lr looked high here\n";
    f << "3" << values << ",aaaaaaaa\n";
  }
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  { MetricsCsv resumed(path, 3, "aaaaaaaa@0", "bbbbbbbb"); }
  const std::string log = testing::internal::GetCapturedStderr() + testing::internal::GetCapturedStdout();
  EXPECT_EQ(csv_steps(path), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(read_file(path).rfind("step,", 0), 0u);  // the header is back
  const std::string aside = read_file(out + "/metrics.superseded.csv");
  EXPECT_NE(aside.find("\nnote: lr looked high here\n"), std::string::npos) << aside;
  EXPECT_NE(aside.find("\nstep,train_loss,val_loss\n"), std::string::npos) << aside;
  EXPECT_NE(log.find("2 line(s) of " + path + " do not start with a step number"), std::string::npos) << log;
  // Saved from a spreadsheet on Windows: CRLF endings, a blank line, a row with a leading blank or
  // '+' (atoll reads them as steps), a note above the header: every row kept, the note set aside.
  fs::remove(out + "/metrics.superseded.csv");
  {
    std::ofstream f(path, std::ios::binary);
    f << "note: run 7\r\nstep,train_loss\r\n";
    f << "1" << values << ",aaaaaaaa\r\n\r\n";
    f << " 2" << values << ",aaaaaaaa\r\n";
    f << "+3" << values << ",aaaaaaaa\r\n";
  }
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  { MetricsCsv resumed(path, 3, "aaaaaaaa@0", "cccccccc"); }
  const std::string log2 = testing::internal::GetCapturedStderr() + testing::internal::GetCapturedStdout();
  EXPECT_EQ(csv_steps(path), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(read_file(out + "/metrics.superseded.csv").find("note: run 7\n") != std::string::npos, true);
  EXPECT_NE(log2.find("1 line(s) of " + path + " do not start with a step number"), std::string::npos) << log2;
}

TEST(RunDir, ASampleLogRowCutShortByAKillIsSetAside) {
  // samples.csv (no lineage): a last row without its end of line and with fewer fields than the
  // row before is half a row, set aside with a warning rather than kept as a sample of offset 0.
  const std::string out = fresh_dir("rd_samples_cut");  // collective
  if (world().rank() != 0) return;                       // the rest is local
  fs::create_directories(out);
  const std::string path = out + "/samples.csv";
  {
    std::ofstream f(path);
    f << "step,sample,offset\n1,0,100\n1,1,200\n2,2,300\n2,3";
  }
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  { SampleLogCsv resumed(path, 2); }
  const std::string log = testing::internal::GetCapturedStderr() + testing::internal::GetCapturedStdout();
  EXPECT_EQ(read_file(path), "step,sample,offset\n1,0,100\n1,1,200\n2,2,300\n");
  EXPECT_EQ(read_file(out + "/samples.superseded.csv"), "step,sample,offset\n2,3\n");
  EXPECT_NE(log.find("the last row of " + path + " (step 2) was cut short"), std::string::npos) << log;
  EXPECT_EQ(log.find("not in the history"), std::string::npos) << log;
  // Cut inside its last field ("2,3,30" of "2,3,300"): as many fields, but no newline.
  fs::remove(out + "/samples.superseded.csv");
  {
    std::ofstream f(path);
    f << "step,sample,offset\n1,0,100\n2,3,30";
  }
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  { SampleLogCsv resumed(path, 2); }
  (void)testing::internal::GetCapturedStderr();
  (void)testing::internal::GetCapturedStdout();
  EXPECT_EQ(read_file(path), "step,sample,offset\n1,0,100\n");
  EXPECT_EQ(read_file(out + "/samples.superseded.csv"), "step,sample,offset\n2,3,30\n");
}

TEST(RunDir, ClaimFailsOnEveryRankWhenTheDirectoryCannotBeCreated) {
  const std::string base = fresh_dir("rd_blocked");
  if (world().rank() == 0) std::ofstream(base) << "a file where a directory should be";
  world().barrier();
  const std::string out = base + "/run";
  try {
    RunDirClaim claim = claim_of(out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot set up the run directory: ", 0), 0u) << e.what();
    EXPECT_TRUE(e.collective());
    // What stands in the way is the user's (a file among the parents): a usage error naming it.
    EXPECT_NE(std::string(e.what()).find("' is a file, not a directory"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
}

// ---- resume choice ----------------------------------------------------------------------------

/// The tiny token file with a char tokenizer whose vocabulary a checkpoint records, so that
/// the checkpoints pass every check of `trident ckpt verify` (the shared file has none). Collective.
std::string char_token_file() {
  const std::string path = test::scratch_dir() + "/char_tokens.h5";
  const std::string tiny_path = test::tiny_token_file();  // collective
  if (world().rank() == 0 && !fs::exists(path)) {
    TokenFileReader tiny(tiny_path);
    TokenFileInfo info = tiny.info();
    info.tokenizer = "char";
    info.vocab.clear();
    info.vocab.push_back('\n');
    for (char c = '0'; c <= '9'; ++c) info.vocab.push_back(c);
    for (char c = 'a'; c <= 'z'; ++c) info.vocab.push_back(c);  // 37 sorted code points
    auto split = [&](const std::string& name) {
      std::vector<std::int32_t> tokens(static_cast<size_t>(tiny.size(name)));
      tiny.read(name, 0, tiny.size(name), tokens.data());
      return tokens;
    };
    write_token_file(path, info, split("train"), split("val"));
  }
  world().barrier();
  return path;
}

/// A run directory with committed checkpoints of steps 1 and 2 of the tiny model (written once),
/// copied into `name` for a test that may damage it. Returns the copy's run directory.
/// `master_head` gets the first floats of world rank 0's master weights after step 2.
std::string run_with_two_checkpoints(const std::string& name, std::vector<float>* master_head = nullptr) {
  static std::string source;
  static std::vector<float> head;
  if (source.empty()) {
    source = fresh_dir("resume_source");
    Config cfg = test::tiny_config(world().size());
    cfg.data.path = char_token_file();
    const CheckpointDir ckdir(source + "/checkpoints");
    test::train_trace(world(), cfg, 2, [&](Trainer<float>& t, ProcessGrid& g, const StepResult&, int) {
      ckdir.commit(t.step(), g.world_comm(), [&](const std::string& tmp) { t.write_checkpoint(tmp); }, 5);
      const std::vector<float> m = t.master_copy();
      head.assign(m.begin(), m.begin() + 8);
    });
  }
  if (master_head) *master_head = head;
  const std::string dir = fresh_dir(name);
  if (world().rank() == 0) fs::copy(source, dir, fs::copy_options::recursive);
  world().barrier();
  return dir;
}

const ModelSchema& schema() {
  static const ModelSchema s = model_schema();
  return s;
}

std::string step_path(const std::string& run, std::int64_t step) {
  return CheckpointDir(run + "/checkpoints").path_for(step);
}

TEST(Resume, WithoutResumeNothingIsChosen) {
  const std::string run = run_with_two_checkpoints("resume_off");
  EXPECT_EQ(choose_resume_checkpoint(world(), CheckpointDir(run + "/checkpoints"), false, "", true, schema()), "");
  // Not even a PATH given without --resume (the command line never does this) is used.
  EXPECT_EQ(
      choose_resume_checkpoint(world(), CheckpointDir(run + "/checkpoints"), false, step_path(run, 1), true, schema()),
      "");
}

TEST(Resume, AnEmptyRunStartsFromStep0) {
  const std::string run = fresh_dir("resume_empty");
  EXPECT_EQ(choose_resume_checkpoint(world(), CheckpointDir(run + "/checkpoints"), true, "", true, schema()), "");
}

TEST(Resume, ResumeAloneTakesTheNewestCheckpoint) {
  const std::string run = run_with_two_checkpoints("resume_newest");
  for (bool verify : {true, false})
    EXPECT_EQ(choose_resume_checkpoint(world(), CheckpointDir(run + "/checkpoints"), true, "", verify, schema()),
              step_path(run, 2));
}

TEST(Resume, ResumeAloneSkipsACheckpointThatDoesNotOpen) {
  const std::string run = run_with_two_checkpoints("resume_truncated");
  if (world().rank() == 0) fs::resize_file(step_path(run, 2), 1000);
  world().barrier();
  for (bool verify : {true, false})
    EXPECT_EQ(choose_resume_checkpoint(world(), CheckpointDir(run + "/checkpoints"), true, "", verify, schema()),
              step_path(run, 1));
}

// Damaged data that HDF5 still reads: only the checksums notice, so only verify skips it.
TEST(Resume, ResumeAloneSkipsACheckpointWithBadChecksumsOnlyWhenVerifying) {
  std::vector<float> head;
  const std::string run = run_with_two_checkpoints("resume_checksum", &head);
  if (world().rank() == 0) {
    std::string bytes = read_file(step_path(run, 2));
    const std::string needle(reinterpret_cast<const char*>(head.data()), head.size() * sizeof(float));
    const size_t at = bytes.find(needle);
    EXPECT_NE(at, std::string::npos) << "rank 0's first master weights are not in the file";
    if (at != std::string::npos) {
      std::fstream f(step_path(run, 2), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(at));
      f.write("\xde\xad\xbe\xef\xde\xad\xbe\xef", 8);
    }
  }
  world().barrier();
  const CheckpointDir ckdir(run + "/checkpoints");
  EXPECT_EQ(choose_resume_checkpoint(world(), ckdir, true, "", true, schema()), step_path(run, 1));
  EXPECT_EQ(choose_resume_checkpoint(world(), ckdir, true, "", false, schema()), step_path(run, 2));
}

TEST(Resume, APathIsAFileARunDirectoryACheckpointDirectoryOrALatestPointer) {
  const std::string run = run_with_two_checkpoints("resume_paths");
  const CheckpointDir ckdir(run + "/checkpoints");
  // A given file wins over newer ones.
  EXPECT_EQ(choose_resume_checkpoint(world(), ckdir, true, step_path(run, 1), true, schema()), step_path(run, 1));
  EXPECT_EQ(choose_resume_checkpoint(world(), ckdir, true, run, true, schema()), step_path(run, 2));
  EXPECT_EQ(choose_resume_checkpoint(world(), ckdir, true, run + "/checkpoints", true, schema()), step_path(run, 2));
  EXPECT_EQ(choose_resume_checkpoint(world(), ckdir, true, run + "/checkpoints/latest", true, schema()),
            step_path(run, 2));
  // A link to the pointer elsewhere (run/latest -> checkpoints/latest) names the same checkpoint.
  if (world().rank() == 0) fs::create_symlink("checkpoints/latest", run + "/latest");
  world().barrier();
  EXPECT_EQ(fs::canonical(choose_resume_checkpoint(world(), ckdir, true, run + "/latest", true, schema())),
            fs::canonical(step_path(run, 2)));
  // The run's own checkpoint directory does not matter when a PATH is given.
  const std::string other = fresh_dir("resume_paths_other");
  EXPECT_EQ(choose_resume_checkpoint(world(), CheckpointDir(other + "/checkpoints"), true, run, true, schema()),
            step_path(run, 2));
}

TEST(Resume, APathWithoutCheckpointsIsAnError) {
  const std::string empty = fresh_dir("resume_no_ckpt");
  if (world().rank() == 0) fs::create_directories(empty);
  world().barrier();
  expect_error<CheckpointError>(
      [&] { choose_resume_checkpoint(world(), CheckpointDir(empty + "/checkpoints"), true, empty, true, schema()); },
      "no checkpoint found in directory '" + empty + "'", 1);
}

// A file the user names is verified, and a damaged one is an error rather than skipped.
TEST(Resume, ANamedDamagedFileIsAnErrorOnlyWhenVerifying) {
  const std::string run = run_with_two_checkpoints("resume_named_damaged");
  // A file whose name says another step than its contents: the commit protocol never writes one.
  const std::string misnamed = step_path(run, 7);
  if (world().rank() == 0) fs::copy_file(step_path(run, 1), misnamed);
  world().barrier();
  const CheckpointDir ckdir(run + "/checkpoints");
  expect_error<CheckpointError>([&] { choose_resume_checkpoint(world(), ckdir, true, misnamed, true, schema()); },
                                "checkpoint '" + misnamed + "' is damaged: ", 1);
  try {
    choose_resume_checkpoint(world(), ckdir, true, misnamed, true, schema());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(resume from another one, or set [checkpoint] verify_on_resume = false)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(choose_resume_checkpoint(world(), ckdir, true, misnamed, false, schema()), misnamed);
  // Resume alone passes over it to the newest that is what it says.
  EXPECT_EQ(choose_resume_checkpoint(world(), ckdir, true, "", false, schema()), step_path(run, 2));
}

}  // namespace
}  // namespace trident
