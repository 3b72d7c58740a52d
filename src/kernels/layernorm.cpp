#include "kernels/layernorm.hpp"

#include <type_traits>
#include <vector>

#include "core/kmath.hpp"
#include "kernels/convert.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/row_parallel.hpp"

namespace trident {

namespace {

/// The host (Serial) LayerNorm backward over raw rows: the row means as vectorised sums
/// (lane_sum), the parameter gradients accumulated row by row into per-column sums, vectorised
/// across the columns, each column still summed over the rows in order (a column-at-a-time loop
/// reads a row's elements C apart: 4% of a bf16 step at the 10.7M shape, docs/performance.md). The
/// same expressions as the team kernels. A function of plain pointers: inside layernorm_backward
/// GCC 12 left the column loop scalar ("no vectype" for the View-derived loads; 6% of a bf16 step
/// at the 0.8M shape); __restrict records that dinp overlaps neither dout nor inp (layernorm.hpp).
template <class T>
void host_layernorm_backward(T* __restrict dinp, std::int64_t ldx, T* dweight, T* dbias, const T* __restrict dout,
                             std::int64_t ldy, const T* __restrict inp, std::int64_t ldi, const T* __restrict w,
                             const T* mean, const T* rstd, std::int64_t N, int C) {
  std::vector<T> dw(static_cast<size_t>(C), T(0)), db(static_cast<size_t>(C), T(0));
  T* __restrict const dwp = dw.data();
  T* __restrict const dbp = db.data();
  for (std::int64_t n = 0; n < N; ++n) {
    const T m = mean[n], s = rstd[n];
    const T* __restrict const x = inp + n * ldi;
    const T* __restrict const dy = dout + n * ldy;
    T* __restrict const dx = dinp + n * ldx;
    const T a = lane_sum<T>(C, [&](int c) { return dy[c] * w[c]; });
    const T b = lane_sum<T>(C, [&](int c) { return dy[c] * w[c] * ((x[c] - m) * s); });
    const T dnorm_mean = a / C, dnorm_norm_mean = b / C;
    for (int c = 0; c < C; ++c) {
      const T xhat = (x[c] - m) * s;
      const T dnorm = dy[c] * w[c];
      dx[c] += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s;
      dwp[c] += dy[c] * (x[c] - m) * s;
      dbp[c] += dy[c];
    }
  }
  for (int c = 0; c < C; ++c) {
    dweight[c] += dwp[c];
    if (dbias != nullptr) dbias[c] += dbp[c];
  }
}
}  // namespace

// Forward and the input gradient are short-row kernels (kernels/row_parallel.hpp): a team thread
// per row, its vector lanes over the C channels, so a GPU warp reads a row's consecutive floats and
// reduces the row's mean, variance and backward dot products by a shuffle tree. The expressions
// are those of the former one-thread-per-row loops. With the Serial backend the host paths below
// run instead: the same expressions, row sums in 16 interleaved lanes (lane_sum), so their last bits
// differ from the team kernels' (docs/design.md, Kernels).
namespace {
/// out = v, or its bf16 rounding (kernels/convert.hpp) for a bf16 output. Device-safe.
template <class Out, class T>
KOKKOS_INLINE_FUNCTION void store(Out& out, T v) {
  if constexpr (std::is_same_v<Out, bf16_t>)
    out = to_bf16(static_cast<float>(v));
  else
    out = v;
}

/// layernorm_forward into an output of type Out (T, or bf16_t for T = float).
template <class T, class Out>
void layernorm_forward_to(View2<Out> out, View1<T> mean, View1<T> rstd, View2<const T> inp, View1<const T> weight,
                       View1<const T> bias) {
  const int C = static_cast<int>(inp.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(inp.extent(0));
  const bool has_bias = bias.extent(0) > 0;
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    // One thread: the row's mean and variance as vectorised sums (lane_sum), the same expressions.
    const T* const w = weight.data();
    const T* const b = has_bias ? bias.data() : nullptr;
    for (std::int64_t n = 0; n < N; ++n) {
      const T* const x = &inp(n, 0);
      Out* const y = &out(n, 0);
      const T m = lane_sum<T>(C, [&](int c) { return x[c]; }) / C;
      const T v = lane_sum<T>(C, [&](int c) {
                    const T d = x[c] - m;
                    return d * d;
                  }) / C;
      const T s = T(1) / kmath::sqrt(v + T(1e-5));
      for (int c = 0; c < C; ++c) {
        const T yc = (x[c] - m) * s * w[c];
        store(y[c], b != nullptr ? yc + b[c] : yc);
      }
      mean(n) = m;
      rstd(n) = s;
    }
    return;
  }
#endif
  Kokkos::parallel_for(
      "trident::layernorm_forward", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t n) {
          T m;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, C), [&](const int c, T& acc) { acc += inp(n, c); }, m);
          m /= C;
          T v;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, C),
              [&](const int c, T& acc) {
                const T d = inp(n, c) - m;
                acc += d * d;
              },
              v);
          v /= C;
          const T s = T(1) / kmath::sqrt(v + T(1e-5));
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, C), [&](const int c) {
            const T y = (inp(n, c) - m) * s * weight(c);
            store(out(n, c), has_bias ? y + bias(c) : y);
          });
          Kokkos::single(Kokkos::PerThread(team), [&] {
            mean(n) = m;
            rstd(n) = s;
          });
        });
      });
}

}  // namespace

template <class T>
void layernorm_forward(View2<T> out, View1<T> mean, View1<T> rstd, View2<const T> inp, View1<const T> weight,
                       View1<const T> bias) {
  layernorm_forward_to<T, T>(out, mean, rstd, inp, weight, bias);
}

void layernorm_forward_bf16(View2<bf16_t> out, View1<float> mean, View1<float> rstd, View2<const float> inp,
                            View1<const float> weight, View1<const float> bias) {
  layernorm_forward_to<float, bf16_t>(out, mean, rstd, inp, weight, bias);
}

template <class T>
void layernorm_backward(View2<T> dinp, View1<T> dweight, View1<T> dbias, View2<const T> dout, View2<const T> inp,
                        View1<const T> weight, View1<const T> mean, View1<const T> rstd) {
  const int C = static_cast<int>(inp.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(inp.extent(0));
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    // One thread: one pass over the rows does all three (host_layernorm_backward).
    host_layernorm_backward<T>(dinp.data(), dinp.stride(0), dweight.data(),
                               dbias.extent(0) > 0 ? dbias.data() : nullptr, dout.data(), dout.stride(0), inp.data(),
                               inp.stride(0), weight.data(), mean.data(), rstd.data(), N, C);
    return;
  }
#endif
  Kokkos::parallel_for(
      "trident::layernorm_backward_dinp", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t n) {
          const T m = mean(n), s = rstd(n);
          // Both row means in one pass (one shuffle tree for the pair on a GPU).
          SumPair<T> sums;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, C),
              [&](const int c, SumPair<T>& acc) {
                const T xhat = (inp(n, c) - m) * s;
                const T dnorm = dout(n, c) * weight(c);
                acc.a += dnorm;
                acc.b += dnorm * xhat;
              },
              sums);
          const T dnorm_mean = sums.a / C, dnorm_norm_mean = sums.b / C;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, C), [&](const int c) {
            const T xhat = (inp(n, c) - m) * s;
            const T dnorm = dout(n, c) * weight(c);
            dinp(n, c) += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s;
          });
        });
      });
  // Parameter gradients sum over the N rows: a column reduction (a team per block of channels,
  // its threads over rows, partials added in thread order: deterministic, no atomics).
  const bool has_bias = dbias.extent(0) > 0;
  column_sums<SumPair<T>>(
      "trident::layernorm_backward_dweight", C,
      KOKKOS_LAMBDA(const int c, const std::int64_t first, const std::int64_t stride) {
        T dw = 0, db = 0;
        for (std::int64_t n = first; n < N; n += stride) {
          dw += dout(n, c) * (inp(n, c) - mean(n)) * rstd(n);
          db += dout(n, c);
        }
        return SumPair<T>{dw, db};
      },
      KOKKOS_LAMBDA(const int c, const SumPair<T>& sum) {
        dweight(c) += sum.a;
        if (has_bias) dbias(c) += sum.b;
      });
}

#define TRIDENT_INST(T)                                                                                         \
  template void layernorm_forward<T>(View2<T>, View1<T>, View1<T>, View2<const T>, View1<const T>,              \
                                     View1<const T>);                                                           \
  template void layernorm_backward<T>(View2<T>, View1<T>, View1<T>, View2<const T>, View2<const T>,             \
                                      View1<const T>, View1<const T>, View1<const T>);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
