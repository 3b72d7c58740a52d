// train/peak.hpp: the per-rank peak FLOP/s a run quotes MFU against, stable from run to run.
//
// Layer: train. A GEMM probe at every start-up moved with the machine's load (89-105 GFLOP/s on
// one core of the project machine), so the same speed showed as 62% or 74% MFU. The peak is
// now, in this order: [train] peak_tflops when the deck gives it; else the probe's value recorded
// for this CPU model and BLAS thread count in a small cache file (measured carefully once: the
// best of several probes, by world rank 0 alone while the other ranks wait); else measured now
// and recorded. The log says which it is and where the cache lives.
#pragma once

#include "core/config.hpp"
#include "parallel/communicator.hpp"

#include <string>

namespace trident {

struct PeakFlops {
  double flops = 0.0;   ///< per rank, FLOP/s
  std::string source;   ///< "[train] peak_tflops", "measured now, recorded in FILE", "recorded in FILE on DATE"
};

/// The cache file: $TRIDENT_PEAK_CACHE, else $XDG_CACHE_HOME/trident/gemm_peak.tsv, else
/// $HOME/.cache/trident/gemm_peak.tsv; "" when TRIDENT_PEAK_CACHE=off (always measure). Local.
std::string peak_cache_path();

/// The key of this machine in the cache: CPU model (/proc/cpuinfo), the GEMM threads of this
/// process (OpenBLAS's own count, OpenMP's for bf16; 1 without them) and the build's backend, e.g.
/// "Intel(R) Xeon(R) ... | 1 thread | Serial"; with compute = bf16, " | bf16" after it (a
/// separate probe of the bf16 GEMMs). Local.
std::string peak_cache_key(Precision compute = Precision::f32);

/// How long a process waits for another's lock on the peak cache (its ".lock" file, flock) before
/// it goes on without it: 60 s unless set (tests set less). Local (process-wide).
void set_peak_cache_lock_wait(double seconds);

/// The library of this run's fp32 GEMMs ([train] host_gemm; kernels/gemm.hpp HostGemm), set
/// process-wide with set_host_gemm() on every rank, and one sentence for the log. auto: OpenBLAS
/// without oneDNN or with dtype = double; else the faster of both in the 512^3 probe, whose rates
/// rank 0 reads from the peak cache (key peak_cache_key() + " | openblas" / " | onednn") or
/// measures and records, so runs and resumes on one machine choose alike. Collective over world.
/// Call before the first training GEMM and before resolve_peak_flops() (whose probe it changes).
/// shape: as auto for the process-wide library (the MFU peak's); install_host_gemm_chooser() then
/// adds the per-shape choice. Every call first removes the chooser of an earlier run of the process.
std::string resolve_host_gemm(const TrainConfig& cfg, Communicator& world);

/// [train] host_gemm = shape (in a build with oneDNN, dtype float): installs a per-shape chooser
/// (kernels/gemm.hpp set_host_gemm_chooser) that takes, for each fp32 GEMM shape at its first use,
/// the faster library in the two lines of the peak cache recorded for that shape, or probes both
/// on that shape (time_host_gemm, 5 alternating rounds) and records them when steady (each
/// library's two best rounds within 10%); an unsteady probe decides this process only. A recorded
/// shape is read without a lock; to probe, the ranks of one machine take the cache's file lock in
/// turn (waited for while its holder runs on this machine; a stopped or vanished holder for at most
/// set_peak_cache_lock_wait(), then no lock for the rest of the process), so they, later runs and
/// resumes pick alike for every recorded shape. Ranks may pick differently for a shape probed
/// unsteadily, without a cache (TRIDENT_PEAK_CACHE=off), with an unwritable one or after the lock
/// was given up (a last-bits difference: use a fixed library for runs that must equal another
/// layout bitwise). An empty GEMM takes the process-wide library. Otherwise removes any chooser. Call after resolve_host_gemm()
/// and resolve_peak_flops() (whose 512^3 probe is the process-wide library's). Local.
void install_host_gemm_chooser(const TrainConfig& cfg);

/// "N shapes: oneDNN for a, OpenBLAS for b (shapes...)": what the per-shape chooser decided so
/// far in this process; "" without one. Local.
std::string host_gemm_choices_text();

/// With cfg.compute_dtype = bf16, checks that every rank's GEMMs can take bf16 inputs (a CUDA build,
/// or oneDNN on a CPU with AVX512-BF16): each rank checks its own CPU and a refusal on some ranks
/// only (mixed nodes) is agreed, so every rank stops instead of the others waiting in the next
/// collective. Collective over world. Throws ConfigError "<context>: <why>. <advice>" (exit 2).
void require_bf16_gemms(const TrainConfig& cfg, Communicator& world, const std::string& context,
                        const std::string& advice);

/// The peak as described above, for the GEMM inputs of cfg.compute_dtype (and, for fp32, the
/// library resolve_host_gemm() chose: its own cache line). Collective over world (rank 0 decides; the value and its source
/// are broadcast). A cache that cannot be read or written is only warned about.
PeakFlops resolve_peak_flops(const TrainConfig& cfg, Communicator& world);

}  // namespace trident
