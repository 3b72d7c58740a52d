// core/progress.hpp: progress with an ETA for long operations (prep, ckpt export and reshard,
// checkpoint load and write, whole-split evaluation).
//
// Layer: core (std only). Local: a Progress never communicates, on any rank; it prints on world
// rank 0 only (log::world_rank()), and on every other rank each call returns at once without
// reading the clock. It only reads a clock and writes text, so it never changes a result.
//
// Where and how it prints. Progress goes to stdout, the stream of Trident's log (log::info), so
// that its lines sit in order among the log's lines in a batch log. The mode follows stdout:
// - on a terminal (isatty(stdout)) one line is redrawn in place with '\r' at most 4 times a
//   second, and ends with a final line;
// - otherwise (a Slurm output file, a pipe) a full line is printed at most every
//   TRIDENT_PROGRESS_INTERVAL seconds (default 10), so a batch log gets a few lines per minute.
// Nothing is printed for an operation shorter than min(2 s, interval): short operations look as
// before. A line shows the percentage, done/total with units, the average rate, the elapsed time
// and the ETA from the average rate ("ETA --" until a second of data has come in); the final line
// gives the total time.
//
// Environment (read once per process, documented in docs/install.md and `trident --help`):
//   TRIDENT_PROGRESS=0|off     no progress at all;     =1|auto (default): by stdout as above;
//   TRIDENT_PROGRESS=line|tty  force line mode or in-place mode whatever stdout is;
//   TRIDENT_PROGRESS_INTERVAL=S  seconds between lines in line mode (default 10; 0 prints on
//                                every update, which the tests use).
// A bad value is warned about once and the default kept: progress never stops a run.
//
// Invariants: the percentages printed never decrease (done is clamped to the largest value
// seen); 100% only when done >= total; at most 1 + (T - delay) / interval lines plus the final
// one in line mode for an operation of T seconds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace trident {

/// What the work of a Progress is counted in; decides how amounts and rates are written.
enum class ProgressUnit {
  bytes,    ///< binary prefixes: "1.5/4.0 GiB", "310.2 MiB/s"
  tokens,   ///< decimal prefixes: "1.2/5.0 M tokens", "3.4 M tokens/s"
  tensors,  ///< plain counts: "12/149 tensors", "3.1 tensors/s"
  batches,  ///< plain counts: "40/500 batches"
  splits,   ///< plain counts: "12/96 splits" (trident plan's tp x pp splits of the ranks)
};

/// Name of a unit as printed ("bytes", "tokens", "tensors", "batches", "splits").
const char* name_of(ProgressUnit u);

/// How an operation's progress ends.
enum class ProgressEnd {
  /// A final line "LABEL: 100% ..., done in 3.9s" (when the operation took longer than the delay).
  summary,
  /// No final line: the caller logs its own result line (an evaluation's "val loss" line). On a
  /// terminal the in-place line is erased; in line mode the first line waits for one whole
  /// interval, so an evaluation shorter than the interval adds no line to the step log.
  erase,
};

/// The environment's settings (see the header comment). Local.
struct ProgressSettings {
  enum class Mode { off, auto_detect, tty, line };
  Mode mode = Mode::auto_detect;
  double interval_s = 10.0;  ///< line mode: seconds between lines (>= 0)
  double delay_s = 2.0;      ///< nothing printed before; min(2, interval_s)
  double redraw_s = 0.25;    ///< terminal: seconds between redraws; min(0.25, interval_s)
  double eta_after_s = 1.0;  ///< "ETA --" before this much elapsed time (and before any work is done)

  /// Settings from TRIDENT_PROGRESS and TRIDENT_PROGRESS_INTERVAL. Warns (log::warn, rank 0)
  /// about a value it does not understand and keeps the default. Local.
  static ProgressSettings from_env();
  /// from_env(), read once per process and cached. Local.
  static const ProgressSettings& process();
};

/// Reports the progress of one long operation. Construct before the work starts, call update()
/// (or add()) as work is done, finish() when it is done. Not thread-safe: use it from one thread.
class Progress {
 public:
  /// Seconds on a steady clock.
  using Clock = std::function<double()>;
  /// Writes text exactly as given (it carries its own '\r' and '\n').
  using Sink = std::function<void(const std::string&)>;

  /// The production reporter: settings from the environment, mode from isatty(stdout), output to
  /// stdout (flushed), steady clock; a no-op on world ranks other than 0 or when silenced.
  /// `total` is the work in `unit`s (<= 0: unknown, then no percentage and no ETA). Local.
  Progress(std::string label, std::int64_t total, ProgressUnit unit, ProgressEnd end = ProgressEnd::summary);
  /// Everything injected (tests): `tty` selects in-place mode, settings.mode is ignored except
  /// `off`. Local.
  Progress(std::string label, std::int64_t total, ProgressUnit unit, ProgressEnd end, const ProgressSettings& settings,
           bool tty, Sink sink, Clock clock);
  /// On an early exit (an exception, an abandoned evaluation: no finish()) a line drawn in place
  /// is ended with '\n' (ProgressEnd::erase: erased) so what follows starts on its own line;
  /// nothing else is printed.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// `done` units of the total are done (smaller than an earlier value: kept at the earlier one).
  /// Prints when the throttle allows, except at done >= total with ProgressEnd::summary (the
  /// final line follows). Local; cheap enough to call per MiB or per batch.
  void update(std::int64_t done);
  /// update(done() + n). Local.
  void add(std::int64_t n) { update(done_ + n); }
  /// The operation is done: the final line (ProgressEnd::summary, when it took longer than the
  /// delay) or the erasure of the in-place line (ProgressEnd::erase). Idempotent. Local.
  void finish();

  std::int64_t done() const { return done_; }
  /// Lines (line mode) or redraws (terminal) printed so far, the final line included.
  int printed() const { return printed_; }
  /// True when this reporter prints at all (rank 0, not silenced).
  bool active() const { return active_; }

  /// One progress line without '\r'/'\n', e.g. "prep: 42% 5.0/12.0 MiB, 3.1 MiB/s, elapsed 1.6s,
  /// ETA 2.3s". Pure; exposed for tests.
  static std::string line(const std::string& label, std::int64_t done, std::int64_t total, ProgressUnit unit,
                          double elapsed_s, double eta_after_s);
  /// The final line, e.g. "prep: 100% 12.0/12.0 MiB, 3.1 MiB/s, done in 3.9s". Pure.
  static std::string final_line(const std::string& label, std::int64_t done, std::int64_t total, ProgressUnit unit,
                                double elapsed_s);
  /// A duration as "4.2s", "3m05s" or "2h03m". Pure.
  static std::string duration(double seconds);
  /// An amount as the lines print it alone, e.g. "512 B", "50.0 KiB", "3.2 MiB" for bytes (binary
  /// prefixes), "1.5 M tokens". Pure.
  static std::string amount(std::int64_t v, ProgressUnit unit);

 private:
  void print(double t, bool final);

  std::string label_;
  std::int64_t total_ = 0, done_ = 0;
  ProgressUnit unit_;
  ProgressEnd end_;
  ProgressSettings settings_;
  bool tty_ = false, active_ = false, finished_ = false;
  Sink sink_;
  Clock clock_;
  double start_ = 0.0, last_print_ = 0.0;
  int printed_ = 0;
};

}  // namespace trident
