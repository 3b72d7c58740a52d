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

#define TRIDENT_INST(T)                                                                                 \
  template double cross_entropy_forward<T>(View1<T>, View2<const T>, View1<const token_t>);            \
  template void cross_entropy_backward<T>(View2<T>, View2<const T>, View1<const token_t>, T);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
