// The peak FLOP/s behind MFU is stable from run to run (train/peak.hpp): measured once per CPU
// model and thread count, recorded, then read back; [train] peak_tflops overrides it; a cache that
// cannot be written only costs a measurement.
#include "train/peak.hpp"

#include "test_env.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace
}  // namespace trident
