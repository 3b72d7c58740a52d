// The peak FLOP/s behind MFU is stable from run to run (train/peak.hpp): measured once per CPU
// model and thread count, recorded, then read back; [train] peak_tflops overrides it; a cache that
// cannot be written only costs a measurement.
#include "train/peak.hpp"

#include "test_env.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace trident {
namespace {

namespace fs = std::filesystem;

struct PeakCache : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("trident_peak_" + std::to_string(::getpid()));
  void SetUp() override {
    fs::create_directories(dir);
    setenv("TRIDENT_PEAK_CACHE", (dir / "sub" / "peak.tsv").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("TRIDENT_PEAK_CACHE");
    fs::remove_all(dir);
  }
};

TEST_F(PeakCache, MeasuredOnceThenReadBackExactly) {
  TrainConfig t;
  const PeakFlops first = resolve_peak_flops(t, test::runtime().world());
  EXPECT_GT(first.flops, 1e8);  // any CPU does more than 0.1 GFLOP/s in a 512^3 SGEMM
  EXPECT_NE(first.source.find("measured now, recorded in"), std::string::npos) << first.source;
  ASSERT_TRUE(fs::exists(dir / "sub" / "peak.tsv"));
  const PeakFlops second = resolve_peak_flops(t, test::runtime().world());
  EXPECT_NE(second.source.find("recorded in"), std::string::npos) << second.source;
  EXPECT_EQ(second.source.find("measured now"), std::string::npos) << second.source;
  EXPECT_NEAR(second.flops, first.flops, 1e-3 * first.flops);  // recorded to 1e-3 GFLOP/s
  // The file holds one line for this machine's key, not one per run.
  std::ifstream in(dir / "sub" / "peak.tsv");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) lines += line.rfind(peak_cache_key() + "\t", 0) == 0 ? 1 : 0;
  EXPECT_EQ(lines, 1);
}

TEST_F(PeakCache, TheDeckOverridesAndOffMeasuresEveryTime) {
  TrainConfig t;
  t.peak_tflops = 2.5;
  const PeakFlops given = resolve_peak_flops(t, test::runtime().world());
  EXPECT_EQ(given.flops, 2.5e12);
  EXPECT_EQ(given.source, "[train] peak_tflops");
  EXPECT_FALSE(fs::exists(dir / "sub" / "peak.tsv"));
  setenv("TRIDENT_PEAK_CACHE", "off", 1);
  EXPECT_EQ(peak_cache_path(), "");
  TrainConfig m;
  EXPECT_NE(resolve_peak_flops(m, test::runtime().world()).source, "");
  EXPECT_FALSE(fs::exists(dir / "sub" / "peak.tsv"));
}

// Another process holding the cache's lock delays a record, never hangs it: a lock released after
// 0.3 s is waited for; one that is never released is given up after set_peak_cache_lock_wait()
// and the value recorded anyway. (A second open file description of the lock file stands for the
// other process: flock locks belong to it, not to the process.)
TEST_F(PeakCache, AHeldLockIsWaitedForThenGivenUp) {
  fs::create_directories(dir / "sub");
  const std::string lock_path = (dir / "sub" / "peak.tsv.lock").string();
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  std::thread release([fd] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::flock(fd, LOCK_UN);
  });
  TrainConfig t;
  const auto t0 = std::chrono::steady_clock::now();
  const PeakFlops first = resolve_peak_flops(t, test::runtime().world());
  release.join();
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.29);
  EXPECT_NE(first.source.find("recorded in"), std::string::npos) << first.source;

  fs::remove(dir / "sub" / "peak.tsv");
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // held for good now
  set_peak_cache_lock_wait(0.5);
  const auto t1 = std::chrono::steady_clock::now();
  const PeakFlops second = resolve_peak_flops(t, test::runtime().world());
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  set_peak_cache_lock_wait(60);
  ::close(fd);
  EXPECT_GE(waited, 0.49);
  EXPECT_LT(waited, 30.0) << "the wait must end at the deadline, not when the holder lets go";
  EXPECT_NE(second.source.find("measured now, recorded in"), std::string::npos) << second.source;
  EXPECT_TRUE(fs::exists(dir / "sub" / "peak.tsv"));
}

// A relative cache path (no folder part) is recorded in the working directory; a cache grown past
// 512 KiB loses its oldest lines, keeps the newest and the new record, and stays readable (under
// the 1 MiB a cache may have), and no temporary file is left behind.
TEST_F(PeakCache, ARelativePathWorksAndTheFileStaysBounded) {
  {
    std::ofstream out(dir / "rel.tsv");
    for (int i = 0; i < 12000; ++i) out << "old machine " << i << " | 1 thread | Serial\t12.500\t2026-01-01\n";
  }
  ASSERT_GT(fs::file_size(dir / "rel.tsv"), std::uintmax_t{512} << 10);
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  setenv("TRIDENT_PEAK_CACHE", "rel.tsv", 1);
  TrainConfig t;
  const PeakFlops p = resolve_peak_flops(t, test::runtime().world());
  fs::current_path(cwd);
  EXPECT_NE(p.source.find("measured now, recorded in rel.tsv"), std::string::npos) << p.source;
  EXPECT_LE(fs::file_size(dir / "rel.tsv"), std::uintmax_t{512} << 10);
  std::ifstream in(dir / "rel.tsv");
  std::string line, first, last_old;
  bool has_new = false;
  while (std::getline(in, line)) {
    if (first.empty()) first = line;
    if (line.rfind(peak_cache_key() + "\t", 0) == 0) has_new = true;
    if (line.rfind("old machine", 0) == 0) last_old = line;
  }
  EXPECT_TRUE(has_new);
  EXPECT_EQ(first.rfind("old machine 0 ", 0), std::string::npos) << "the oldest line must be the one dropped";
  EXPECT_EQ(last_old.rfind("old machine 11999 ", 0), 0u) << last_old;
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace trident
