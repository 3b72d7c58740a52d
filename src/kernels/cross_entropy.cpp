#include "kernels/cross_entropy.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/row_parallel.hpp"
#include "kernels/vmath.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace trident {

#if defined(KOKKOS_ENABLE_SERIAL)
namespace {
// The host (Serial) paths of the vocab-parallel cross entropy the model runs (row_max, partials,
// backward_split). The team kernels below, on one host thread, run the row's max and sum as a
// sequential chain and each exponential through the scalar expf: 8.5 ns per logit, 3.5 s a step
// for GPT-2's 50304-wide head at 8192 rows (bench_kernels BM_CrossEntropy). Here the
// exponentials go through glibc's vector library (detail::exp_shifted_inplace) over whole
// blocks of 16 in 64-byte aligned scratch, so every logit takes the same vector path, whatever the
// vocabulary shard it sits in; max and sum run in 16 interleaved lanes (the max is exact; the sum
// is a fixed order for a given shard width, so deterministic and the same on every dp layout).
constexpr int kLanes = 16;

/// 64-byte aligned scratch of at least n elements (reused between rows of one call).
template <class T>
class AlignedRow {
 public:
  explicit AlignedRow(int n) : buf_(static_cast<size_t>(n) + 64 / sizeof(T)) {
    auto p = reinterpret_cast<std::uintptr_t>(buf_.data());
    data_ = reinterpret_cast<T*>((p + 63) & ~std::uintptr_t{63});
  }
  T* data() const { return data_; }

 private:
  std::vector<T> buf_;
  T* data_ = nullptr;
};

inline int padded_width(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

/// e[0, n) = exp(x[0, n) - m); e holds padded_width(n) (its padding ends up 1).
template <class T>
void row_exp(T* e, const T* x, int n, T m) {
  std::copy(x, x + n, e);
  std::fill(e + n, e + padded_width(n), m);
  detail::exp_shifted_inplace(e, padded_width(n), m);
}

}  // namespace
#endif

// Rows of V logits are long rows (kernels/row_parallel.hpp): one team per row, its threads stride
// over the vocabulary (adjacent GPU threads read adjacent logits) and the row's max and sum of
// exponentials are block-wide reductions in a fixed order. On the host a team is one thread and
// the loops run in index order, as the one-thread-per-row loops these replace.
namespace {

/// max over v in [0, cols) of logits(n, v), by the team of row n (the lowest float when cols == 0).
template <class T>
KOKKOS_INLINE_FUNCTION T team_row_max(const TeamMember& team, const View2<const T>& logits, std::int64_t n, int cols) {
  T m;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, cols), [&](const int v, T& mx) { mx = logits(n, v) > mx ? logits(n, v) : mx; },
      Kokkos::Max<T>(m));
  return m;
}

/// sum over v in [0, cols) of exp(logits(n, v) - m), by the team of row n.
template <class T>
KOKKOS_INLINE_FUNCTION T team_row_sumexp(const TeamMember& team, const View2<const T>& logits, std::int64_t n,
                                         int cols, T m) {
  T sum;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, cols), [&](const int v, T& acc) { acc += kmath::exp(logits(n, v) - m); }, sum);
  return sum;
}

/// sum of losses in row order (a deterministic reduction over rows).
template <class T>
double sum_losses(View1<const T> losses) {
  double total = 0.0;
  Kokkos::parallel_reduce(
      "trident::cross_entropy_sum", Kokkos::RangePolicy<ExecSpace>(0, losses.extent(0)),
      KOKKOS_LAMBDA(const size_t n, double& acc) { acc += static_cast<double>(losses(n)); }, total);
  return total;
}

}  // namespace

template <class T>
double cross_entropy_forward(View1<T> losses, View2<const T> logits, View1<const token_t> targets) {
  const int V = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "trident::cross_entropy_forward", long_row_policy(static_cast<std::int64_t>(logits.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t n = team.league_rank();
        const token_t tgt = targets(n);
        if (tgt < 0) {  // the whole team leaves: no barrier is skipped by some threads only
          Kokkos::single(Kokkos::PerTeam(team), [&] { losses(n) = 0; });
          return;
        }
        const T maxv = team_row_max(team, logits, n, V);
        const T sum = team_row_sumexp(team, logits, n, V, maxv);
        Kokkos::single(Kokkos::PerTeam(team), [&] { losses(n) = kmath::log(sum) + maxv - logits(n, tgt); });
      });
  // Rows without a target hold 0, which leaves the double sum unchanged.
  return sum_losses<T>(losses);
}

template <class T>
void cross_entropy_backward(View2<T> dlogits, View2<const T> logits, View1<const token_t> targets, T dloss) {
  const int V = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "trident::cross_entropy_backward", long_row_policy(static_cast<std::int64_t>(logits.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t n = team.league_rank();
        const token_t tgt = targets(n);
        if (tgt < 0) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V), [&](const int v) { dlogits(n, v) = 0; });
          return;
        }
        const T maxv = team_row_max(team, logits, n, V);
        const T inv = T(1) / team_row_sumexp(team, logits, n, V, maxv);
        // In place is safe: every thread has read its logits for the reductions before their
        // results exist, and below each element is read before it is written, by one thread.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V), [&](const int v) {
          const T p = kmath::exp(logits(n, v) - maxv) * inv;
          dlogits(n, v) = (p - (v == tgt ? T(1) : T(0))) * dloss;
        });
      });
}

template <class T>
void cross_entropy_row_max(View1<T> row_max, View2<const T> logits, int valid_cols) {
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    const int valid = std::min(valid_cols, static_cast<int>(logits.extent(1)));
    for (std::int64_t n = 0; n < static_cast<std::int64_t>(logits.extent(0)); ++n)
      row_max(n) = lane_max<T>(&logits(n, 0), valid);
    return;
  }
#endif
  Kokkos::parallel_for(
      "trident::cross_entropy_row_max", long_row_policy(static_cast<std::int64_t>(logits.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t n = team.league_rank();
        const T m = team_row_max(team, logits, n, valid_cols);
        Kokkos::single(Kokkos::PerTeam(team), [&] { row_max(n) = m; });
      });
}

template <class T>
void cross_entropy_partials(View1<T> sumexp, View1<T> target_logit, View2<const T> logits, View1<const T> row_max,
                            View1<const token_t> targets, token_t vocab_start, int valid_cols) {
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    const int valid = std::min(valid_cols, static_cast<int>(logits.extent(1)));
    AlignedRow<T> e(padded_width(valid));
    for (std::int64_t n = 0; n < static_cast<std::int64_t>(logits.extent(0)); ++n) {
      row_exp<T>(e.data(), &logits(n, 0), valid, row_max(n));
      const T* ev = e.data();
      sumexp(n) = lane_sum<T>(valid, [&](const int v) { return ev[v]; });
      const token_t col = targets(n) - vocab_start;
      target_logit(n) = (targets(n) >= 0 && col >= 0 && col < valid) ? logits(n, col) : T(0);
    }
    return;
  }
#endif
  Kokkos::parallel_for(
      "trident::cross_entropy_partials", long_row_policy(static_cast<std::int64_t>(logits.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t n = team.league_rank();
        const T sum = team_row_sumexp(team, logits, n, valid_cols, row_max(n));
        Kokkos::single(Kokkos::PerTeam(team), [&] {
          sumexp(n) = sum;
          const token_t col = targets(n) - vocab_start;
          target_logit(n) = (targets(n) >= 0 && col >= 0 && col < valid_cols) ? logits(n, col) : T(0);
        });
      });
}

template <class T>
double cross_entropy_losses(View1<T> losses, View1<const T> sumexp, View1<const T> row_max,
                            View1<const T> target_logit, View1<const token_t> targets) {
  double total = 0.0;
  Kokkos::parallel_reduce(
      "trident::cross_entropy_losses", Kokkos::RangePolicy<ExecSpace>(0, losses.extent(0)),
      KOKKOS_LAMBDA(const size_t n, double& acc) {
        if (targets(n) < 0) {
          losses(n) = 0;
          return;
        }
        const T loss = kmath::log(sumexp(n)) + row_max(n) - target_logit(n);
        losses(n) = loss;
        acc += static_cast<double>(loss);
      },
      total);
  return total;
}

template <class T>
void cross_entropy_backward_split(View2<T> dlogits, View2<const T> logits, View1<const T> row_max,
                                  View1<const T> sumexp, View1<const token_t> targets, token_t vocab_start,
                                  int valid_cols, T dloss) {
  const int V = static_cast<int>(logits.extent(1));
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    // As the team kernel: p = exp(logit - m) / sumexp, then (p - [v is the target]) * dloss;
    // dlogits may be logits itself (the row is copied into the scratch before it is written).
    const int valid = std::min(valid_cols, V);
    AlignedRow<T> e(padded_width(valid));
    for (std::int64_t n = 0; n < static_cast<std::int64_t>(logits.extent(0)); ++n) {
      T* const d = &dlogits(n, 0);
      const token_t tgt = targets(n);
      if (tgt < 0) {
        std::fill(d, d + V, T(0));
        continue;
      }
      const T inv = T(1) / sumexp(n);
      row_exp<T>(e.data(), &logits(n, 0), valid, row_max(n));
      const T* const p = e.data();
      for (int v = 0; v < valid; ++v) d[v] = (p[v] * inv) * dloss;
      const token_t col = tgt - vocab_start;
      if (col >= 0 && col < valid) d[col] = (p[col] * inv - T(1)) * dloss;
      std::fill(d + valid, d + V, T(0));
    }
    return;
  }
#endif
  Kokkos::parallel_for(
      "trident::cross_entropy_backward_split", long_row_policy(static_cast<std::int64_t>(logits.extent(0))),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const std::int64_t n = team.league_rank();
        const token_t tgt = targets(n);
        if (tgt < 0) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V), [&](const int v) { dlogits(n, v) = 0; });
          return;
        }
        const T m = row_max(n), inv = T(1) / sumexp(n);
        // Each element is read before it is written, by one thread: in place is safe.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, V), [&](const int v) {
          if (v >= valid_cols) {
            dlogits(n, v) = 0;
            return;
          }
          const T p = kmath::exp(logits(n, v) - m) * inv;
          dlogits(n, v) = (p - (v + vocab_start == tgt ? T(1) : T(0))) * dloss;
        });
      });
}

#define TRIDENT_INST(T)                                                                                 \
  template double cross_entropy_forward<T>(View1<T>, View2<const T>, View1<const token_t>);            \
  template void cross_entropy_backward<T>(View2<T>, View2<const T>, View1<const token_t>, T);           \
  template void cross_entropy_row_max<T>(View1<T>, View2<const T>, int);                                \
  template void cross_entropy_partials<T>(View1<T>, View1<T>, View2<const T>, View1<const T>,          \
                                          View1<const token_t>, token_t, int);                          \
  template double cross_entropy_losses<T>(View1<T>, View1<const T>, View1<const T>, View1<const T>,    \
                                          View1<const token_t>);                                        \
  template void cross_entropy_backward_split<T>(View2<T>, View2<const T>, View1<const T>, View1<const T>, \
                                                View1<const token_t>, token_t, int, T);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
