// kernels/row_parallel.hpp: how the row-wise kernels map rows and columns onto Kokkos teams,
// one source for every backend (internal to the kernels layer; no caller outside src/kernels).
//
// Layer: kernels. Tensors are row-major (core/types.hpp), so a row's columns are contiguous. A
// kernel that gives one thread a whole row (RangePolicy over rows, a serial loop over columns)
// makes adjacent GPU threads read addresses a row apart, and reduces each row serially. Three
// hierarchical shapes instead (Kokkos TeamPolicy; the nested patterns exist in Kokkos 3.4 and 4.x):
//  - short rows (C up to a few thousand: LayerNorm, softmax, bias add, embedding, head packing):
//    each team thread takes one row and its vector lanes span the row's columns, so the lanes of
//    a warp read consecutive addresses and a row's sum is a warp-shuffle tree (for_each_row with
//    ThreadVectorRange inside). kRowsPerTeam rows per team.
//  - long rows (the vocabulary, V = 50304 for GPT-2: cross entropy): one team per row, its
//    threads stride over the columns (TeamThreadRange) and a row's reduction is block-wide.
//  - column sums (LayerNorm dweight/dbias, linear dbias: each output sums N rows): a team takes
//    kLanes adjacent columns (lanes = columns, coalesced) and its threads take every R-th row;
//    the R partial sums of a column are added in thread order (column_sums).
// Determinism (docs/design.md, Kernels): every reduction has a fixed order for a given build and
// shape -- Kokkos' vector and team reductions are fixed shuffle/shared-memory trees, and the column
// partials are added in thread order -- and nothing uses atomics.
// On the host (Serial, or any host execution space) every shape has one thread per team and one
// vector lane, so the nested loops run sequentially in index order: each row and each column is
// summed in exactly the order of the one-thread-per-row loops these kernels replaced (Kokkos 3.4
// and 4.x initialise a nested sum at 0 and a max at the lowest finite value, then apply the lambda
// in index order). The same order is not enough for the same bits: the host compiler decides FMA
// contraction and vectorisation per loop nest (with -march=native on AMD Zen it avoids FMAs in
// scalar reduction chains but uses them when it vectorises across columns). So the host keeps the
// former loop nest where that decision differed: column_sums runs one thread per column on the
// host, and attention's softmax backward keeps its mask and dot product as separate loops. Host
// results were compared bitwise with the former kernels (every kernel on ragged shapes, and the
// losses, gradient norms and checkpoints of training runs; docs/design.md, Kernels); a change
// here needs that comparison again. (LayerNorm with the Serial backend, the host softmax's
// exponentials and pack/unpack heads have had host paths of their own since issue 17: see
// docs/design.md, Kernels.)
#pragma once

#include "core/types.hpp"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace trident {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using TeamMember = TeamPolicy::member_type;

/// True when kernels run on the host (Serial or another host space): every shape degenerates to
/// one thread per team with one lane, i.e. sequential loops in index order.
inline constexpr bool kKernelsOnHost = std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;
/// Vector lanes over a row's (or a column block's) columns: one warp on NVIDIA GPUs.
inline constexpr int kLanes = kKernelsOnHost ? 1 : 32;
/// Short rows per team (one per team thread): 4 x 32 = 128 GPU threads per team.
inline constexpr int kRowsPerTeam = kKernelsOnHost ? 1 : 4;
/// Threads of a long row's team (vector length 1): a 256-thread block per vocabulary row.
inline constexpr int kLongRowThreads = kKernelsOnHost ? 1 : 256;
/// Threads over rows in a column-sum team (x kLanes columns): 16 x 32 = 512 GPU threads.
inline constexpr int kColumnThreads = kKernelsOnHost ? 1 : 16;

/// Policy for `rows` short rows: kRowsPerTeam rows per team, kLanes lanes per row. Local.
inline TeamPolicy short_row_policy(std::int64_t rows) {
  return TeamPolicy(static_cast<int>((rows + kRowsPerTeam - 1) / kRowsPerTeam), kRowsPerTeam, kLanes);
}

/// Calls f(row) for this team's rows of a short_row_policy over `rows` rows, one row per team
/// thread; f spans the row's columns with ThreadVectorRange. Device-safe.
template <class F>
KOKKOS_INLINE_FUNCTION void for_each_row(const TeamMember& team, std::int64_t rows, const F& f) {
  const std::int64_t first = static_cast<std::int64_t>(team.league_rank()) * team.team_size();
  const std::int64_t last = first + team.team_size() < rows ? first + team.team_size() : rows;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, first, last), f);
}

/// Policy for `rows` long rows: one team of kLongRowThreads threads per row (league_rank = row). Local.
inline TeamPolicy long_row_policy(std::int64_t rows) {
  return TeamPolicy(static_cast<int>(rows), kLongRowThreads, 1);
}

/// Two sums reduced together in one pass over a row (Kokkos' nested parallel_reduce of a value
/// type: identity = default construction, join = +=).
template <class T>
struct SumPair {
  T a{}, b{};
  KOKKOS_INLINE_FUNCTION SumPair& operator+=(const SumPair& o) {
    a += o.a;
    b += o.b;
    return *this;
  }
};

/// Column reduction over the rows of a row-major (rows, cols) operand: for every column c, the
/// sum over all rows as an Acc (T for one sum, SumPair<T> for two), then store(c, sum).
/// partial(c, first, stride) returns the sum over rows n = first, first + stride, ... < rows, in
/// that order, with its own scalar accumulators; the kernel writes that loop itself so that on the
/// host it is, expression for expression, the one-thread-per-column loop it replaced (same
/// compiled arithmetic, FMA contractions included: accumulating through an array instead let the
/// compiler pair the sums into one vector add and drop an FMA, which changed last bits).
/// A team takes kLanes adjacent columns, one per vector lane, so each row is read in contiguous
/// runs of kLanes elements; its kColumnThreads threads take rows r, r + R, r + 2R, ... and the R
/// partials of a column are added in thread order through team scratch (fixed order, no atomics).
/// On the host (R = 1, one lane) this is one column at a time summing its rows in order, and the
/// partial is stored as is. Local; partial and store must be device lambdas (KOKKOS_LAMBDA).
template <class Acc, class Partial, class Store>
void column_sums(const char* label, int cols, const Partial& partial, const Store& store) {
  if constexpr (kKernelsOnHost) {
    // One thread per column over all rows: the loop nest of the former kernels, which the
    // compiler vectorises across columns (with FMAs) exactly as before. A team policy of width
    // one sums in the same order but compiles to scalar code, whose last bits differ.
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<ExecSpace>(0, cols),
        KOKKOS_LAMBDA(const int c) { store(c, partial(c, std::int64_t(0), std::int64_t(1))); });
    return;
  }
  using Partials = Kokkos::View<Acc**, Kokkos::LayoutRight, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const int lanes = kLanes, threads = kColumnThreads;
  TeamPolicy policy((cols + lanes - 1) / lanes, threads, lanes);
  policy.set_scratch_size(0, Kokkos::PerTeam(Partials::shmem_size(threads, lanes)));
  Kokkos::parallel_for(
      label, policy, KOKKOS_LAMBDA(const TeamMember& team) {
        const int c0 = team.league_rank() * lanes;
        const int width = cols - c0 < lanes ? cols - c0 : lanes;
        const int r = team.team_rank(), R = team.team_size();
        Partials part(team.team_scratch(0), R, lanes);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, width),
                             [&](const int j) { part(r, j) = partial(c0 + j, std::int64_t(r), std::int64_t(R)); });
        team.team_barrier();
        if (r == 0)
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, width), [&](const int j) {
            Acc sum = part(0, j);
            for (int q = 1; q < R; ++q) sum += part(q, j);
            store(c0 + j, sum);
          });
      });
}

/// Sum over c in [0, n) of f(c) on the host: 16 interleaved partial sums (element c goes to partial
/// c % 16), added in partial order at the end. A fixed order for a given n, so deterministic and
/// the same on every layout (such a row is never split across ranks), and one the compiler
/// vectorises (a scalar chain of dependent adds runs at one add per FP latency). Host code only
/// (LayerNorm, cross entropy).
template <class T, class F>
inline T lane_sum(int n, const F& f) {
  constexpr int L = 16;
  T p[L] = {};
  int c = 0;
  for (; c + L <= n; c += L)
    for (int l = 0; l < L; ++l) p[l] += f(c + l);
  for (int l = 0; c < n; ++c, ++l) p[l] += f(c);
  T sum = 0;
  for (int l = 0; l < L; ++l) sum += p[l];
  return sum;
}

/// max(a[0], ..., a[n - 1]) on the host in 16 interleaved lanes: bitwise the value of the
/// index-order loop (a maximum does not depend on the order), vectorised; a NaN is never taken
/// (a row holding one still ends as NaN through its exponentials); the lowest finite T for n = 0.
/// Host code only (cross entropy).
template <class T>
inline T lane_max(const T* a, int n) {
  constexpr int L = 16;
  T p[L];
  for (int l = 0; l < L; ++l) p[l] = std::numeric_limits<T>::lowest();
  int c = 0;
  for (; c + L <= n; c += L)
    for (int l = 0; l < L; ++l) p[l] = a[c + l] > p[l] ? a[c + l] : p[l];
  for (int l = 0; c < n; ++c, ++l) p[l] = a[c] > p[l] ? a[c] : p[l];
  T m = p[0];
  for (int l = 1; l < L; ++l) m = p[l] > m ? p[l] : m;
  return m;
}

}  // namespace trident
