// perf/machine.cpp: see machine.hpp.
#include "perf/machine.hpp"

#include "core/error.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace trident {

namespace {

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const auto b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

struct KeyDef {
  std::string section, key, help;
  bool required = false;
  std::function<void(MachineSpec&, double)> set;  // numbers; name/note handled apart
};

const char* kOps[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send"};
const CommOp kOpIds[] = {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather, CommOp::broadcast, CommOp::send};

std::vector<KeyDef> key_defs() {
  std::vector<KeyDef> k;
  const double GiB = 1024.0 * 1024 * 1024, MiB = 1024.0 * 1024;
  k.push_back({"machine", "devices_per_node", "ranks (GPUs, or cores on a CPU build) per node", true,
               [](MachineSpec& m, double v) { m.devices_per_node = static_cast<int>(v); }});
  k.push_back({"machine", "memory_per_device_gib", "memory one rank may fill, GiB", true,
               [GiB](MachineSpec& m, double v) { m.memory_bytes = v * GiB; }});
  k.push_back({"machine", "runtime_overhead_mib", "per-rank memory besides Trident's tracked buffers, MiB (default 0)",
               false, [MiB](MachineSpec& m, double v) { m.runtime_overhead_bytes = v * MiB; }});
  k.push_back({"compute", "peak_tflops_float", "dense fp32 GEMM peak per device, TFLOP/s", true,
               [](MachineSpec& m, double v) { m.peak_flops_f32 = v * 1e12; }});
  k.push_back({"compute", "peak_tflops_bf16", "bf16 GEMM peak, TFLOP/s (0/absent: none)", false,
               [](MachineSpec& m, double v) { m.peak_flops_bf16 = v * 1e12; }});
  k.push_back({"compute", "peak_tflops_double", "fp64 GEMM peak, TFLOP/s (absent: float / 2)", false,
               [](MachineSpec& m, double v) { m.peak_flops_f64 = v * 1e12; }});
  k.push_back({"compute", "gemm_efficiency", "share of the peak the model's GEMMs reach, (0, 1] (default 1)", false,
               [](MachineSpec& m, double v) { m.gemm_efficiency = v; }});
  k.push_back({"compute", "gemm_backward_efficiency",
               "share of the peak a layer's backward GEMMs reach (dX = dY W, dW = dY^T X), (0, 1] (absent: "
               "gemm_efficiency)",
               false, [](MachineSpec& m, double v) { m.gemm_backward_efficiency = v; }});
  k.push_back({"compute", "attention_tflops", "causal attention fwd+bwd rate, TFLOP/s (absent: the GEMM rate)", false,
               [](MachineSpec& m, double v) { m.attention_flops = v * 1e12; }});
  k.push_back({"compute", "memory_gbs", "bandwidth of the memory-bound kernels, GB/s (1e9 B/s)", true,
               [](MachineSpec& m, double v) { m.memory_bw = v * 1e9; }});
  k.push_back({"compute", "copy_gbs",
               "bytes written per second by a copy or fill of a buffer beyond the caches, GB/s (the ZeRO engine's "
               "passes over its gradient and parameter buffers; absent: memory_gbs)",
               false, [](MachineSpec& m, double v) { m.copy_bw = v * 1e9; }});
  k.push_back({"compute", "gelu_gelems", "GELU fwd+bwd rate, 1e9 elements/s (absent: memory-bound)", false,
               [](MachineSpec& m, double v) { m.gelu_elements_per_s = v * 1e9; }});
  k.push_back({"compute", "optimizer_gparams", "gradient norm + AdamW rate, 1e9 parameters/s (absent: memory-bound)",
               false, [](MachineSpec& m, double v) { m.optimizer_params_per_s = v * 1e9; }});
  k.push_back({"compute", "optimizer_params",
               "the shard size optimizer_gparams was measured at, parameters (needed with optimizer_large_gparams)",
               false, [](MachineSpec& m, double v) { m.optimizer_params = v; }});
  k.push_back({"compute", "optimizer_large_gparams",
               "the same rate on a shard that streams from memory, 1e9 parameters/s (absent: optimizer_gparams at "
               "every size; between the two sizes the time per parameter is interpolated in log size)",
               false, [](MachineSpec& m, double v) { m.optimizer_large_params_per_s = v * 1e9; }});
  k.push_back({"compute", "optimizer_large_params",
               "the shard size optimizer_large_gparams was measured at, parameters (> optimizer_params)", false,
               [](MachineSpec& m, double v) { m.optimizer_large_params = v; }});
  k.push_back({"compute", "overlap_efficiency",
               "share of overlappable communication (ZeRO prefetch, overlap_reduce) that is hidden, [0, 1] (default 1)",
               false, [](MachineSpec& m, double v) { m.overlap_efficiency = v; }});
  k.push_back({"storage", "read_gbs",
               "offload device read bandwidth per rank, GB/s (needed by decks with offload_optimizer = nvme)", false,
               [](MachineSpec& m, double v) { m.storage_read_bw = v * 1e9; }});
  k.push_back({"storage", "write_gbs", "offload device write bandwidth per rank, GB/s (likewise)", false,
               [](MachineSpec& m, double v) { m.storage_write_bw = v * 1e9; }});
  k.push_back({"host", "link_gbs",
               "host <-> device copy bandwidth per rank, one direction, page-locked, GB/s (needed by decks with "
               "offload_optimizer = host)",
               false, [](MachineSpec& m, double v) { m.host_link_bw = v * 1e9; }});
  k.push_back({"host", "optimizer_gparams", "AdamW rate on the host CPU per rank, 1e9 parameters/s (likewise)", false,
               [](MachineSpec& m, double v) { m.host_optimizer_params_per_s = v * 1e9; }});
  for (const char* link : {"intra", "inter"}) {
    const bool intra = std::string(link) == "intra";
    auto L = [intra](MachineSpec& m) -> LinkSpec& { return intra ? m.intra : m.inter; };
    const std::string sec = std::string("link.") + link;
    k.push_back({sec, "alpha_us", "latency per collective call, microseconds", intra,
                 [L](MachineSpec& m, double v) { L(m).generic.alpha_s = v * 1e-6; }});
    k.push_back({sec, "busbw_gbs", "bus bandwidth (nccl-tests' busbw), GB/s", intra,
                 [L](MachineSpec& m, double v) { L(m).generic.beta_bus = 1.0 / (v * 1e9); }});
    for (int i = 0; i < 5; ++i) {
      const auto id = static_cast<size_t>(kOpIds[i]);
      k.push_back({sec, std::string(kOps[i]) + "_alpha_us", std::string("measured latency of ") + kOps[i] + ", us",
                   false, [L, id](MachineSpec& m, double v) { L(m).per_op[id].alpha_s = v * 1e-6; }});
      k.push_back({sec, std::string(kOps[i]) + "_busbw_gbs",
                   std::string("measured asymptotic bus bandwidth of ") + kOps[i] + ", GB/s", false,
                   [L, id](MachineSpec& m, double v) { L(m).per_op[id].beta_bus = 1.0 / (v * 1e9); }});
    }
  }
  return k;
}

}  // namespace

double MachineSpec::gemm_flops(Precision t) const {
  double peak = peak_flops_f32;
  if (t == Precision::bf16 && peak_flops_bf16 > 0) peak = peak_flops_bf16;
  if (t == Precision::f64) peak = peak_flops_f64 > 0 ? peak_flops_f64 : peak_flops_f32 / 2;
  return peak * gemm_efficiency;
}

double MachineSpec::optimizer_rate(double n) const {
  if (!(optimizer_large_params_per_s > 0) || n <= optimizer_params) return optimizer_params_per_s;
  if (n >= optimizer_large_params) return optimizer_large_params_per_s;
  const double f = std::log(n / optimizer_params) / std::log(optimizer_large_params / optimizer_params);
  const double per_param = (1.0 - f) / optimizer_params_per_s + f / optimizer_large_params_per_s;
  return 1.0 / per_param;
}

MachineSpec parse_machine_text(const std::string& text, const std::string& source) {
  const auto defs = key_defs();
  MachineSpec m;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line, section;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const auto hash = line.find_first_of("#;");
    if (hash != std::string::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::string where = source + ":" + std::to_string(lineno);
    if (line.front() == '[') {
      require_config(line.back() == ']', where + ": a section header must end with ']'");
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const auto eq = line.find('=');
    require_config(eq != std::string::npos, where + ": expected key = value");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    require_config(!section.empty(), where + ": key '" + key + "' before any [section]");
    const std::string dotted = "[" + section + "] " + key;
    require_config(seen.insert(section + "." + key).second, where + ": " + dotted + " given twice");
    if (section == "machine" && key == "name") {
      m.name = value;
      continue;
    }
    if (section == "machine" && key == "note") {
      m.note = value;
      continue;
    }
    if (section == "machine" && key == "build") {
      require_config(value == "host" || value == "cuda", where + ": [machine] build = " + value + " is not host or cuda");
      m.cuda_build = value == "cuda";
      continue;
    }
    if (section == "compute" && key == "host_gemm") {
      require_config(value == "openblas" || value == "onednn",
                     where + ": [compute] host_gemm = " + value + " is not openblas or onednn");
      m.host_gemm = value;
      continue;
    }
    const KeyDef* d = nullptr;
    for (const auto& k : defs)
      if (k.section == section && k.key == key) d = &k;
    require_config(d != nullptr, where + ": unknown key " + dotted + " (see `trident plan --help`)");
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    // Decimal only: strtod also reads hexadecimal ("0x10" = 16), which no one writes here on purpose.
    const bool hex = value.find_first_of("xX") != std::string::npos;
    require_config(!value.empty() && !hex && end != nullptr && *end == '\0' && std::isfinite(v),
                   where + ": " + dotted + " = " + value + " is not a (decimal) number");
    require_config(v >= 0, where + ": " + dotted + " = " + value + " must not be negative");
    const bool rate = key.find("busbw") != std::string::npos || key == "memory_gbs" || key == "copy_gbs" || key.rfind("peak_", 0) == 0 ||
                      key == "attention_tflops" || key == "gelu_gelems" || key == "optimizer_gparams" ||
                      key == "optimizer_large_gparams" || key == "optimizer_params" || key == "optimizer_large_params" ||
                      section == "storage" || section == "host";
    require_config(!(rate && v == 0 && key != "peak_tflops_bf16"), where + ": " + dotted + " must be > 0");
    // In this file's units (TFLOP/s, GB/s, G elements/s, ...) a rate outside [1e-9, 1e15] is a typo
    // (a missing exponent sign, the wrong unit), and would print step times of hundreds of digits.
    require_config(!(rate && v != 0 && (v < 1e-9 || v > 1e15)),
                   where + ": " + dotted + " = " + value + " is outside [1e-9, 1e15] (see `trident plan --help` for units)");
    if (key == "devices_per_node")
      require_config(v >= 1 && v == std::floor(v) && v <= 2147483647.0,
                     where + ": " + dotted + " must be a whole number from 1 to 2147483647");
    if (key == "gemm_efficiency" || key == "gemm_backward_efficiency")
      require_config(v > 0 && v <= 1, where + ": " + dotted + " must be in (0, 1]");
    if (key == "overlap_efficiency") require_config(v <= 1, where + ": " + dotted + " must be in [0, 1]");
    // Every other value (a latency, an overhead) beyond 1e15 of its unit is a typo, too.
    require_config(rate || v <= 1e15, where + ": " + dotted + " = " + value + " is above 1e15 (see `trident plan --help` for units)");
    // From 1 KiB to 2^30 GiB (an exbibyte) per device: beyond either end is a typo that would fit
    // nothing or everything (1e-300 printed "0 fit in 0 MiB per rank").
    if (key == "memory_per_device_gib")
      require_config(v >= 1.0 / 1048576 && v <= 1073741824.0,
                     where + ": " + dotted + " = " + value + " must be from 2^-20 to 2^30 (GiB: 1 KiB to an exbibyte)");
    d->set(m, v);
  }
  for (const auto& k : defs)
    if (k.required)
      require_config(seen.count(k.section + "." + k.key) > 0,
                     source + ": missing [" + k.section + "] " + k.key + " (" + k.help + ")");
  // The optimizer rate at two shard sizes comes whole (both rates, both sizes), the sizes in order.
  const char* const pair[] = {"optimizer_gparams", "optimizer_params", "optimizer_large_gparams", "optimizer_large_params"};
  if (seen.count("compute.optimizer_params") + seen.count("compute.optimizer_large_gparams") +
          seen.count("compute.optimizer_large_params") > 0) {
    for (const char* k : pair)
      require_config(seen.count(std::string("compute.") + k) > 0,
                     source + ": [compute] " + k + " is missing: the optimizer rate at two shard sizes needs " +
                         "optimizer_gparams at optimizer_params and optimizer_large_gparams at optimizer_large_params");
    require_config(m.optimizer_large_params > m.optimizer_params,
                   source + ": [compute] optimizer_large_params must exceed optimizer_params");
  }
  // A file that describes one node only may omit the inter-node link: then it is the intra one.
  if (seen.count("link.inter.alpha_us") == 0 && seen.count("link.inter.busbw_gbs") == 0) m.inter = m.intra;
  require_config(m.inter.generic.beta_bus > 0, source + ": [link.inter] needs busbw_gbs with alpha_us");
  if (m.name.empty()) m.name = source;
  return m;
}

MachineSpec parse_machine_file(const std::string& path) {
  std::error_code ec;
  require_config(!std::filesystem::is_directory(path, ec), "machine file " + path + " is a directory, not a machine file");
  std::ifstream f(path);
  require_config(static_cast<bool>(f), "machine file " + path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_machine_text(ss.str(), path);
}

std::string machine_file_help() {
  std::string s = "  [machine] name                 a label\n  [machine] note                 provenance (how and where it was measured)\n"
                  "  [machine] build                host (default) or cuda: the Trident build the machine runs; decks are\n"
                  "                                 validated for it (cuda: compute_dtype = bf16 is accepted)\n";
  std::string section = "machine";
  for (const auto& k : key_defs()) {
    if (section == "machine" && k.section == "compute")  // the one word-valued [compute] key, first
      s += "  [compute] host_gemm            openblas or onednn: the library of fp32 GEMMs the rates were measured\n"
           "                                 with (tools/machine_file.sh; train with the same for a comparison)\n";
    section = k.section;
    std::string left = "[" + k.section + "] " + k.key;
    if (left.size() < 30) left.resize(30, ' ');
    s += "  " + left + " " + k.help + (k.required ? " (required)" : "") + "\n";
  }
  return s;
}

}  // namespace trident
