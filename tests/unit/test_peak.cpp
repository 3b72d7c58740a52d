// The peak FLOP/s behind MFU is stable from run to run (train/peak.hpp): measured once per CPU
// model and thread count, recorded, then read back; [train] peak_tflops overrides it; a cache that
// cannot be written only costs a measurement.
#include "train/peak.hpp"

#include "core/types.hpp"
#include "kernels/gemm.hpp"

#include "test_env.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <sstream>

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

// Another process holding the cache's lock delays a record, never hangs it. (A second open file
// description of the lock file stands for the other process: flock locks belong to it, not to the
// process.) A holder that names itself running on this host ("host pid", here this very process)
// is waited for past the deadline until it lets go; one whose file names nobody running (empty) is
// given up after set_peak_cache_lock_wait(), the value recorded anyway, and later locks of the
// process are not waited for again.
TEST_F(PeakCache, AHeldLockIsWaitedForThenGivenUp) {
  fs::create_directories(dir / "sub");
  const std::string lock_path = (dir / "sub" / "peak.tsv.lock").string();
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string me = std::string(host) + " " + std::to_string(::getpid()) + "\n";
  ASSERT_EQ(::pwrite(fd, me.data(), me.size(), 0), static_cast<ssize_t>(me.size()));
  set_peak_cache_lock_wait(0.2);
  std::atomic<double> released_at{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    released_at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::flock(fd, LOCK_UN);
  });
  TrainConfig t;
  const PeakFlops first = resolve_peak_flops(t, test::runtime().world());
  const double returned_at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  release.join();
  // The 512^3 probe runs before the record is taken, so only the record waited.
  EXPECT_GE(returned_at, released_at.load()) << "a running holder must be waited for past the 0.2 s deadline";
  EXPECT_NE(first.source.find("recorded in"), std::string::npos) << first.source;

  fs::remove(dir / "sub" / "peak.tsv");
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // held for good now, by nobody the file names
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  set_peak_cache_lock_wait(0.5);
  const auto t1 = std::chrono::steady_clock::now();
  const PeakFlops second = resolve_peak_flops(t, test::runtime().world());
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_GE(waited, 0.49);
  EXPECT_LT(waited, 30.0) << "the wait must end at the deadline, not when the holder lets go";
  EXPECT_NE(second.source.find("measured now, recorded in"), std::string::npos) << second.source;
  EXPECT_TRUE(fs::exists(dir / "sub" / "peak.tsv"));
  // Given up once: the next record of the process does not wait again (a read of the cache, then
  // a probe and a record without the lock).
  fs::remove(dir / "sub" / "peak.tsv");
  const auto t2 = std::chrono::steady_clock::now();
  const PeakFlops third = resolve_peak_flops(t, test::runtime().world());
  const double probe_and_record = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  EXPECT_NE(third.source.find("measured now, recorded in"), std::string::npos) << third.source;
  EXPECT_LT(probe_and_record, waited) << "no second wait of 0.5 s";
  set_peak_cache_lock_wait(60);
  ::close(fd);
}

// [train] host_gemm = shape reads a recorded shape without taking the lock, so a stopped holder
// of the lock costs nothing for it; the record decides (here against the probe: OpenBLAS recorded
// the faster, oneDNN is faster on this shape in fact). The peak's 512^3 probe is not a shape of
// the chooser, and an empty GEMM is never probed.
TEST_F(PeakCache, ARecordedShapeIsReadWithoutTheLock) {
  if (!host_gemm_available(HostGemm::onednn)) GTEST_SKIP() << "this build has no oneDNN";
  const HostGemm before = host_gemm();
  std::string key[2];
  for (int i = 0; i < 2; ++i) {
    set_host_gemm(i == 0 ? HostGemm::openblas : HostGemm::onednn);
    key[i] = peak_cache_key(Precision::f32) + (i == 0 ? " | openblas" : "");
  }
  set_host_gemm(HostGemm::onednn);
  const GemmShape shape{'N', 'T', 1, 48, 40, 300};
  fs::create_directories(dir / "sub");
  {
    std::ofstream out(dir / "sub" / "peak.tsv");
    out << key[0] << " | shape " << shape.text() << "\t999999.000\t2026-12-03\n";
    out << key[1] << " | shape " << shape.text() << "\t1.000\t2026-12-03\n";
  }
  const int fd = ::open((dir / "sub" / "peak.tsv.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // names nobody: a waiter would wait the deadline
  set_peak_cache_lock_wait(3);
  TrainConfig t;
  t.host_gemm = HostGemmChoice::shape;
  install_host_gemm_chooser(t);
  Buffer<float> a("a", 48 * 300), b("b", 40 * 300), c("c", 48 * 40), e("e", 1);
  const auto t0 = std::chrono::steady_clock::now();
  gemm<float>('N', 'T', 1.f, as_matrix<const float>(a.data(), 48, 300), as_matrix<const float>(b.data(), 40, 300), 0.f,
              as_matrix(c.data(), 48, 40));
  gemm<float>('N', 'T', 1.f, as_matrix<const float>(a.data(), 0, 300), as_matrix<const float>(b.data(), 40, 300), 0.f,
              as_matrix(e.data(), 0, 40));  // empty: the process-wide library, no probe
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto choices = host_gemm_choices();
  set_host_gemm_chooser({});
  set_host_gemm(before);
  set_peak_cache_lock_wait(60);
  ::close(fd);
  EXPECT_LT(took, 2.0) << "a recorded shape must not wait for the lock";
  ASSERT_EQ(choices.size(), 1u) << "the empty GEMM is no shape of the chooser (a probe of it would throw)";
  EXPECT_EQ(choices[0].first.text(), shape.text());
  EXPECT_EQ(choices[0].second, HostGemm::openblas) << "the record, not a probe, decides";
}

// A write that fails (here: a folder stands where the temporary file goes) is only warned about:
// the run goes on with the measured value, and no cache appears.
TEST_F(PeakCache, AFailedWriteIsReportedAndLeavesNoCache) {
  fs::create_directories(dir / "sub" / ("peak.tsv.tmp" + std::to_string(::getpid())));
  TrainConfig t;
  const PeakFlops p = resolve_peak_flops(t, test::runtime().world());
  EXPECT_GT(p.flops, 1e8);
  EXPECT_NE(p.source.find("measured now"), std::string::npos) << p.source;
  EXPECT_EQ(p.source.find("recorded in"), std::string::npos) << p.source;
  EXPECT_FALSE(fs::exists(dir / "sub" / "peak.tsv"));
}

// TRIDENT_PEAK_CACHE naming a file that is not a peak cache (a deck, say): it is left byte for
// byte as it was (no line appended, no lock file beside it) and the peak is measured; a recorded
// rate that is no plausible rate (1e-300 GFLOP/s gave an MFU of hundreds of digits) is measured
// again and replaced.
TEST_F(PeakCache, AFileThatIsNoCacheIsLeftAloneAndImplausibleRatesAreMeasuredAgain) {
  const std::string deck = "[model]\nn_layer = 1\n[train]\nmax_steps = 4\n";
  { std::ofstream(dir / "deck.ini") << deck; }
  setenv("TRIDENT_PEAK_CACHE", (dir / "deck.ini").c_str(), 1);
  TrainConfig t;
  const PeakFlops p = resolve_peak_flops(t, test::runtime().world());
  EXPECT_GT(p.flops, 1e8);
  EXPECT_NE(p.source.find("measured now"), std::string::npos) << p.source;
  std::ifstream in(dir / "deck.ini");
  std::stringstream now;
  now << in.rdbuf();
  EXPECT_EQ(now.str(), deck);
  EXPECT_FALSE(fs::exists(dir / "deck.ini.lock"));
  // Nor a tab-separated file of the same shape that is not one (its third fields are no dates).
  const std::string notes = "notes\tabout\tstuff\nmore\ttabbed\tlines\n";
  { std::ofstream(dir / "notes.tsv") << notes; }
  setenv("TRIDENT_PEAK_CACHE", (dir / "notes.tsv").c_str(), 1);
  EXPECT_GT(resolve_peak_flops(t, test::runtime().world()).flops, 1e8);
  std::ifstream nin(dir / "notes.tsv");
  std::stringstream nnow;
  nnow << nin.rdbuf();
  EXPECT_EQ(nnow.str(), notes);

  { std::ofstream(dir / "tiny.tsv") << peak_cache_key() << "\t1e-300\t2026-01-01\n"; }
  setenv("TRIDENT_PEAK_CACHE", (dir / "tiny.tsv").c_str(), 1);
  const PeakFlops q = resolve_peak_flops(t, test::runtime().world());
  EXPECT_GT(q.flops, 1e8);
  EXPECT_NE(q.source.find("measured now"), std::string::npos) << q.source;
  std::ifstream again(dir / "tiny.tsv");
  std::string line;
  int lines = 0;
  while (std::getline(again, line)) {
    ++lines;
    EXPECT_EQ(line.find("1e-300"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 1);
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
