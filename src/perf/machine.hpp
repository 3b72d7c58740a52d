// perf/machine.hpp: a machine description file (input/machines/*.ini): what one device computes,
// holds and how fast its links are, for the performance model.
//
// Layer: perf. A "device" is what one rank uses: a GPU, or on a CPU build one core. The file is
// INI text; every key is documented in machine_file_help() and docs/scaling.md. Rates are per
// device. Collective costs follow perf/collective_model.hpp: t = alpha + beta_bus * bus_factor *
// bytes, per link class (intra: every rank of the group on one node; inter: otherwise), with an
// optional measured pair per operation that replaces the link's generic one.
// Invariants: a MachineSpec returned by parse_machine_* has every rate > 0 that the model divides
// by, and devices_per_node >= 1.
#pragma once

#include "core/config.hpp"
#include "parallel/communicator.hpp"

#include <array>
#include <string>

namespace trident {

/// Latency and bus time per byte of one collective on one link class.
struct LinkCost {
  double alpha_s = 0.0;   ///< seconds per call
  double beta_bus = 0.0;  ///< seconds per bus byte (1 / bus bandwidth)
};

/// One link class (intra- or inter-node): a generic cost and optional per-operation ones.
struct LinkSpec {
  LinkCost generic;
  /// Per CommOp (all_reduce .. send; index = static_cast<int>(CommOp)); alpha_s < 0: not measured.
  std::array<LinkCost, static_cast<size_t>(CommOp::count_)> per_op;
  LinkSpec() {
    for (auto& c : per_op) c.alpha_s = -1.0;
  }
  /// The cost of `op`: the measured one when given, else the generic one. Local.
  const LinkCost& cost(CommOp op) const {
    const LinkCost& c = per_op[static_cast<size_t>(op)];
    return c.alpha_s >= 0.0 ? c : generic;
  }
};

struct MachineSpec {
  std::string name;         ///< [machine] name
  std::string note;         ///< [machine] note: provenance (measured how, where, under what load; datasheet)
  /// [machine] build = host | cuda: the build of Trident the machine runs. cuda: decks are
  /// validated as for a CUDA build (bf16 GEMMs), so a GPU cluster can be planned from a host build.
  bool cuda_build = false;
  /// [compute] host_gemm = openblas | onednn: the library of fp32 GEMMs the host rates were
  /// measured with (tools/machine_file.sh), to run training with for a comparison; empty: not said
  /// (files before it were OpenBLAS's).
  std::string host_gemm;
  int devices_per_node = 1; ///< ranks (devices) per node
  double memory_bytes = 0;  ///< memory per device available to one rank's tracked buffers, bytes
  double runtime_overhead_bytes = 0;  ///< per rank, beyond the tracked buffers (MPI, libraries, CUDA context)
  // compute, per device
  double peak_flops_f32 = 0;   ///< dense GEMM peak, FLOP/s, fp32
  double peak_flops_bf16 = 0;  ///< bf16 (0: none; fp32 is used)
  double peak_flops_f64 = 0;   ///< fp64 (0: peak_f32 / 2)
  double gemm_efficiency = 1;  ///< share of the peak the model's GEMMs reach (measured: 1 with a measured "peak")
  /// Share of the peak a layer's backward GEMMs reach (dX = dY W, dW = dY^T X, at the shape of
  /// gemm_efficiency); 0: gemm_efficiency.
  double gemm_backward_efficiency = 0;
  double attention_flops = 0;  ///< causal attention fwd+bwd, FLOP/s as bench_kernels counts them (0: GEMM rate)
  double memory_bw = 0;        ///< bytes/s of the memory-bound kernels (LayerNorm, residual, copies)
  /// [compute] copy_gbs: bytes written per second by a copy or fill of a buffer too large for the
  /// caches (the ZeRO engine's passes over its gradient and parameter buffers); 0: memory_bw.
  double copy_bw = 0;
  double gelu_elements_per_s = 0;     ///< GELU fwd+bwd elements/s (0: memory-bound at memory_bw)
  double optimizer_params_per_s = 0;  ///< gradient norm + AdamW parameters/s (at optimizer_params)
  /// The shard size optimizer_params_per_s was measured at, and the rate at a larger shard that
  /// streams from memory (optimizer_large_params_per_s at optimizer_large_params); 0: one rate for
  /// every size. See optimizer_rate().
  double optimizer_params = 0, optimizer_large_params = 0, optimizer_large_params_per_s = 0;
  double overlap_efficiency = 1.0;    ///< share of overlappable communication actually hidden (0: none)
  /// [storage] read_gbs / write_gbs: the offload device's bandwidth as one rank sees it (its share
  /// when the ranks of a node share a disk), bytes/s; 0: not given (decks with offload cannot be modelled).
  double storage_read_bw = 0, storage_write_bw = 0;
  /// [host] link_gbs: host <-> device copy bandwidth per rank, one direction, bytes/s (page-locked
  /// memory; the rank's share of its PCIe or C2C link); [host] optimizer_gparams: the AdamW rate on
  /// the host CPU per rank, parameters/s. 0: not given (decks with offload_optimizer = host cannot
  /// be modelled).
  double host_link_bw = 0, host_optimizer_params_per_s = 0;
  LinkSpec intra, inter;

  /// GEMM rate (FLOP/s) for compute type `t` (f32, bf16 or f64), times gemm_efficiency. Local.
  double gemm_flops(Precision t) const;
  /// Gradient norm + AdamW rate (parameters/s) on a shard of `n` parameters: optimizer_params_per_s
  /// when only it is given (or n <= optimizer_params); optimizer_large_params_per_s for n >=
  /// optimizer_large_params; in between, the time per parameter interpolated linearly in log n
  /// (the shard leaves the caches gradually). 0 when no rate is given (the caller falls back to
  /// memory_bw). Local, pure.
  double optimizer_rate(double n) const;
};

/// Reads a machine file. Throws ConfigError (exit 2) naming the file, section and key for a missing
/// file, a syntax error, an unknown key, a value that is not a number or out of range, or a
/// missing required key ([machine] devices_per_node, memory_per_device_gib, [compute]
/// peak_tflops_float, [link.intra] alpha_us and busbw_gbs). Local.
MachineSpec parse_machine_file(const std::string& path);
/// Same for INI text in memory; `source` names it in errors. Local.
MachineSpec parse_machine_text(const std::string& text, const std::string& source);

/// Every key of a machine file with its unit and meaning (for `trident plan --help`). Local.
std::string machine_file_help();

}  // namespace trident
