#include "kernels/embedding.hpp"

#include "kernels/instantiate.hpp"

namespace trident {

template <class T>
void embedding_forward(View2<T> out, View1<const token_t> tokens, View2<const T> wte, token_t vocab_start,
                       token_t vocab_rows, View2<const T> wpe, int B, int seq_len) {
  const int C = static_cast<int>(out.extent(1));
  const bool pos = wpe.extent(0) > 0;
  Kokkos::parallel_for(
      "trident::embedding_forward", Kokkos::RangePolicy<ExecSpace>(0, static_cast<long>(B) * seq_len),
      KOKKOS_LAMBDA(const long n) {
        const int t = static_cast<int>(n % seq_len);
        const token_t row = tokens(n) - vocab_start;
        const bool mine = row >= 0 && row < vocab_rows;
        for (int c = 0; c < C; ++c) {
          T v = mine ? wte(row, c) : T(0);
          if (pos) v += wpe(t, c);
          out(n, c) = v;
        }
      });
}

template <class T>
void embedding_backward(View2<T> dwte, View2<T> dwpe, View2<const T> dout, View1<const token_t> tokens,
                        token_t vocab_start, token_t vocab_rows, int B, int seq_len) {
  const int C = static_cast<int>(dout.extent(1));
  const long N = static_cast<long>(B) * seq_len;
  // Token rows can repeat, so parallelise over channels and walk the tokens in order.
  Kokkos::parallel_for(
      "trident::embedding_backward_wte", Kokkos::RangePolicy<ExecSpace>(0, C), KOKKOS_LAMBDA(const int c) {
        for (long n = 0; n < N; ++n) {
          const token_t row = tokens(n) - vocab_start;
          if (row >= 0 && row < vocab_rows) dwte(row, c) += dout(n, c);
        }
      });
  if (dwpe.extent(0) == 0) return;
  Kokkos::parallel_for(
      "trident::embedding_backward_wpe", Kokkos::RangePolicy<ExecSpace>(0, static_cast<long>(seq_len) * C),
      KOKKOS_LAMBDA(const long i) {
        const int t = static_cast<int>(i / C);
        const int c = static_cast<int>(i % C);
        T acc = 0;
        for (int b = 0; b < B; ++b) acc += dout(static_cast<long>(b) * seq_len + t, c);
        dwpe(t, c) += acc;
      });
}

#define TRIDENT_INST(T)                                                                                        \
  template void embedding_forward<T>(View2<T>, View1<const token_t>, View2<const T>, token_t, token_t,         \
                                     View2<const T>, int, int);                                                \
  template void embedding_backward<T>(View2<T>, View2<T>, View2<const T>, View1<const token_t>, token_t, token_t, \
                                      int, int);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
