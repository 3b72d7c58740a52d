#include "core/progress.hpp"

#include "core/log.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace trident {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Scale of an amount: the divisor and its prefix, chosen from `v` (the total, so that done and
/// total share one prefix).
struct Scale {
  double div = 1.0;
  const char* prefix = "";
};

Scale scale_of(double v, ProgressUnit u) {
  if (u == ProgressUnit::bytes) {
    if (v >= 1024.0 * 1024 * 1024 * 1024) return {1024.0 * 1024 * 1024 * 1024, "Ti"};
    if (v >= 1024.0 * 1024 * 1024) return {1024.0 * 1024 * 1024, "Gi"};
    if (v >= 1024.0 * 1024) return {1024.0 * 1024, "Mi"};
    if (v >= 1024.0) return {1024.0, "Ki"};
    return {};
  }
  if (u == ProgressUnit::tokens) {
    if (v >= 1e12) return {1e12, "T"};
    if (v >= 1e9) return {1e9, "G"};
    if (v >= 1e6) return {1e6, "M"};
    if (v >= 1e3) return {1e3, "k"};
    return {};
  }
  return {};
}

/// "MiB", "M tokens", "tensors", "B".
std::string unit_text(const Scale& s, ProgressUnit u) {
  if (u == ProgressUnit::bytes) return std::string(s.prefix) + "B";
  return (*s.prefix ? std::string(s.prefix) + " " : std::string()) + name_of(u);
}

std::string number(double v, const Scale& s) {
  if (s.div == 1.0 && v == std::floor(v)) return log::format("%.0f", v);
  return log::format("%.1f", v / s.div);
}

std::string amounts(std::int64_t done, std::int64_t total, ProgressUnit u) {
  if (total <= 0) {
    const Scale s = scale_of(static_cast<double>(done), u);
    return number(static_cast<double>(done), s) + " " + unit_text(s, u);
  }
  const Scale s = scale_of(static_cast<double>(total), u);
  return number(static_cast<double>(done), s) + "/" + number(static_cast<double>(total), s) + " " + unit_text(s, u);
}

std::string rate_text(std::int64_t done, double elapsed_s, ProgressUnit u) {
  if (elapsed_s <= 0.0 || done <= 0) return "-- " + unit_text(Scale{}, u) + "/s";
  const double r = static_cast<double>(done) / elapsed_s;
  const Scale s = scale_of(r, u);
  const double v = r / s.div;
  // Three significant digits or so: "512 MiB/s", "3.1 MiB/s", "0.037 tensors/s".
  return (v >= 100.0 ? log::format("%.0f", v) : v >= 1.0 ? log::format("%.1f", v) : log::format("%.2g", v)) + " " +
         unit_text(s, u) + "/s";
}

std::string percent_text(std::int64_t done, std::int64_t total) {
  if (total <= 0) return "";
  // Floored and capped at 99 until all is done, so that 100% means all of it.
  const auto floored = static_cast<std::int64_t>(std::floor(100.0 * static_cast<double>(done) / static_cast<double>(total)));
  const std::int64_t p = done >= total ? 100 : std::clamp<std::int64_t>(floored, 0, 99);
  return log::format("%3lld%% ", static_cast<long long>(p));
}

bool parse_seconds(const char* s, double& out) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(v >= 0.0) || !std::isfinite(v)) return false;
  out = v;
  return true;
}

}  // namespace

const char* name_of(ProgressUnit u) {
  switch (u) {
    case ProgressUnit::bytes: return "bytes";
    case ProgressUnit::tokens: return "tokens";
    case ProgressUnit::tensors: return "tensors";
    case ProgressUnit::batches: return "batches";
    case ProgressUnit::splits: return "splits";
  }
  return "?";
}

ProgressSettings ProgressSettings::from_env() {
  ProgressSettings s;
  if (const char* m = std::getenv("TRIDENT_PROGRESS")) {
    const std::string v = m;
    if (v == "0" || v == "off" || v == "no" || v == "false") s.mode = Mode::off;
    else if (v == "" || v == "1" || v == "auto" || v == "on" || v == "yes" || v == "true") s.mode = Mode::auto_detect;
    else if (v == "line") s.mode = Mode::line;
    else if (v == "tty") s.mode = Mode::tty;
    else
      log::warn("TRIDENT_PROGRESS='%s' is not one of 0, 1, auto, line, tty: progress is shown as with auto", m);
  }
  if (const char* i = std::getenv("TRIDENT_PROGRESS_INTERVAL")) {
    double v = 0.0;
    if (parse_seconds(i, v)) {
      s.interval_s = v;
      s.delay_s = std::min(s.delay_s, v);
      s.redraw_s = std::min(s.redraw_s, v);
    } else {
      log::warn("TRIDENT_PROGRESS_INTERVAL='%s' is not a number of seconds >= 0: keeping %g", i, s.interval_s);
    }
  }
  return s;
}

const ProgressSettings& ProgressSettings::process() {
  static const ProgressSettings s = from_env();
  return s;
}

Progress::Progress(std::string label, std::int64_t total, ProgressUnit unit, ProgressEnd end)
    : label_(std::move(label)), total_(total), unit_(unit), end_(end) {
  if (log::world_rank() != 0) return;  // no clock, no settings: nothing on other ranks
  settings_ = ProgressSettings::process();
  if (settings_.mode == ProgressSettings::Mode::off) return;
  tty_ = settings_.mode == ProgressSettings::Mode::tty ||
         (settings_.mode == ProgressSettings::Mode::auto_detect && isatty(STDOUT_FILENO) == 1);
  sink_ = [](const std::string& s) {
    std::fputs(s.c_str(), stdout);
    std::fflush(stdout);
  };
  clock_ = steady_seconds;
  active_ = true;
  start_ = clock_();
}

Progress::Progress(std::string label, std::int64_t total, ProgressUnit unit, ProgressEnd end,
                   const ProgressSettings& settings, bool tty, Sink sink, Clock clock)
    : label_(std::move(label)), total_(total), unit_(unit), end_(end), settings_(settings), tty_(tty),
      sink_(std::move(sink)), clock_(std::move(clock)) {
  if (settings_.mode == ProgressSettings::Mode::off) return;
  active_ = true;
  start_ = clock_();
}

Progress::~Progress() {
  if (active_ && !finished_ && tty_ && printed_ > 0) {
    try {
      sink_(end_ == ProgressEnd::erase ? "\r\x1b[K" : "\n");
    } catch (...) {
    }
  }
}

void Progress::update(std::int64_t done) {
  if (!active_ || finished_) return;
  done_ = std::max(done_, done);
  // All done: the final line says it (a summary); an erased progress leaves it to the caller.
  if (total_ > 0 && done_ >= total_ && end_ == ProgressEnd::summary) return;
  const double t = clock_() - start_;
  if (tty_) {
    if (t >= settings_.delay_s && (printed_ == 0 || t - last_print_ >= settings_.redraw_s)) print(t, false);
    return;
  }
  const double first = end_ == ProgressEnd::erase ? settings_.interval_s : settings_.delay_s;
  if (t >= first && (printed_ == 0 || t - last_print_ >= settings_.interval_s)) print(t, false);
}

void Progress::finish() {
  if (!active_ || finished_) return;
  finished_ = true;
  const double t = clock_() - start_;
  if (end_ == ProgressEnd::erase) {
    if (tty_ && printed_ > 0) sink_("\r\x1b[K");
    return;
  }
  if (printed_ > 0 || t >= settings_.delay_s) print(t, true);
}

void Progress::print(double t, bool final) {
  const std::string text = final ? final_line(label_, done_, total_, unit_, t)
                                 : line(label_, done_, total_, unit_, t, settings_.eta_after_s);
  // In place: back to the start of the line, the text, then clear what a longer line left.
  sink_(tty_ ? "\r" + text + "\x1b[K" + (final ? "\n" : "") : text + "\n");
  last_print_ = t;
  ++printed_;
}

std::string Progress::amount(std::int64_t v, ProgressUnit unit) { return amounts(v, 0, unit); }

std::string Progress::duration(double seconds) {
  if (!(seconds >= 0.0)) seconds = 0.0;
  if (seconds < 60.0) return log::format("%.1fs", seconds);
  const auto s = static_cast<long long>(std::llround(seconds));
  if (s < 3600) return log::format("%lldm%02llds", s / 60, s % 60);
  return log::format("%lldh%02lldm", s / 3600, (s % 3600) / 60);
}

std::string Progress::line(const std::string& label, std::int64_t done, std::int64_t total, ProgressUnit unit,
                           double elapsed_s, double eta_after_s) {
  std::string eta = "--";
  if (total > 0 && done >= total) {
    eta = duration(0.0);
  } else if (total > 0 && done > 0 && elapsed_s >= eta_after_s && elapsed_s > 0.0) {
    // The average rate since the start: steadier than the last interval's for bursty I/O.
    eta = duration(static_cast<double>(total - done) * elapsed_s / static_cast<double>(done));
  }
  std::string s = label + ": " + percent_text(done, total) + amounts(done, total, unit) + ", " +
                  rate_text(done, elapsed_s, unit) + ", elapsed " + duration(elapsed_s);
  if (total > 0) s += ", ETA " + eta;
  return s;
}

std::string Progress::final_line(const std::string& label, std::int64_t done, std::int64_t total, ProgressUnit unit,
                                 double elapsed_s) {
  return label + ": " + percent_text(done, total) + amounts(done, total, unit) + ", " + rate_text(done, elapsed_s, unit) +
         ", done in " + duration(elapsed_s);
}

}  // namespace trident
