#include "train/metrics.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

namespace trident {

namespace {
const char* kHeader =
    "step,train_loss,val_loss,lr,grad_norm,tokens_per_sec,ms_per_step,mfu,peak_mem_mib,mem_params,mem_grads,"
    "mem_optimizer,mem_gathered,mem_activations,mem_comm,comm_mib,bubble";

std::string format_row(const MetricsRow& r) {
  std::string val = r.has_val ? log::format("%.9g", r.val_loss) : "";
  return log::format("%lld,%.9g,%s,%.9g,%.9g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.4g",
                     static_cast<long long>(r.step), r.train_loss, val.c_str(), r.lr, r.grad_norm, r.tokens_per_sec,
                     r.ms_per_step, r.mfu, r.peak_mem_mib, r.mem_mib[0], r.mem_mib[1], r.mem_mib[2], r.mem_mib[3],
                     r.mem_mib[4], r.mem_mib[5], r.comm_mib, r.bubble);
}
}  // namespace

MetricsCsv::MetricsCsv(const std::string& path, std::int64_t keep_until_step)
    : MetricsCsv(path, keep_until_step, kHeader) {}

MetricsCsv::MetricsCsv(const std::string& path, std::int64_t keep_until_step, const std::string& header)
    : path_(path) {
  std::vector<std::string> lines = {header}, dropped;
  if (keep_until_step >= 0) {
    std::ifstream in(path);
    std::string line;
    for (bool first = true; std::getline(in, line); first = false) {
      if (first || line.empty()) continue;
      (std::atoll(line.c_str()) <= keep_until_step ? lines : dropped).push_back(line);
    }
  }
  // Rows past the resume point (an interrupted run's last steps, or a branch this run abandoned)
  // are kept in <name>.superseded.csv, never lost.
  if (!dropped.empty()) {
    const std::string aside = path_.size() > 4 && path_.compare(path_.size() - 4, 4, ".csv") == 0
                                  ? path_.substr(0, path_.size() - 4) + ".superseded.csv"
                                  : path_ + ".superseded";
    const bool fresh = !std::ifstream(aside).good();
    std::ofstream a(aside, std::ios::app);
    if (fresh) a << header << "\n";
    for (const auto& l : dropped) a << l << "\n";
    a.flush();
    if (!a) throw IoError("cannot write '" + aside + "'");
  }
  // Rewritten as a new file and renamed over the old one: a crash leaves one or the other whole.
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& l : lines) out << l << "\n";
    out.flush();
    if (!out) throw IoError("cannot write metrics file '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0)
    throw IoError("cannot rename '" + tmp + "' to '" + path_ + "': " + std::strerror(errno));
}

void MetricsCsv::write(const MetricsRow& r) { append(format_row(r) + "\n"); }

void MetricsCsv::append(const std::string& lines) {
  std::ofstream out(path_, std::ios::app);
  out << lines;
  out.flush();
  if (!out) throw IoError("cannot append to '" + path_ + "'");
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
