#include "kernels/attention.hpp"  // reference (loop) versions; the fast ones are in attention_gemm.cpp

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

namespace trident {


template <class T>
void attention_forward_ref(View2<T> out, View1<T> att, View2<const T> qkv, int B, int seq_len, int NH,
                           const AttentionDropout& drop) {
  const int C = static_cast<int>(out.extent(1));
  const int HS = C / NH;
  const T scale = T(1) / kmath::sqrt(static_cast<T>(HS));
  const bool dropping = drop.key.active();
  const T dscale = static_cast<T>(drop.key.scale());
  const long rows = static_cast<long>(B) * NH * seq_len;
  Kokkos::parallel_for(
      "trident::attention_forward_ref", Kokkos::RangePolicy<ExecSpace>(0, rows), KOKKOS_LAMBDA(const long r) {
        const int t = static_cast<int>(r % seq_len);
        const int h = static_cast<int>((r / seq_len) % NH);
        const int b = static_cast<int>(r / (static_cast<long>(seq_len) * NH));
        const long qrow = static_cast<long>(b) * seq_len + t;
        const long abase = r * seq_len;  // att row (b, h, t, :)
        T maxv = -Kokkos::reduction_identity<T>::min();  // lowest finite value
        for (int t2 = 0; t2 <= t; ++t2) {
          const long krow = static_cast<long>(b) * seq_len + t2;
          T s = 0;
          for (int d = 0; d < HS; ++d) s += qkv(qrow, h * HS + d) * qkv(krow, C + h * HS + d);
          s *= scale;
          att(abase + t2) = s;
          if (s > maxv) maxv = s;
        }
        T sum = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const T e = kmath::exp(att(abase + t2) - maxv);
          att(abase + t2) = e;
          sum += e;
        }
        const T inv = T(1) / sum;
        for (int t2 = 0; t2 <= t; ++t2) att(abase + t2) *= inv;
        for (int t2 = t + 1; t2 < seq_len; ++t2) att(abase + t2) = 0;
        for (int d = 0; d < HS; ++d) out(qrow, h * HS + d) = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          T a = att(abase + t2);
          if (dropping) a = drop.key.keep_at(drop.index(b, h, t, t2, seq_len)) ? a * dscale : T(0);
          const long vrow = static_cast<long>(b) * seq_len + t2;
          for (int d = 0; d < HS; ++d) out(qrow, h * HS + d) += a * qkv(vrow, 2 * C + h * HS + d);
        }
      });
}

template <class T>
void attention_backward_ref(View2<T> dqkv, View1<T> dpre, View2<const T> dout, View2<const T> qkv,
                            View1<const T> att, int B, int seq_len, int NH, const AttentionDropout& drop) {
  const int C = static_cast<int>(dout.extent(1));
  const int HS = C / NH;
  const T scale = T(1) / kmath::sqrt(static_cast<T>(HS));
  const bool dropping = drop.key.active();
  const T dscale = static_cast<T>(drop.key.scale());
  const long rows = static_cast<long>(B) * NH * seq_len;
  // Pass A, one thread per query row (b, h, t): gradient of the pre-softmax scores and dq.
  Kokkos::parallel_for(
      "trident::attention_backward_ref_dq", Kokkos::RangePolicy<ExecSpace>(0, rows), KOKKOS_LAMBDA(const long r) {
        const int t = static_cast<int>(r % seq_len);
        const int h = static_cast<int>((r / seq_len) % NH);
        const int b = static_cast<int>(r / (static_cast<long>(seq_len) * NH));
        const long qrow = static_cast<long>(b) * seq_len + t;
        const long abase = r * seq_len;
        T dot = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const long vrow = static_cast<long>(b) * seq_len + t2;
          T da = 0;
          for (int d = 0; d < HS; ++d) da += dout(qrow, h * HS + d) * qkv(vrow, 2 * C + h * HS + d);
          if (dropping) da = drop.key.keep_at(drop.index(b, h, t, t2, seq_len)) ? da * dscale : T(0);
          dpre(abase + t2) = da;  // d(att) for now
          dot += att(abase + t2) * da;
        }
        for (int t2 = 0; t2 <= t; ++t2) dpre(abase + t2) = att(abase + t2) * (dpre(abase + t2) - dot);
        for (int t2 = t + 1; t2 < seq_len; ++t2) dpre(abase + t2) = 0;
        for (int d = 0; d < HS; ++d) {
          T acc = 0;
          for (int t2 = 0; t2 <= t; ++t2) acc += dpre(abase + t2) * qkv(static_cast<long>(b) * seq_len + t2, C + h * HS + d);
          dqkv(qrow, h * HS + d) = acc * scale;
        }
      });
  // Pass B, one thread per key row (b, h, t2): dk and dv sum over the queries t >= t2 in order.
  Kokkos::parallel_for(
      "trident::attention_backward_ref_dkv", Kokkos::RangePolicy<ExecSpace>(0, rows), KOKKOS_LAMBDA(const long r) {
        const int t2 = static_cast<int>(r % seq_len);
        const int h = static_cast<int>((r / seq_len) % NH);
        const int b = static_cast<int>(r / (static_cast<long>(seq_len) * NH));
        const long krow = static_cast<long>(b) * seq_len + t2;
        const long hbase = r - t2;  // row index of (b, h, 0)
        for (int d = 0; d < HS; ++d) {
          dqkv(krow, C + h * HS + d) = 0;
          dqkv(krow, 2 * C + h * HS + d) = 0;
        }
        for (int t = t2; t < seq_len; ++t) {
          const long qrow = static_cast<long>(b) * seq_len + t;
          const long aidx = (hbase + t) * seq_len + t2;
          const T dp = dpre(aidx) * scale;
          T a = att(aidx);
          if (dropping) a = drop.key.keep_at(drop.index(b, h, t, t2, seq_len)) ? a * dscale : T(0);
          for (int d = 0; d < HS; ++d) {
            dqkv(krow, C + h * HS + d) += dp * qkv(qrow, h * HS + d);
            dqkv(krow, 2 * C + h * HS + d) += a * dout(qrow, h * HS + d);
          }
        }
      });
}

#define TRIDENT_INST(T)                                                                                       \
  template void attention_forward_ref<T>(View2<T>, View1<T>, View2<const T>, int, int, int,                    \
                                         const AttentionDropout&);                                            \
  template void attention_backward_ref<T>(View2<T>, View1<T>, View2<const T>, View2<const T>, View1<const T>,  \
                                          int, int, int, const AttentionDropout&);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
