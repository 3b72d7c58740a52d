#include "kernels/attention.hpp"

#include "core/kmath.hpp"
#include "kernels/convert.hpp"
#include "kernels/gemm.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/row_parallel.hpp"
#include "kernels/vmath.hpp"

#include <type_traits>

namespace trident {

namespace {

/// x as a D: itself, or rounded to bf16 (to_bf16: the rounding of bf16 GEMM inputs). Device-safe.
template <class D, class T>
KOKKOS_INLINE_FUNCTION D store_as(T x) {
  if constexpr (std::is_same_v<D, bf16_t>)
    return to_bf16(static_cast<float>(x));
  else
    return x;
}

/// Columns [col0, col0 + (NH / group) * HS) of a row-major (B*T, ld) matrix -> head-major
/// (B, NH, T, HS) at dst (as D: T, or bf16_t rounded), head h copied from source head h / group (grouped-query attention repeats each
/// key/value head for `group` query heads, as transformers' repeat_kv; group = 1: a plain copy).
/// Work items are (row, head) pairs, each a contiguous copy of HS elements, as short rows
/// (kernels/row_parallel.hpp): a team thread per pair, its vector lanes over the HS elements, so a
/// GPU warp reads and writes consecutive addresses.
template <class T, class D = T>
void pack_heads(D* dst, View2<const T> src, int col0, int B, int seq_len, int HS, int NH, int group = 1) {
  const std::int64_t items = static_cast<std::int64_t>(B) * seq_len * NH;
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    // One thread: loops without the per-item divisions, writing each head's (T, HS) block in order.
    const std::int64_t ld = static_cast<std::int64_t>(src.stride(0));
    for (std::int64_t b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h) {
        D* d = dst + (b * NH + h) * seq_len * HS;
        const T* s = &src(b * seq_len, col0 + (h / group) * HS);
        for (int t = 0; t < seq_len; ++t, d += HS, s += ld)
          if constexpr (std::is_same_v<D, bf16_t>)
            detail::gemm_round(d, s, HS);  // the GEMMs' own rounding (vector instructions)
          else
            for (int k = 0; k < HS; ++k) d[k] = s[k];
      }
    return;
  }
#endif
  Kokkos::parallel_for(
      "trident::attention_pack", short_row_policy(items), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, items, [&](const std::int64_t i) {
          const std::int64_t row = i / NH;
          const int h = static_cast<int>(i % NH);
          const std::int64_t b = row / seq_len, t = row % seq_len;
          D* d = dst + ((b * NH + h) * seq_len + t) * HS;
          const T* s = &src(row, col0 + (h / group) * HS);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, HS), [&](const int k) { d[k] = store_as<D>(s[k]); });
        });
      });
}

/// The inverse of pack_heads: head-major (B, NH, T, HS) -> columns [col0, col0 + (NH / group) *
/// HS) of (B*T, ld); with group > 1 each destination head is the sum of its `group` source heads,
/// added in head order (the gradient of repeat_kv; deterministic).
template <class T>
void unpack_heads(View2<T> dst, View1<const T> src, int col0, int B, int seq_len, int HS, int NH, int group = 1) {
  const int NKV = NH / group;
  const std::int64_t items = static_cast<std::int64_t>(B) * seq_len * NKV;
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    // One thread: loops without the per-item divisions; the same sums in the same head order.
    const std::int64_t ld = static_cast<std::int64_t>(dst.stride(0));
    const std::int64_t head_stride = static_cast<std::int64_t>(seq_len) * HS;
    for (std::int64_t b = 0; b < B; ++b)
      for (int j = 0; j < NKV; ++j) {
        T* d = &dst(b * seq_len, col0 + j * HS);
        const T* s0 = src.data() + (b * NH + j * group) * head_stride;
        for (int t = 0; t < seq_len; ++t, d += ld, s0 += HS)
          for (int k = 0; k < HS; ++k) {
            T acc = s0[k];
            for (int g = 1; g < group; ++g) acc += s0[g * head_stride + k];
            d[k] = acc;
          }
      }
    return;
  }
#endif
  Kokkos::parallel_for(
      "trident::attention_unpack", short_row_policy(items), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, items, [&](const std::int64_t i) {
          const std::int64_t row = i / NKV;
          const int j = static_cast<int>(i % NKV);
          const std::int64_t b = row / seq_len, t = row % seq_len;
          T* d = &dst(row, col0 + j * HS);
          const T* s0 = src.data() + ((b * NH + j * group) * seq_len + t) * HS;
          const std::int64_t head_stride = static_cast<std::int64_t>(seq_len) * HS;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, HS), [&](const int k) {
            T acc = s0[k];
            for (int g = 1; g < group; ++g) acc += s0[g * head_stride + k];
            d[k] = acc;
          });
        });
      });
}

/// q, k and v of qkv ([q | k | v], NH query and NKV key/value heads of HS channels) head-major
/// into ws.q, ws.k, ws.v, each key/value head repeated for its NH / NKV query heads: what all
/// four attention kernels start from.
template <class T, class D = T>
void pack_qkv(D* q, D* k, D* v, View2<const T> qkv, int B, int seq_len, int HS, int NH, int NKV) {
  const int C = NH * HS, Ckv = NKV * HS, group = NH / NKV;
  pack_heads<T, D>(q, qkv, 0, B, seq_len, HS, NH);
  pack_heads<T, D>(k, qkv, C, B, seq_len, HS, NH, group);
  pack_heads<T, D>(v, qkv, C + Ckv, B, seq_len, HS, NH, group);
}
template <class T>
void pack_qkv(const AttentionScratch<T>& ws, View2<const T> qkv, int B, int seq_len, int HS, int NH, int NKV) {
  pack_qkv<T, T>(ws.q.data(), ws.k.data(), ws.v.data(), qkv, B, seq_len, HS, NH, NKV);
}

/// A flat array of `heads` equal row-major (rows, cols) blocks as a batch of matrices.
template <class T>
View3<T> batch(const View1<T>& v, long heads, std::int64_t rows, std::int64_t cols) {
  return View3<T>(v.data(), static_cast<size_t>(heads), static_cast<size_t>(rows), static_cast<size_t>(cols));
}
template <class T>
View3<const T> cbatch(const View1<T>& v, long heads, std::int64_t rows, std::int64_t cols) {
  return View3<const T>(v.data(), static_cast<size_t>(heads), static_cast<size_t>(rows), static_cast<size_t>(cols));
}

/// Causal softmax of each of the `rows` rows of T scores in att, in place (row r is query
/// position r % T; keys after it get probability 0); p16 non-null: also the probabilities rounded
/// to bf16 into p16 (rows * T; the bf16 operand of Y = P V). Rows of T scores are short rows
/// (kernels/row_parallel.hpp): a team thread per row, vector lanes over the row's scores, max and
/// sum as vector reductions (in index order on the host).
template <class T>
void causal_softmax_rows(View1<T> att, std::int64_t rows, int Tn, bf16_t* p16) {
  if constexpr (kKernelsOnHost) {
    // The host: the row's exponentials as one vector call (libmvec, kernels/vmath.hpp), then the
    // sum in index order as below; the max is exact in any order.
    Kokkos::parallel_for(
        "trident::attention_softmax", Kokkos::RangePolicy<ExecSpace>(0, rows), [=](const std::int64_t r) {
          const int t = static_cast<int>(r % Tn);
          T* a = att.data() + r * Tn;
          T maxv = a[0];
          for (int t2 = 1; t2 <= t; ++t2) maxv = a[t2] > maxv ? a[t2] : maxv;
          detail::exp_shifted_inplace(a, t + 1, maxv);
          T sum = 0;
          for (int t2 = 0; t2 <= t; ++t2) sum += a[t2];
          const T inv = T(1) / sum;
          for (int t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
          for (int t2 = t + 1; t2 < Tn; ++t2) a[t2] = 0;
          if constexpr (std::is_same_v<T, float>)
            if (p16 != nullptr) detail::gemm_round(p16 + r * Tn, a, Tn);
        });
  } else
  Kokkos::parallel_for(
      "trident::attention_softmax", short_row_policy(rows), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, rows, [&](const std::int64_t r) {
          const int t = static_cast<int>(r % Tn);
          T* a = att.data() + r * Tn;
          T maxv;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, t + 1),
              [&](const int t2, T& mx) { mx = a[t2] > mx ? a[t2] : mx; }, Kokkos::Max<T>(maxv));
          T sum;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, t + 1),
              [&](const int t2, T& acc) {
                a[t2] = kmath::exp(a[t2] - maxv);
                acc += a[t2];
              },
              sum);
          const T inv = T(1) / sum;
          // Same range as the loop that wrote a[t2], so each lane reads back its own writes.
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1), [&](const int t2) { a[t2] *= inv; });
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1, Tn), [&](const int t2) { a[t2] = 0; });
          if (p16 != nullptr) {
            bf16_t* o = p16 + r * Tn;
            // Each lane rounds the elements it wrote above.
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1),
                                 [&](const int t2) { o[t2] = to_bf16(static_cast<float>(a[t2])); });
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1, Tn), [&](const int t2) { o[t2] = 0; });
          }
        });
      });
}

/// The dropped-out probabilities (kernels/dropout.hpp; the mask keyed by global indices, `heads`
/// = B * NH (sequence, head) pairs of T x T): pd[i] = keep ? att[i] * scale : 0 where pd is
/// non-null, and the same value rounded to bf16 into p16 where p16 is non-null.
template <class T>
void dropped_probabilities(T* pd, bf16_t* p16, View1<const T> att, const AttentionDropout& drop, long heads, int NH,
                           int Tn) {
  const T dscale = static_cast<T>(drop.key.scale());
  Kokkos::parallel_for(
      "trident::attention_dropout", Kokkos::RangePolicy<ExecSpace>(0, heads * Tn * Tn), KOKKOS_LAMBDA(const long i) {
        const int t2 = static_cast<int>(i % Tn), t = static_cast<int>((i / Tn) % Tn);
        const long bh = i / (static_cast<long>(Tn) * Tn);
        const int h = static_cast<int>(bh % NH), b = static_cast<int>(bh / NH);
        const T v = drop.key.keep_at(drop.index(b, h, t, t2, Tn)) ? att(i) * dscale : T(0);
        if (pd != nullptr) pd[i] = v;
        if (p16 != nullptr) p16[i] = to_bf16(static_cast<float>(v));
      });
}

/// Softmax backward of each of the `rows` rows of T probabilities: dS = P * (dP - sum(P * dP)),
/// P from att, dP from dpre, through the dropout mask of `drop` (NH heads per sequence). ds16
/// null: dS in place in dpre. ds16 non-null (float only): dS written rounded to bf16 into ds16
/// (rows * T; the bf16 operand of the dQ and dK GEMMs), dpre left as scratch. The same arithmetic
/// either way. Short rows as the forward softmax; the mask and the dot product stay separate loops,
/// as in the former one-thread-per-row kernel: fused into one reduction, the host compiler
/// contracted a * d into an FMA and the host results changed in their last bits.
template <class T>
void softmax_backward_rows(View1<T> dpre, View1<const T> att, std::int64_t rows, int Tn, int NH,
                           const AttentionDropout& drop, bf16_t* ds16) {
  const bool dropping = drop.key.active();
  const T dscale = static_cast<T>(drop.key.scale());
  if constexpr (kKernelsOnHost && std::is_same_v<T, float>) {
    if (ds16 != nullptr) {
      // The host with a bf16 output: the row as the kernel below computes it (the same loops in the
      // same order, so the same bits), in place in dP, then rounded with the GEMMs' own rounding.
      Kokkos::parallel_for(
          "trident::attention_softmax_backward", Kokkos::RangePolicy<ExecSpace>(0, rows), [=](const std::int64_t r) {
            const int t = static_cast<int>(r % Tn);
            const std::int64_t bh = r / Tn;
            const int h = static_cast<int>(bh % NH), b = static_cast<int>(bh / NH);
            float* d = dpre.data() + r * Tn;
            const float* a = att.data() + r * Tn;
            if (dropping)
              for (int t2 = 0; t2 <= t; ++t2) d[t2] = drop.key.keep_at(drop.index(b, h, t, t2, Tn)) ? d[t2] * dscale : 0.f;
            float dot = 0;
            for (int t2 = 0; t2 <= t; ++t2) dot += a[t2] * d[t2];
            for (int t2 = 0; t2 <= t; ++t2) d[t2] = a[t2] * (d[t2] - dot);
            for (int t2 = t + 1; t2 < Tn; ++t2) d[t2] = 0;
            detail::gemm_round(ds16 + r * Tn, d, Tn);
          });
      return;
    }
  }
  Kokkos::parallel_for(
      "trident::attention_softmax_backward", short_row_policy(rows), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, rows, [&](const std::int64_t r) {
          const int t = static_cast<int>(r % Tn);
          const std::int64_t bh = r / Tn;
          const int h = static_cast<int>(bh % NH), b = static_cast<int>(bh / NH);
          T* d = dpre.data() + r * Tn;
          const T* a = att.data() + r * Tn;
          if (dropping)
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1), [&](const int t2) {
              d[t2] = drop.key.keep_at(drop.index(b, h, t, t2, Tn)) ? d[t2] * dscale : T(0);
            });
          // Same range as the loop that wrote d[t2]: each lane reads back its own writes.
          T dot;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, t + 1), [&](const int t2, T& acc) { acc += a[t2] * d[t2]; }, dot);
          if (ds16 == nullptr) {
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1),
                                 [&](const int t2) { d[t2] = a[t2] * (d[t2] - dot); });
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1, Tn), [&](const int t2) { d[t2] = 0; });
          } else {
            bf16_t* o = ds16 + r * Tn;
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1), [&](const int t2) {
              o[t2] = to_bf16(static_cast<float>(a[t2] * (d[t2] - dot)));
            });
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, t + 1, Tn), [&](const int t2) { o[t2] = 0; });
          }
        });
      });
}

/// A batch of `heads` row-major (rows, cols) bf16 matrices stored back to back at p.
View3<const bf16_t> batch16(const bf16_t* p, long heads, std::int64_t rows, std::int64_t cols) {
  return View3<const bf16_t>(p, static_cast<size_t>(heads), static_cast<size_t>(rows), static_cast<size_t>(cols));
}
/// The front of a float scratch buffer reused for bf16 values (half its bytes or fewer).
bf16_t* as_bf16(const View1<float>& v) { return reinterpret_cast<bf16_t*>(v.data()); }

/// attention_forward with bf16 GEMM inputs (float only; gemm_bf16_supported()): every GEMM operand
/// is written in bf16 by its producer and read as it is (gemm_batched_bf16, kernels/gemm.hpp):
/// q, k, v packed straight to bf16 into the front of ws.q, ws.k, ws.v, and the probabilities
/// rounded by the softmax (or the dropout) into a GemmBf16Room, in place of a float copy rounded
/// again by each GEMM. The GEMMs see the bits the rounding GEMMs saw: results are bitwise those.
void attention_forward_held(View2<float> out, View1<float> att, View2<const float> qkv, int B, int Tn, int NH,
                            const AttentionDropout& drop, const AttentionScratch<float>& ws, int NKV) {
  const int C = static_cast<int>(out.extent(1)), HS = C / NH;
  const long heads = static_cast<long>(B) * NH;
  const float scale = 1.f / kmath::sqrt(static_cast<float>(HS));
  bf16_t *q16 = as_bf16(ws.q), *k16 = as_bf16(ws.k), *v16 = as_bf16(ws.v);
  pack_qkv<float, bf16_t>(q16, k16, v16, qkv, B, Tn, HS, NH, NKV);
  gemm_batched_bf16('N', 'T', scale, batch16(q16, heads, Tn, HS), batch16(k16, heads, Tn, HS), 0.f,
                    batch(att, heads, Tn, Tn));
  GemmBf16Room room(heads * Tn * Tn);
  const bool dropping = drop.key.active();
  causal_softmax_rows<float>(att, heads * Tn, Tn, dropping ? nullptr : room.data());
  if (dropping) dropped_probabilities<float>(nullptr, room.data(), att, drop, heads, NH, Tn);
  gemm_batched_bf16('N', 'N', 1.f, batch16(room.data(), heads, Tn, Tn), batch16(v16, heads, Tn, HS), 0.f,
                    batch(ws.y, heads, Tn, HS));
  unpack_heads<float>(out, ws.y, 0, B, Tn, HS, NH);
}

/// attention_backward with bf16 GEMM inputs, as attention_forward_held: q, k, v and dY packed to
/// bf16 (dY into the front of ws.y), the probabilities rounded into a GemmBf16Room for dV, and the
/// softmax backward writing dS only in bf16, over them in the same room (dS feeds only the dQ and
/// dK GEMMs). Bitwise the results of the rounding GEMMs.
void attention_backward_held(View2<float> dqkv, View1<float> dpre, View2<const float> dout,
                             View2<const float> qkv, View1<const float> att, int B, int Tn, int NH,
                             const AttentionDropout& drop, const AttentionScratch<float>& ws, int NKV) {
  const int C = static_cast<int>(dout.extent(1)), HS = C / NH;
  const int group = NH / NKV, Ckv = NKV * HS;
  const long heads = static_cast<long>(B) * NH;
  const float scale = 1.f / kmath::sqrt(static_cast<float>(HS));
  bf16_t *q16 = as_bf16(ws.q), *k16 = as_bf16(ws.k), *v16 = as_bf16(ws.v), *dy16 = as_bf16(ws.y);
  pack_qkv<float, bf16_t>(q16, k16, v16, qkv, B, Tn, HS, NH, NKV);
  pack_heads<float, bf16_t>(dy16, dout, 0, B, Tn, HS, NH);
  GemmBf16Room room(heads * Tn * Tn);
  bf16_t* const p16 = room.data();
  if (drop.key.active())
    dropped_probabilities<float>(nullptr, p16, att, drop, heads, NH, Tn);
  else
    room.round_from(att.data(), heads * Tn * Tn);
  // dP = dY V^T; dV = P^T dY
  gemm_batched_bf16('N', 'T', 1.f, batch16(dy16, heads, Tn, HS), batch16(v16, heads, Tn, HS), 0.f,
                    batch(dpre, heads, Tn, Tn));
  gemm_batched_bf16('T', 'N', 1.f, batch16(p16, heads, Tn, Tn), batch16(dy16, heads, Tn, HS), 0.f,
                    batch(ws.dv, heads, Tn, HS));
  // dS = P * (dP - sum(P * dP)), written only in bf16, over P's copy (which dV was the last to read;
  // stream order on the device).
  softmax_backward_rows<float>(dpre, att, heads * Tn, Tn, NH, drop, p16);
  // dQ = scale dS K; dK = scale dS^T Q
  gemm_batched_bf16('N', 'N', scale, batch16(p16, heads, Tn, Tn), batch16(k16, heads, Tn, HS), 0.f,
                    batch(ws.dq, heads, Tn, HS));
  gemm_batched_bf16('T', 'N', scale, batch16(p16, heads, Tn, Tn), batch16(q16, heads, Tn, HS), 0.f,
                    batch(ws.dk, heads, Tn, HS));
  unpack_heads<float>(dqkv, ws.dq, 0, B, Tn, HS, NH);
  unpack_heads<float>(dqkv, ws.dk, C, B, Tn, HS, NH, group);
  unpack_heads<float>(dqkv, ws.dv, C + Ckv, B, Tn, HS, NH, group);
}

}  // namespace

template <class T>
void attention_forward(View2<T> out, View1<T> att, View2<const T> qkv, int B, int seq_len, int NH,
                       const AttentionDropout& drop, const AttentionScratch<T>& ws, GemmInputs inputs, int NKV) {
  const int C = static_cast<int>(out.extent(1)), HS = C / NH, Tn = seq_len;
  if (NKV <= 0) NKV = NH;
  if constexpr (std::is_same_v<T, float>)
    if (inputs == GemmInputs::bf16 && gemm_bf16_supported())
      return attention_forward_held(out, att, qkv, B, Tn, NH, drop, ws, NKV);
  const long heads = static_cast<long>(B) * NH;
  const T scale = T(1) / kmath::sqrt(static_cast<T>(HS));
  pack_qkv<T>(ws, qkv, B, Tn, HS, NH, NKV);
  // S = scale Q K^T, all (sequence, head) pairs in one batched GEMM
  gemm_batched<T>('N', 'T', scale, cbatch(ws.q, heads, Tn, HS), cbatch(ws.k, heads, Tn, HS), T(0),
                  batch(att, heads, Tn, Tn), inputs);
  causal_softmax_rows<T>(att, heads * Tn, Tn, nullptr);
  View1<T> p = att;
  if (drop.key.active()) {
    dropped_probabilities<T>(ws.pdrop.data(), nullptr, att, drop, heads, NH, Tn);
    p = ws.pdrop;
  }
  // Y = P V
  gemm_batched<T>('N', 'N', T(1), cbatch(p, heads, Tn, Tn), cbatch(ws.v, heads, Tn, HS), T(0),
                  batch(ws.y, heads, Tn, HS), inputs);
  unpack_heads<T>(out, ws.y, 0, B, Tn, HS, NH);
}

template <class T>
void attention_backward(View2<T> dqkv, View1<T> dpre, View2<const T> dout, View2<const T> qkv, View1<const T> att,
                        int B, int seq_len, int NH, const AttentionDropout& drop, const AttentionScratch<T>& ws,
                        GemmInputs inputs, int NKV) {
  const int C = static_cast<int>(dout.extent(1)), HS = C / NH, Tn = seq_len;
  if (NKV <= 0) NKV = NH;
  const int group = NH / NKV, Ckv = NKV * HS;
  const long heads = static_cast<long>(B) * NH;
  const T scale = T(1) / kmath::sqrt(static_cast<T>(HS));
  if constexpr (std::is_same_v<T, float>)
    if (inputs == GemmInputs::bf16 && gemm_bf16_supported())
      return attention_backward_held(dqkv, dpre, dout, qkv, att, B, Tn, NH, drop, ws, NKV);
  // Native inputs from here (bf16 ones where they are not supported: the GEMMs refuse them).
  pack_qkv<T>(ws, qkv, B, Tn, HS, NH, NKV);
  pack_heads<T>(ws.y.data(), dout, 0, B, Tn, HS, NH);  // y holds dY
  View1<const T> p = att;
  if (drop.key.active()) {
    dropped_probabilities<T>(ws.pdrop.data(), nullptr, att, drop, heads, NH, Tn);
    p = View1<const T>(ws.pdrop.data(), ws.pdrop.extent(0));
  }
  // dP = dY V^T; dV = P^T dY
  gemm_batched<T>('N', 'T', T(1), cbatch(ws.y, heads, Tn, HS), cbatch(ws.v, heads, Tn, HS), T(0),
                  batch(dpre, heads, Tn, Tn), inputs);
  gemm_batched<T>('T', 'N', T(1), View3<const T>(p.data(), static_cast<size_t>(heads), Tn, Tn),
                  cbatch(ws.y, heads, Tn, HS), T(0), batch(ws.dv, heads, Tn, HS), inputs);
  // Softmax backward per row, in place: dS = P * (dP - sum(P * dP)).
  softmax_backward_rows<T>(dpre, att, heads * Tn, Tn, NH, drop, nullptr);
  // dQ = scale dS K; dK = scale dS^T Q
  gemm_batched<T>('N', 'N', scale, cbatch(dpre, heads, Tn, Tn), cbatch(ws.k, heads, Tn, HS), T(0),
                  batch(ws.dq, heads, Tn, HS), inputs);
  gemm_batched<T>('T', 'N', scale, cbatch(dpre, heads, Tn, Tn), cbatch(ws.q, heads, Tn, HS), T(0),
                  batch(ws.dk, heads, Tn, HS), inputs);
  unpack_heads<T>(dqkv, ws.dq, 0, B, Tn, HS, NH);
  unpack_heads<T>(dqkv, ws.dk, C, B, Tn, HS, NH, group);
  unpack_heads<T>(dqkv, ws.dv, C + Ckv, B, Tn, HS, NH, group);
}

// ---- fused attention ------------------------------------------------------------------------------

namespace {

/// x rounded through bf16 when `b16` (the GEMM path's bf16 inputs), else x. Device-safe.
template <class T>
KOKKOS_INLINE_FUNCTION T maybe_bf16(T x, bool b16) {
  return b16 ? static_cast<T>(from_bf16(to_bf16(static_cast<float>(x)))) : x;
}

/// The per-(sequence, head) pieces of AttentionScratch::fused: K^T and V^T (HS, T) and two rows.
template <class T>
struct FusedHead {
  T *kt, *vt, *s, *d;
  KOKKOS_INLINE_FUNCTION FusedHead(const View1<T>& f, long hh, long heads, int Tn, int HS) {
    const long head = static_cast<long>(Tn) * HS, all = heads * head;
    kt = f.data() + hh * head;
    vt = f.data() + all + hh * head;
    s = f.data() + 2 * all + hh * Tn;
    d = f.data() + 2 * all + heads * Tn + hh * Tn;
  }
};

/// dst (HS, T) = src (T, HS) transposed: one head's K or V, so score loops run over keys.
template <class T>
KOKKOS_INLINE_FUNCTION void transpose_head(T* dst, const T* src, int Tn, int HS) {
  for (int j = 0; j < Tn; ++j)
    for (int c = 0; c < HS; ++c) dst[static_cast<long>(c) * Tn + j] = src[static_cast<long>(j) * HS + c];
}

/// s[j] = sum_c a[c] b^T[c][j] for j <= t (b^T (HS, T)): a row of a head's scores or dP.
template <class T>
KOKKOS_INLINE_FUNCTION void row_times_transposed(T* s, const T* a, const T* bt, int t, int Tn, int HS) {
  for (int j = 0; j <= t; ++j) s[j] = 0;
  for (int c = 0; c < HS; ++c) {
    const T ac = a[c];
    const T* b = bt + static_cast<long>(c) * Tn;
    for (int j = 0; j <= t; ++j) s[j] += ac * b[j];
  }
}

}  // namespace

template <class T>
void attention_forward_fused(View2<T> out, View1<T> lse, View2<const T> qkv, int B, int seq_len, int NH,
                             const AttentionDropout& drop, const AttentionScratch<T>& ws, GemmInputs inputs,
                             int NKV) {
  const int C = static_cast<int>(out.extent(1)), HS = C / NH, Tn = seq_len;
  if (NKV <= 0) NKV = NH;
  const long heads = static_cast<long>(B) * NH;
  const T scale = T(1) / kmath::sqrt(static_cast<T>(HS));
  const bool b16 = inputs == GemmInputs::bf16, dropping = drop.key.active();
  const T dscale = static_cast<T>(drop.key.scale());
  pack_qkv<T>(ws, qkv, B, Tn, HS, NH, NKV);
  if (b16) {
    const auto n = static_cast<size_t>(heads * Tn * HS);
    // A named array, not a braced list: nvcc 13's front end miscompiles a range-for over a braced
    // list of a dependent type inside a template.
    const View1<T> rounded[] = {ws.q, ws.k, ws.v};
    for (const View1<T>& x : rounded) round_through_bf16<T>(View1<T>(x.data(), n));
  }
  const View1<T> f = ws.fused, yv = ws.y;
  const View1<const T> qv = ws.q, kv = ws.k, vv = ws.v;
  Kokkos::parallel_for(
      "trident::attention_forward_fused", Kokkos::RangePolicy<ExecSpace>(0, heads), KOKKOS_LAMBDA(const long hh) {
        const int h = static_cast<int>(hh % NH), b = static_cast<int>(hh / NH);
        const long base = hh * Tn * HS;
        const FusedHead<T> w(f, hh, heads, Tn, HS);
        transpose_head(w.kt, kv.data() + base, Tn, HS);
        const T* v = vv.data() + base;
        for (int t = 0; t < Tn; ++t) {
          row_times_transposed(w.s, qv.data() + base + static_cast<long>(t) * HS, w.kt, t, Tn, HS);
          T maxv = -Kokkos::reduction_identity<T>::min();
          for (int j = 0; j <= t; ++j) {
            w.s[j] *= scale;
            maxv = w.s[j] > maxv ? w.s[j] : maxv;
          }
          T sum = 0;
          for (int j = 0; j <= t; ++j) {
            w.s[j] = kmath::exp(w.s[j] - maxv);
            sum += w.s[j];
          }
          lse(hh * Tn + t) = maxv + kmath::log(sum);
          const T inv = T(1) / sum;
          T* y = yv.data() + base + static_cast<long>(t) * HS;
          for (int c = 0; c < HS; ++c) y[c] = 0;
          for (int j = 0; j <= t; ++j) {
            T p = w.s[j] * inv;
            if (dropping) p = drop.key.keep_at(drop.index(b, h, t, j, Tn)) ? p * dscale : T(0);
            p = maybe_bf16(p, b16);
            const T* vj = v + static_cast<long>(j) * HS;
            for (int c = 0; c < HS; ++c) y[c] += p * vj[c];
          }
        }
      });
  unpack_heads<T>(out, ws.y, 0, B, Tn, HS, NH);
}

template <class T>
void attention_backward_fused(View2<T> dqkv, View2<const T> dout, View2<const T> qkv, View1<const T> lse, int B, int seq_len, int NH, const AttentionDropout& drop,
                              const AttentionScratch<T>& ws, GemmInputs inputs, int NKV) {
  const int C = static_cast<int>(dout.extent(1)), HS = C / NH, Tn = seq_len;
  if (NKV <= 0) NKV = NH;
  const int group = NH / NKV, Ckv = NKV * HS;
  const long heads = static_cast<long>(B) * NH;
  const T scale = T(1) / kmath::sqrt(static_cast<T>(HS));
  const bool b16 = inputs == GemmInputs::bf16, dropping = drop.key.active();
  const T dscale = static_cast<T>(drop.key.scale());
  pack_qkv<T>(ws, qkv, B, Tn, HS, NH, NKV);
  pack_heads<T>(ws.y.data(), dout, 0, B, Tn, HS, NH);  // y holds dY
  if (b16) {
    const auto n = static_cast<size_t>(heads * Tn * HS);
    const View1<T> rounded[] = {ws.q, ws.k, ws.v, ws.y};  // a named array: see attention_forward_fused
    for (const View1<T>& x : rounded) round_through_bf16<T>(View1<T>(x.data(), n));
  }
  const View1<T> f = ws.fused, dqv = ws.dq, dkv = ws.dk, dvv = ws.dv;
  const View1<const T> qv = ws.q, kv = ws.k, vv = ws.v, dyv = ws.y;
  Kokkos::parallel_for(
      "trident::attention_backward_fused", Kokkos::RangePolicy<ExecSpace>(0, heads), KOKKOS_LAMBDA(const long hh) {
        const int h = static_cast<int>(hh % NH), b = static_cast<int>(hh / NH);
        const long base = hh * Tn * HS;
        const FusedHead<T> w(f, hh, heads, Tn, HS);
        transpose_head(w.kt, kv.data() + base, Tn, HS);
        transpose_head(w.vt, vv.data() + base, Tn, HS);
        const T *q = qv.data() + base, *k = kv.data() + base;
        T *dq = dqv.data() + base, *dk = dkv.data() + base, *dv = dvv.data() + base;
        for (long i = 0; i < static_cast<long>(Tn) * HS; ++i) dk[i] = dv[i] = 0;
        for (int t = 0; t < Tn; ++t) {
          const T* qt = q + static_cast<long>(t) * HS;
          const T* dyt = dyv.data() + base + static_cast<long>(t) * HS;
          row_times_transposed(w.s, qt, w.kt, t, Tn, HS);   // scores
          row_times_transposed(w.d, dyt, w.vt, t, Tn, HS);  // dP
          // The row's probabilities and dP through the dropout mask, then the softmax backward's
          // dot product D = sum_j P_tj dP_tj over the row, as the GEMM kernel forms it (so bf16
          // inputs round the same operands; FlashAttention's dY . Y is the same sum in exact math).
          const T l = lse(hh * Tn + t);
          T D = 0;
          for (int j = 0; j <= t; ++j) {
            w.s[j] = kmath::exp(w.s[j] * scale - l);
            if (dropping) w.d[j] = drop.key.keep_at(drop.index(b, h, t, j, Tn)) ? w.d[j] * dscale : T(0);
          }
          for (int j = 0; j <= t; ++j) D += w.s[j] * w.d[j];
          T* dqt = dq + static_cast<long>(t) * HS;
          for (int c = 0; c < HS; ++c) dqt[c] = 0;
          for (int j = 0; j <= t; ++j) {
            const T p = w.s[j];
            T pd = p;
            if (dropping) pd = drop.key.keep_at(drop.index(b, h, t, j, Tn)) ? p * dscale : T(0);
            const T ds = maybe_bf16(p * (w.d[j] - D), b16);
            pd = maybe_bf16(pd, b16);
            const T* kj = k + static_cast<long>(j) * HS;
            T *dkj = dk + static_cast<long>(j) * HS, *dvj = dv + static_cast<long>(j) * HS;
            for (int c = 0; c < HS; ++c) {
              dqt[c] += ds * kj[c];
              dkj[c] += ds * qt[c];
              dvj[c] += pd * dyt[c];
            }
          }
          for (int c = 0; c < HS; ++c) dqt[c] *= scale;
        }
        for (long i = 0; i < static_cast<long>(Tn) * HS; ++i) dk[i] *= scale;
      });
  unpack_heads<T>(dqkv, ws.dq, 0, B, Tn, HS, NH);
  unpack_heads<T>(dqkv, ws.dk, C, B, Tn, HS, NH, group);
  unpack_heads<T>(dqkv, ws.dv, C + Ckv, B, Tn, HS, NH, group);
}

#define TRIDENT_INST(T)                                                                                       \
  template void attention_forward<T>(View2<T>, View1<T>, View2<const T>, int, int, int, const AttentionDropout&, \
                                     const AttentionScratch<T>&, GemmInputs, int);                                 \
  template void attention_backward<T>(View2<T>, View1<T>, View2<const T>, View2<const T>, View1<const T>, int, \
                                      int, int, const AttentionDropout&, const AttentionScratch<T>&, GemmInputs, int); \
  template void attention_forward_fused<T>(View2<T>, View1<T>, View2<const T>, int, int, int, const AttentionDropout&, \
                                           const AttentionScratch<T>&, GemmInputs, int);                            \
  template void attention_backward_fused<T>(View2<T>, View2<const T>, View2<const T>, View1<const T>,                 \
                                            int, int, int, const AttentionDropout&, const AttentionScratch<T>&,      \
                                            GemmInputs, int);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
