// core/progress.hpp with an injected clock and sink: the arithmetic of rates and ETAs, the text of
// the lines, and the throttle (how many lines a synthetic run prints in line mode and on a
// terminal). No sleeping: the clock is a variable the test advances.
#include "core/progress.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trident {
namespace {

/// A Progress whose clock and output the test owns.
struct Fixture {
  double now = 100.0;  // any origin: only differences count
  std::vector<std::string> out;
  ProgressSettings settings;

  Progress make(std::int64_t total, ProgressUnit unit, bool tty, ProgressEnd end = ProgressEnd::summary) {
    return Progress("op", total, unit, end, settings, tty, [this](const std::string& s) { out.push_back(s); },
                    [this] { return now; });
  }
};

/// Integer percentages of line-mode lines "op:  42% ...".
std::vector<int> percents(const std::vector<std::string>& lines) {
  std::vector<int> p;
  for (const auto& l : lines) p.push_back(std::stoi(l.substr(l.find(':') + 1)));
  return p;
}

TEST(Progress, LineShowsPercentAmountsRateElapsedAndEta) {
  // 3 MiB of 12 MiB in 2 s: 1.5 MiB/s, 9 MiB left -> ETA 6 s.
  const std::int64_t MiB = 1024 * 1024;
  EXPECT_EQ(Progress::line("prep", 3 * MiB, 12 * MiB, ProgressUnit::bytes, 2.0, 1.0),
            "prep:  25% 3.0/12.0 MiB, 1.5 MiB/s, elapsed 2.0s, ETA 6.0s");
  // Plain counts: 40 of 500 batches in 8 s: 5 batches/s, 460 left -> 92 s.
  EXPECT_EQ(Progress::line("eval", 40, 500, ProgressUnit::batches, 8.0, 1.0),
            "eval:   8% 40/500 batches, 5.0 batches/s, elapsed 8.0s, ETA 1m32s");
  // Tokens get decimal prefixes; the rate its own prefix.
  EXPECT_EQ(Progress::line("t", 2'500'000, 10'000'000, ProgressUnit::tokens, 5.0, 1.0),
            "t:  25% 2.5/10.0 M tokens, 500 k tokens/s, elapsed 5.0s, ETA 15.0s");
  EXPECT_EQ(Progress::final_line("export", 149, 149, ProgressUnit::tensors, 4000.0),
            "export: 100% 149/149 tensors, 0.037 tensors/s, done in 1h06m");
}

TEST(Progress, EtaUnknownUntilEnoughData) {
  // Nothing done yet, or less than eta_after_s elapsed: "ETA --".
  EXPECT_NE(Progress::line("x", 0, 100, ProgressUnit::batches, 5.0, 1.0).find("ETA --"), std::string::npos);
  EXPECT_NE(Progress::line("x", 10, 100, ProgressUnit::batches, 0.5, 1.0).find("ETA --"), std::string::npos);
  EXPECT_NE(Progress::line("x", 0, 100, ProgressUnit::batches, 0.0, 1.0).find("-- batches/s"), std::string::npos);
  // Unknown total: no percentage and no ETA.
  EXPECT_EQ(Progress::line("x", 10, 0, ProgressUnit::batches, 2.0, 1.0), "x: 10 batches, 5.0 batches/s, elapsed 2.0s");
}

TEST(Progress, PercentIsFlooredSo100MeansDone) {
  EXPECT_NE(Progress::line("x", 999, 1000, ProgressUnit::batches, 2.0, 1.0).find("x:  99% "), std::string::npos);
  EXPECT_NE(Progress::line("x", 1000, 1000, ProgressUnit::batches, 2.0, 1.0).find("x: 100% "), std::string::npos);
}

TEST(Progress, Durations) {
  EXPECT_EQ(Progress::amount(512, ProgressUnit::bytes), "512 B");
  EXPECT_EQ(Progress::amount(51200, ProgressUnit::bytes), "50.0 KiB");
  EXPECT_EQ(Progress::amount(3 << 20, ProgressUnit::bytes), "3.0 MiB");
  EXPECT_EQ(Progress::duration(4.24), "4.2s");
  EXPECT_EQ(Progress::duration(185.0), "3m05s");
  EXPECT_EQ(Progress::duration(7380.0), "2h03m");
  EXPECT_EQ(Progress::duration(-1.0), "0.0s");
}

TEST(Progress, LineModeThrottlesToTheInterval) {
  // 100 s of work updated every 0.1 s (1000 updates), interval 10 s, delay 2 s: a line at 2 s,
  // then at most one per 10 s (12, 22, ..., 92: 9 more), plus the final line -> 11 lines.
  Fixture f;
  Progress p = f.make(1000, ProgressUnit::batches, /*tty=*/false);
  for (int i = 1; i <= 1000; ++i) {
    f.now += 0.1;
    p.update(i);
  }
  p.finish();
  ASSERT_EQ(f.out.size(), 11u);
  EXPECT_EQ(p.printed(), 11);
  for (const auto& l : f.out) {
    EXPECT_EQ(l.back(), '\n');
    EXPECT_EQ(l.find('\r'), std::string::npos);
  }
  const std::vector<int> pc = percents(f.out);
  for (size_t i = 1; i < pc.size(); ++i) EXPECT_GE(pc[i], pc[i - 1]);
  EXPECT_EQ(pc.front(), 2);
  EXPECT_EQ(pc.back(), 100);
  EXPECT_NE(f.out.back().find("done in 1m40s"), std::string::npos) << f.out.back();
  // ETA from the average rate: at 12 s, 120 of 1000 at 10/s -> 88 s.
  EXPECT_NE(f.out[1].find("ETA 1m28s"), std::string::npos) << f.out[1];
}

TEST(Progress, TerminalRedrawsInPlaceAtMostFourTimesASecond) {
  Fixture f;
  Progress p = f.make(1000, ProgressUnit::batches, /*tty=*/true);
  for (int i = 1; i <= 1000; ++i) {  // 10 s in steps of 10 ms
    f.now += 0.01;
    p.update(i);
  }
  p.finish();
  // Redraws from 2 s to 10 s, one per 0.25 s at most: <= 33, plus the final line.
  EXPECT_LE(f.out.size(), 34u);
  EXPECT_GE(f.out.size(), 30u);
  for (size_t i = 0; i + 1 < f.out.size(); ++i) {
    EXPECT_EQ(f.out[i].front(), '\r');
    EXPECT_EQ(f.out[i].find('\n'), std::string::npos);
  }
  EXPECT_EQ(f.out.back().front(), '\r');
  EXPECT_EQ(f.out.back().back(), '\n');
  EXPECT_NE(f.out.back().find("100%"), std::string::npos);
}

TEST(Progress, ShortOperationsPrintNothing) {
  for (bool tty : {false, true}) {
    Fixture f;
    Progress p = f.make(10, ProgressUnit::tensors, tty);
    for (int i = 1; i <= 10; ++i) {
      f.now += 0.15;  // 1.5 s in all, under the 2 s delay
      p.update(i);
    }
    p.finish();
    EXPECT_TRUE(f.out.empty()) << (tty ? "tty" : "line");
  }
  // One long update with nothing before it still ends with the final line.
  Fixture f;
  Progress p = f.make(10, ProgressUnit::tensors, false);
  f.now += 5.0;
  p.finish();
  ASSERT_EQ(f.out.size(), 1u);
  EXPECT_NE(f.out[0].find("done in 5.0s"), std::string::npos);
}

TEST(Progress, EraseEndWaitsAnIntervalAndLeavesNoFinalLine) {
  {  // line mode: an 8 s evaluation (under the 10 s interval) prints nothing
    Fixture f;
    Progress p = f.make(80, ProgressUnit::batches, false, ProgressEnd::erase);
    for (int i = 1; i <= 80; ++i) {
      f.now += 0.1;
      p.update(i);
    }
    p.finish();
    EXPECT_TRUE(f.out.empty());
  }
  {  // line mode: a 25 s evaluation prints at 10 and 20 s, no final line
    Fixture f;
    Progress p = f.make(250, ProgressUnit::batches, false, ProgressEnd::erase);
    for (int i = 1; i <= 250; ++i) {
      f.now += 0.1;
      p.update(i);
    }
    p.finish();
    ASSERT_EQ(f.out.size(), 2u);
    EXPECT_EQ(percents(f.out), (std::vector<int>{40, 80}));
  }
  {  // terminal: the in-place line is erased at the end
    Fixture f;
    Progress p = f.make(30, ProgressUnit::batches, true, ProgressEnd::erase);
    for (int i = 1; i <= 30; ++i) {
      f.now += 0.1;
      p.update(i);
    }
    p.finish();
    ASSERT_FALSE(f.out.empty());
    EXPECT_EQ(f.out.back(), "\r\x1b[K");
  }
}

TEST(Progress, MonotoneAndSilenced) {
  Fixture f;
  f.settings.interval_s = f.settings.delay_s = 0.0;  // every update prints
  Progress p = f.make(100, ProgressUnit::batches, false);
  for (int d : {10, 30, 20, 50}) {
    f.now += 1.0;
    p.update(d);
  }
  EXPECT_EQ(percents(f.out), (std::vector<int>{10, 30, 30, 50}));
  EXPECT_EQ(p.done(), 50);

  Fixture g;
  g.settings.mode = ProgressSettings::Mode::off;
  Progress q = g.make(100, ProgressUnit::batches, false);
  g.now += 100.0;
  q.update(100);
  q.finish();
  EXPECT_FALSE(q.active());
  EXPECT_TRUE(g.out.empty());
}

TEST(Progress, UnfinishedTerminalLineIsEndedOnDestruction) {
  Fixture f;
  {
    Progress p = f.make(100, ProgressUnit::batches, true);
    f.now += 3.0;
    p.update(10);  // drawn, then an exception would unwind past it
  }
  ASSERT_EQ(f.out.size(), 2u);
  EXPECT_EQ(f.out.back(), "\n");
}

}  // namespace
}  // namespace trident
