#include "kernels/cross_entropy.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

namespace trident {

template <class T>
double cross_entropy_forward(View1<T> losses, View2<const T> logits, View1<const token_t> targets) {
  const int V = static_cast<int>(logits.extent(1));
  double total = 0.0;
  Kokkos::parallel_reduce(
      "trident::cross_entropy_forward", Kokkos::RangePolicy<ExecSpace>(0, logits.extent(0)),
      KOKKOS_LAMBDA(const size_t n, double& acc) {
        const token_t tgt = targets(n);
        if (tgt < 0) {
          losses(n) = 0;
          return;
        }
        T maxv = logits(n, 0);
        for (int v = 1; v < V; ++v) maxv = logits(n, v) > maxv ? logits(n, v) : maxv;
        T sum = 0;
        for (int v = 0; v < V; ++v) sum += kmath::exp(logits(n, v) - maxv);
        const T loss = kmath::log(sum) + maxv - logits(n, tgt);
        losses(n) = loss;
        acc += static_cast<double>(loss);
      },
      total);
  return total;
}

template <class T>
void cross_entropy_backward(View2<T> dlogits, View2<const T> logits, View1<const token_t> targets, T dloss) {
  const int V = static_cast<int>(logits.extent(1));
  Kokkos::parallel_for(
      "trident::cross_entropy_backward", Kokkos::RangePolicy<ExecSpace>(0, logits.extent(0)),
      KOKKOS_LAMBDA(const size_t n) {
        const token_t tgt = targets(n);
        if (tgt < 0) {
          for (int v = 0; v < V; ++v) dlogits(n, v) = 0;
          return;
        }
        T maxv = logits(n, 0);
        for (int v = 1; v < V; ++v) maxv = logits(n, v) > maxv ? logits(n, v) : maxv;
        T sum = 0;
        for (int v = 0; v < V; ++v) sum += kmath::exp(logits(n, v) - maxv);
        const T inv = T(1) / sum;
        for (int v = 0; v < V; ++v) {  // reads logits(n, v) before writing dlogits(n, v): in place is safe
          const T p = kmath::exp(logits(n, v) - maxv) * inv;
          dlogits(n, v) = (p - (v == tgt ? T(1) : T(0))) * dloss;
        }
      });
}

template <class T>
void cross_entropy_row_max(View1<T> row_max, View2<const T> logits, int valid_cols) {
  Kokkos::parallel_for(
      "trident::cross_entropy_row_max", Kokkos::RangePolicy<ExecSpace>(0, logits.extent(0)),
      KOKKOS_LAMBDA(const size_t n) {
        T m = -Kokkos::reduction_identity<T>::min();
        for (int v = 0; v < valid_cols; ++v) m = logits(n, v) > m ? logits(n, v) : m;
        row_max(n) = m;
      });
}

template <class T>
void cross_entropy_partials(View1<T> sumexp, View1<T> target_logit, View2<const T> logits, View1<const T> row_max,
                            View1<const token_t> targets, token_t vocab_start, int valid_cols) {
  Kokkos::parallel_for(
      "trident::cross_entropy_partials", Kokkos::RangePolicy<ExecSpace>(0, logits.extent(0)),
      KOKKOS_LAMBDA(const size_t n) {
        const T m = row_max(n);
        T sum = 0;
        for (int v = 0; v < valid_cols; ++v) sum += kmath::exp(logits(n, v) - m);
        sumexp(n) = sum;
        const token_t col = targets(n) - vocab_start;
        target_logit(n) = (targets(n) >= 0 && col >= 0 && col < valid_cols) ? logits(n, col) : T(0);
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
  Kokkos::parallel_for(
      "trident::cross_entropy_backward_split", Kokkos::RangePolicy<ExecSpace>(0, logits.extent(0)),
      KOKKOS_LAMBDA(const size_t n) {
        const token_t tgt = targets(n);
        if (tgt < 0) {
          for (int v = 0; v < V; ++v) dlogits(n, v) = 0;
          return;
        }
        const T m = row_max(n), inv = T(1) / sumexp(n);
        for (int v = 0; v < V; ++v) {  // reads logits(n, v) before writing dlogits(n, v): in place is safe
          if (v >= valid_cols) {
            dlogits(n, v) = 0;
            continue;
          }
          const T p = kmath::exp(logits(n, v) - m) * inv;
          dlogits(n, v) = (p - (v + vocab_start == tgt ? T(1) : T(0))) * dloss;
        }
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
