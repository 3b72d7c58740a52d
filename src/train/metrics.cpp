#include "train/metrics.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/output_file.hpp"
#include "core/memory.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

namespace trident {

namespace {
const std::string kHeader =
    "step,train_loss,val_loss,lr,grad_norm,tokens_per_sec,ms_per_step,mfu,peak_mem_mib,mem_params,mem_grads,"
    "mem_optimizer,mem_gathered,mem_activations,mem_comm,comm_mib,bubble,leg,mem_checkpoint,skipped,skipped_steps,loss_z,loss_scale,"
    "overflow_steps," +
    step_breakdown_columns() + ",offload_read_mib,offload_write_mib,offload_wait_ms";
// Columns are only ever appended (after leg), so files of every version parse; the leg is field
// kLegField of a row that has more fields than that, else (rows written before mem_checkpoint,
// or before leg had a fixed place) its last field.
constexpr int kLegField = 17;

std::string format_row(const MetricsRow& r) {
  std::string val = r.has_val ? log::format("%.9g", r.val_loss) : "";
  return log::format("%lld,%.9g,%s,%.9g,%.9g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.4g",
                     static_cast<long long>(r.step), r.train_loss, val.c_str(), r.lr, r.grad_norm, r.tokens_per_sec,
                     r.ms_per_step, r.mfu, r.peak_mem_mib, r.mem_mib[0], r.mem_mib[1], r.mem_mib[2], r.mem_mib[3],
                     r.mem_mib[4], r.mem_mib[5], r.comm_mib, r.bubble);
}
// The numerics columns (after mem_checkpoint): skipped, skipped_steps, loss_z (empty when NaN),
// loss_scale, overflow_steps.
std::string numerics_fields(const MetricsRow& r) {
  const std::string z = std::isnan(r.loss_z) ? "" : log::format("%.4g", r.loss_z);
  return log::format("%d,%lld,%s,%.17g,%lld", r.skipped ? 1 : 0, static_cast<long long>(r.skipped_steps), z.c_str(),
                     r.loss_scale, static_cast<long long>(r.overflow_steps));
}
// The offload columns (after loss_z): MiB read and written on the offload device, ms waited.
std::string offload_fields(const MetricsRow& r) {
  return log::format("%.6g,%.6g,%.6g", r.offload_read_mib, r.offload_write_mib, r.offload_wait_ms);
}
}  // namespace

MetricsCsv::MetricsCsv(const std::string& path, std::int64_t keep_until_step)
    : MetricsCsv(path, keep_until_step, kHeader) {}

namespace {
std::string superseded_path(const std::string& path) {
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".csv") == 0 ? path.substr(0, path.size() - 4) + ".superseded.csv"
                                                                           : path + ".superseded";
}

std::size_t field_count(const std::string& line) { return static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1; }

/// True when `line` starts as a row of these tables does: with a step number (what atoll reads:
/// after blanks, with a sign).
bool starts_with_step(const std::string& line) {
  size_t d = line.find_first_not_of(" \t");
  if (d != std::string::npos && (line[d] == '-' || line[d] == '+')) ++d;
  return d < line.size() && line[d] >= '0' && line[d] <= '9';
}

/// The data rows of `path` (after its header, the first line that starts with "step" before any
/// row; a file whose header was removed by hand starts with a row). Lines are taken without a trailing CR (a file
/// edited on Windows); blank lines are skipped. `junk`, when given, receives the other lines that
/// are not rows (no step number first: text pasted in, a second header, a note above the header),
/// which the returned rows then omit. `cut_short`, when given, receives the last row if a kill cut
/// it short while it was written: no newline at its end and, unless `newline_ends_rows` (a table
/// whose every row is written with its newline in one piece), fewer fields than the row before it
/// (or the header, for the only row); else "".
std::vector<std::string> data_lines(const std::string& path, std::string* cut_short = nullptr,
                                    std::vector<std::string>* junk = nullptr, bool newline_ends_rows = false) {
  std::vector<std::string> out;
  std::ifstream in(path);
  std::string line, header;
  bool ended = true;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank
    if (header.empty() && out.empty() && line.rfind("step", 0) == 0) header = line;
    else if (junk != nullptr && !starts_with_step(line)) junk->push_back(line);
    else {
      out.push_back(line);
      ended = !in.eof();  // getline stopped at a newline, not at the end of the file
    }
  }
  if (cut_short != nullptr) {
    cut_short->clear();
    if (!ended && newline_ends_rows && !out.empty()) *cut_short = out.back();
    else if (!ended && !out.empty() && (out.size() > 1 || !header.empty())) {
      const std::string& before = out.size() > 1 ? out[out.size() - 2] : header;
      if (field_count(out.back()) < field_count(before)) *cut_short = out.back();
    }
  }
  return out;
}

/// Writes header + lines to `path` through a temporary file and a rename.
void rewrite(const std::string& path, const std::string& header, const std::vector<std::string>& lines) {
  std::string text = header + "\n";
  for (const auto& l : lines) text += l + "\n";
  // A new temporary file and a rename (io/output_file.hpp): a failure leaves neither half a table
  // nor a temporary file behind.
  write_file_atomically(path, text, /*replace=*/true);
}

/// Says on the log how many rows of `path` a resume set aside in `aside`, and which steps.
void report_set_aside(const std::string& path, const std::string& aside, const std::vector<std::string>& rows) {
  if (rows.empty()) return;
  std::int64_t lo = std::atoll(rows.front().c_str()), hi = lo;
  for (const std::string& l : rows) {
    lo = std::min<std::int64_t>(lo, std::atoll(l.c_str()));
    hi = std::max<std::int64_t>(hi, std::atoll(l.c_str()));
  }
  log::info("%zu row(s) of %s (steps %lld-%lld) are not in the history of the state being trained: moved to %s",
            rows.size(), path.c_str(), static_cast<long long>(lo), static_cast<long long>(hi), aside.c_str());
}

/// Says on the log that `rows` lines of `path` that are not rows of its table were set aside.
void report_junk(const std::string& path, const std::string& aside, const std::vector<std::string>& rows) {
  if (rows.empty()) return;
  log::warn("%zu line(s) of %s do not start with a step number (edited by hand?): moved to %s", rows.size(),
            path.c_str(), aside.c_str());
}

std::string leg_of(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream ss(line);
  for (std::string f; std::getline(ss, f, ',');) fields.push_back(f);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  if (fields.size() > static_cast<size_t>(kLegField) + 1) return fields[kLegField];
  return fields.size() > 1 ? fields.back() : std::string();
}
}  // namespace

MetricsCsv::MetricsCsv(const std::string& path, std::int64_t keep_until_step, const std::string& lineage,
                       const std::string& leg)
    : path_(path), leg_(leg) {
  // (leg, first step) pairs; leg k trained the steps (first_k, first_{k+1}].
  std::vector<std::pair<std::string, std::int64_t>> legs;
  std::stringstream ss(lineage);
  std::string item;
  while (std::getline(ss, item, ';')) {
    const auto at = item.find('@');
    if (at != std::string::npos) legs.emplace_back(item.substr(0, at), std::atoll(item.c_str() + at + 1));
  }
  if (legs.empty() || keep_until_step < 0) {  // a new run, or a checkpoint without a lineage
    *this = MetricsCsv(path, keep_until_step);
    leg_ = leg;
    return;
  }
  const std::int64_t s0 = legs.front().second;
  auto in_lineage = [&](const std::string& line) {
    const std::int64_t st = std::atoll(line.c_str());
    if (st > keep_until_step) return false;
    const std::string sg = leg_of(line);
    for (size_t k = 0; k < legs.size(); ++k) {
      const std::int64_t end = k + 1 < legs.size() ? legs[k + 1].second : keep_until_step;
      if (legs[k].first == sg && st > legs[k].second && st <= end) return true;
    }
    return false;
  };
  const std::string aside = superseded_path(path_);
  std::vector<std::string> kept, dropped, junk;
  std::string cut_short;
  // Rows before the recorded lineage (written before lineages existed) follow the step rule.
  for (const std::string& l : data_lines(path_, &cut_short, &junk)) {
    const std::int64_t st = std::atoll(l.c_str());
    if ((st <= s0 && st <= keep_until_step) || in_lineage(l)) kept.push_back(l);
    else dropped.push_back(l);
  }
  // A last row a kill cut short has lost its leg field: say so, rather than call it another history.
  const bool cut = !cut_short.empty() && !dropped.empty() && dropped.back() == cut_short;
  if (cut) {
    const std::int64_t st = std::atoll(cut_short.c_str());
    log::warn("the last row of %s (step %lld) was cut short (no end of line: the run was killed while writing it): "
              "moved to %s%s",
              path_.c_str(), static_cast<long long>(st), aside.c_str(),
              st <= keep_until_step ? "; that step is not trained again, so metrics.csv keeps no row for it" : "");
  }
  report_set_aside(path_, aside, std::vector<std::string>(dropped.begin(), dropped.end() - (cut ? 1 : 0)));
  report_junk(path_, aside, junk);
  dropped.insert(dropped.end(), junk.begin(), junk.end());
  std::vector<std::string> still_aside;
  for (const std::string& l : data_lines(aside)) {
    if (in_lineage(l) && std::find(kept.begin(), kept.end(), l) == kept.end()) kept.push_back(l);
    else still_aside.push_back(l);
  }
  std::stable_sort(kept.begin(), kept.end(),
                   [](const std::string& a, const std::string& b) { return std::atoll(a.c_str()) < std::atoll(b.c_str()); });
  still_aside.insert(still_aside.end(), dropped.begin(), dropped.end());
  // metrics.csv first: a crash between the two renames leaves a row in both files, never in none.
  rewrite(path_, kHeader, kept);
  if (!still_aside.empty()) rewrite(aside, kHeader, still_aside);
  else std::remove(aside.c_str());
}

std::string new_leg_id() {
  const auto ns = std::chrono::steady_clock::now().time_since_epoch().count() ^
                  std::chrono::system_clock::now().time_since_epoch().count();
  const std::uint64_t x = static_cast<std::uint64_t>(ns) * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(::getpid()) << 17;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>((x >> 32) ^ x));
  return buf;
}

std::string extend_lineage(const std::string& lineage, const std::string& id, std::int64_t step) {
  std::vector<std::string> items;
  std::stringstream ss(lineage);
  std::string item;
  while (std::getline(ss, item, ';'))
    if (!item.empty()) items.push_back(item);
  items.push_back(id + "@" + std::to_string(step));
  const size_t first = items.size() > 200 ? items.size() - 200 : 0;
  std::string out;
  for (size_t k = first; k < items.size(); ++k) out += (out.empty() ? "" : ";") + items[k];
  return out;
}

MetricsCsv::MetricsCsv(const std::string& path, std::int64_t keep_until_step, const std::string& header)
    : path_(path) {
  // keep_until_step < 0 (a new run, or a resume that found no checkpoint): every existing row
  // is set aside, like the rows past a resume step.
  std::vector<std::string> lines, dropped, junk;
  std::string cut_short;
  // Rows of these tables (samples.csv) are written whole, newline included: one without it was cut.
  const std::vector<std::string> rows = data_lines(path_, &cut_short, &junk, /*newline_ends_rows=*/true);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string& l = rows[i];
    const bool cut = i + 1 == rows.size() && l == cut_short;  // a kill cut it short: never a whole row
    (!cut && keep_until_step >= 0 && std::atoll(l.c_str()) <= keep_until_step ? lines : dropped).push_back(l);
  }
  // Rows past the resume point (an interrupted run's last steps, or a branch this run abandoned)
  // are kept in <name>.superseded.csv, never lost; so are a row cut short and lines that are not rows.
  const std::string aside = superseded_path(path_);
  if (!cut_short.empty())
    log::warn("the last row of %s (step %lld) was cut short (no end of line: the run was killed while writing it): "
              "moved to %s",
              path_.c_str(), static_cast<long long>(std::atoll(cut_short.c_str())), aside.c_str());
  report_set_aside(path_, aside, std::vector<std::string>(dropped.begin(), dropped.end() - (cut_short.empty() ? 0 : 1)));
  report_junk(path_, aside, junk);
  dropped.insert(dropped.end(), junk.begin(), junk.end());
  if (!dropped.empty()) {
    const bool fresh = !std::ifstream(aside).good();
    std::ofstream a(aside, std::ios::app);
    if (fresh) a << header << "\n";
    for (const auto& l : dropped) a << l << "\n";
    a.flush();
    if (!a) throw IoError("cannot write '" + aside + "'");
  }
  // Rewritten as a new file and renamed over the old one: a crash leaves one or the other whole.
  rewrite(path_, header, lines);
}

void MetricsCsv::write(const MetricsRow& r) {
  append(format_row(r) + "," + leg_ + "," + log::format("%.6g", r.mem_mib[static_cast<int>(MemCategory::checkpoint)]) +
         "," + numerics_fields(r) + "," + r.breakdown.csv_fields() + "," + offload_fields(r) + "\n");
}

bool MetricsCsv::record_val_loss(std::int64_t step, double loss) {
  std::ifstream in(path_);
  std::string header;
  if (!std::getline(in, header)) return false;
  in.close();
  if (header.rfind("step", 0) != 0) header = kHeader;  // its header removed or edited by hand during the run
  std::vector<std::string> lines = data_lines(path_);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const size_t c1 = it->find(','), c2 = c1 == std::string::npos ? c1 : it->find(',', c1 + 1);
    if (c2 == std::string::npos || std::atoll(it->c_str()) != step || it->substr(0, c1) != std::to_string(step)) continue;
    const size_t c3 = it->find(',', c2 + 1);
    if (c3 == std::string::npos) return false;
    *it = it->substr(0, c2 + 1) + log::format("%.9g", loss) + it->substr(c3);  // column 3: val_loss
    rewrite(path_, header, lines);
    return true;
  }
  return false;
}

void MetricsCsv::append(const std::string& lines) {
  std::ofstream out(path_, std::ios::app);
  out << lines;
  out.flush();
  if (!out) throw IoError("cannot append to '" + path_ + "': " + std::strerror(errno));
}

SampleLogCsv::SampleLogCsv(const std::string& path, std::int64_t keep_until_step)
    : MetricsCsv(path, keep_until_step, "step,sample,offset") {}

void SampleLogCsv::write(std::int64_t step, std::vector<std::int64_t> pairs) {
  std::vector<std::pair<std::int64_t, std::int64_t>> rows;
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) rows.emplace_back(pairs[i], pairs[i + 1]);
  std::sort(rows.begin(), rows.end());
  std::string text;
  for (const auto& [sample, offset] : rows)
    text += std::to_string(step) + "," + std::to_string(sample) + "," + std::to_string(offset) + "\n";
  append(text);
}

}  // namespace trident
