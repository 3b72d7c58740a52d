#include "kernels/embedding.hpp"

#include "kernels/instantiate.hpp"
#include "kernels/row_parallel.hpp"

#include <type_traits>
#include <vector>

namespace trident {

namespace {
/// The host (Serial) embedding backward over raw rows, token by token: each row of dout added
/// into its token's row of dwte (and, summed over the batch, into its position's row of dwpe),
/// vectorised across the channels. Every element still sums over the tokens (positions: over the
/// batch) in the order of the parallel kernels below, so the results are theirs bitwise; the
/// channel-at-a-time walk of those kernels reads dout C floats apart. dwpe is null without
/// position embeddings.
template <class T>
void host_embedding_backward(T* __restrict dwte, std::int64_t ldw, T* __restrict dwpe, std::int64_t ldp,
                             const T* __restrict dout, std::int64_t ldy, const token_t* tokens, token_t vocab_start,
                             token_t vocab_rows, int B, int seq_len, int C) {
  for (long n = 0; n < static_cast<long>(B) * seq_len; ++n) {
    const token_t row = tokens[n] - vocab_start;
    if (row < 0 || row >= vocab_rows) continue;
    T* __restrict const w = dwte + row * ldw;
    const T* __restrict const dy = dout + n * ldy;
    for (int c = 0; c < C; ++c) w[c] += dy[c];
  }
  if (dwpe == nullptr) return;
  std::vector<T> acc(static_cast<size_t>(C));
  T* __restrict const a = acc.data();
  for (int t = 0; t < seq_len; ++t) {
    for (int c = 0; c < C; ++c) a[c] = T(0);
    for (int b = 0; b < B; ++b) {
      const T* __restrict const dy = dout + (static_cast<long>(b) * seq_len + t) * ldy;
      for (int c = 0; c < C; ++c) a[c] += dy[c];
    }
    T* __restrict const p = dwpe + t * ldp;
    for (int c = 0; c < C; ++c) p[c] += a[c];
  }
}
}  // namespace

template <class T>
void embedding_forward(View2<T> out, View1<const token_t> tokens, View2<const T> wte, token_t vocab_start,
                       token_t vocab_rows, View2<const T> wpe, int B, int seq_len) {
  const int C = static_cast<int>(out.extent(1));
  const bool pos = wpe.extent(0) > 0;
  const std::int64_t N = static_cast<std::int64_t>(B) * seq_len;
  // Short rows (kernels/row_parallel.hpp): a team thread per token, vector lanes over its C
  // channels, so a GPU warp gathers a contiguous row of wte and writes a contiguous row of out.
  Kokkos::parallel_for(
      "trident::embedding_forward", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t n) {
          const int t = static_cast<int>(n % seq_len);
          const token_t row = tokens(n) - vocab_start;
          const bool mine = row >= 0 && row < vocab_rows;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, C), [&](const int c) {
            T v = mine ? wte(row, c) : T(0);
            if (pos) v += wpe(t, c);
            out(n, c) = v;
          });
        });
      });
}

template <class T>
void embedding_backward(View2<T> dwte, View2<T> dwpe, View2<const T> dout, View1<const token_t> tokens,
                        token_t vocab_start, token_t vocab_rows, int B, int seq_len) {
  const int C = static_cast<int>(dout.extent(1));
  const long N = static_cast<long>(B) * seq_len;
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    host_embedding_backward<T>(dwte.data(), dwte.stride(0), dwpe.extent(0) > 0 ? dwpe.data() : nullptr,
                               dwpe.stride(0), dout.data(), dout.stride(0), tokens.data(), vocab_start, vocab_rows, B,
                               seq_len, C);
    return;
  }
#endif
  // Token rows can repeat, so parallelise over channels and walk the tokens in order. Left as one
  // thread per channel: adjacent threads take adjacent channels, so a GPU already coalesces these
  // reads and writes; what it lacks is parallelism (C threads, each a chain of N read-modify-writes).
  // More needs the positions grouped by token id (a sort the caller would provide scratch for),
  // not a new shape of this loop.
  Kokkos::parallel_for(
      "trident::embedding_backward_wte", Kokkos::RangePolicy<ExecSpace>(0, C), KOKKOS_LAMBDA(const int c) {
        for (long n = 0; n < N; ++n) {
          const token_t row = tokens(n) - vocab_start;
          if (row >= 0 && row < vocab_rows) dwte(row, c) += dout(n, c);
        }
      });
  if (dwpe.extent(0) == 0) return;
  // One thread per (position, channel), adjacent threads on adjacent channels: coalesced as is.
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
