// perf/collective_model.hpp: the alpha-beta (latency-bandwidth) model of one collective, the bus
// bandwidth factors of nccl-tests, and the least-squares fit that calibrates it from measurements.
//
// Layer: perf (the performance model; above train, below apps). Pure arithmetic: no MPI, no Kokkos.
//
// Conventions (shared by bench/bench_collectives, the machine files and the step model):
//  - The *message size* S of an operation is the bytes of its largest buffer, as nccl-tests counts
//    it: all_reduce and broadcast the buffer, reduce_scatter the full input (n blocks), all_gather
//    the full output (n blocks), send/recv the message.
//  - algbw = S / t. busbw = algbw * bus_factor(op, n), nccl-tests' PERFORMANCE.md
//    (github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md, "Bus bandwidth"): all_reduce
//    2(n-1)/n, reduce_scatter and all_gather (n-1)/n, broadcast 1, send/recv 1. busbw is the
//    bandwidth each link carries under the ring algorithm, so it can be compared with the link's
//    peak whatever n is.
//  - The model of one call over n ranks: t(S) = alpha + beta_bus * bus_factor(op, n) * S
//    (Hockney's alpha-beta model; Thakur, Rabenseifner & Gropp 2005, "Optimization of collective
//    communication operations in MPICH", sec. 2). alpha is the per-call latency (s), beta_bus the
//    time per bus byte (s/B, the inverse of the asymptotic busbw). A fit at one n is extrapolated to
//    other n through bus_factor only; alpha is kept as measured (it grows with n in a ring, log n
//    in a tree: a machine file measured at the n of interest is the honest source).
#pragma once

#include "parallel/communicator.hpp"

#include <vector>

namespace trident {

/// nccl-tests' bus-bandwidth factor of `op` over `n` ranks (header comment). 0 for n == 1 on the
/// collectives (nothing crosses a link), 1 for send/recv and broadcast. Local, pure. Throws Error
/// for barrier and n < 1.
double bus_factor(CommOp op, int n);

/// A latency-bandwidth pair: t = alpha_s + beta_s_per_byte * bytes.
struct AlphaBeta {
  double alpha_s = 0.0;          ///< seconds per call
  double beta_s_per_byte = 0.0;  ///< seconds per byte
  double max_rel_error = 0.0;    ///< largest |t_fit - t| / t over the fitted points (0 for a datasheet value)
  /// Seconds for `bytes` bytes. Local.
  double seconds(double bytes) const { return alpha_s + beta_s_per_byte * bytes; }
};

/// Least-squares fit of t = alpha + beta x to the points (x[i], t[i]), minimising the *relative*
/// residuals sum ((alpha + beta x_i - t_i) / t_i)^2 (weights 1/t_i^2), so that 4-byte latencies
/// count as much as 256 MiB transfers; the 2x2 normal equations are solved in closed form.
/// alpha and beta are clamped at 0 (a negative latency is noise; then the other is refitted alone).
/// Recovers alpha and beta exactly from noiseless data. Local, pure. Throws Error when the sizes
/// differ, there are fewer than 2 points, or a t_i <= 0. With all x equal, beta = 0 and alpha is
/// the weighted mean.
AlphaBeta fit_alpha_beta(const std::vector<double>& x, const std::vector<double>& t);

/// The model time (s) of one `op` over `n` ranks with message size `bytes` (header comment's S) on
/// a link of per-call latency `alpha_s` and bus time per byte `beta_bus`: alpha_s + beta_bus *
/// bus_factor(op, n) * bytes; 0 when n == 1 and op is a collective (the backends return at once).
/// Local, pure.
double collective_seconds(CommOp op, int n, double bytes, double alpha_s, double beta_bus);

}  // namespace trident
