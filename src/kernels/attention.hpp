// kernels/attention.hpp: causal multi-head scaled dot-product attention (Vaswani et al. 2017,
// sec. 3.2.1, eq. 1) with dropout on the attention probabilities (as nanoGPT's attn_dropout).
//
// Layer: kernels. Local. Shapes: qkv (B*T, 3*C) holding [q | k | v], each split into NH heads of
// HS = C / NH channels (head h at columns h*HS of its third); out (B*T, C); att (B*NH*T*T)
// holds the softmax probabilities (before dropout) saved for backward; dpre (B*NH*T*T) is
// backward scratch. C, NH are this rank's (tensor-parallel local) sizes.
//
// Two implementations with the same contract (HPCG style: the reference validates the fast one):
//  - attention_forward / attention_backward: S = Q K^T, Y = P V and the four backward products
//    are batched GEMMs over all (sequence, head) pairs (kernels/gemm.hpp: one strided-batched
//    cuBLAS call on CUDA, a loop of sgemm on the host) on head-major packed copies of q, k, v
//    (AttentionScratch); softmax, masking and dropout are element-wise kernels.
//  - attention_forward_fused / attention_backward_fused ([model] attention = fused): never store
//    the (T, T) probabilities. Forward keeps one query row's scores at a time and saves the row's
//    log-sum-exp; backward recomputes each row's probabilities from it (FlashAttention, Dao et al.
//    2022, Alg. 1-2; FlashAttention-2, Dao 2023, sec. 3.1), and the softmax backward's row sum
//    D = sum_j P dP from the row it holds, as the GEMM kernel does (FlashAttention's rowsum(dY o Y)
//    is the same sum in exact math but rounds other operands with bf16 inputs). The
//    tiles of FlashAttention are Br = 1 query row by Bc = T keys here: a row of T scores sits in a
//    CPU's L1 cache, so the softmax is the exact two-pass one over it, not the online rescaling
//    over key tiles that GPU shared memory needs. Loops are laid out to vectorise (K and V are
//    transposed per head, so scores run over keys; outputs over the head's channels). Causal
//    rows skip the masked half of the work.
//  - attention_forward_ref / attention_backward_ref: one thread per query (or key) row with
//    explicit loops; simple, allocation-free, used by the tests as the second oracle.
#pragma once

#include "core/types.hpp"
#include "kernels/dropout.hpp"
#include "kernels/gemm.hpp"

namespace trident {

/// Global indices that key the attention-dropout mask, so it does not depend on dp or tp:
/// element (b, h, t, t2) has index (((sample_offset + b) * n_head_total + head_offset + h) * T + t) * T + t2.
struct AttentionDropout {
  DropoutKey key;                 ///< key.offset is ignored
  std::uint64_t sample_offset = 0;
  int head_offset = 0;
  int n_head_total = 1;

  /// The global mask index of local element (b, h, t, t2). Device-safe.
  KOKKOS_INLINE_FUNCTION std::uint64_t index(int b, int h, int t, int t2, int seq_len) const {
    const auto T = static_cast<std::uint64_t>(seq_len);
    return (((sample_offset + static_cast<std::uint64_t>(b)) * static_cast<std::uint64_t>(n_head_total) +
             static_cast<std::uint64_t>(head_offset + h)) * T + static_cast<std::uint64_t>(t)) * T +
           static_cast<std::uint64_t>(t2);
  }
};

/// Work space of the GEMM attention, owned by the caller (kernels do not allocate). For B
/// sequences of T tokens and C channels: q, k, v, y, dq, dk, dv hold B*T*C elements each (head-major
/// (B, NH, T, HS) copies; with grouped-query attention k and v are repeated to NH heads); pdrop holds B*NH*T*T (the dropped-out probabilities; may be empty when
/// dropout is off).
template <class T>
struct AttentionScratch {
  View1<T> q, k, v, y, dq, dk, dv, pdrop;
  /// The fused kernels' work space: K^T and V^T per head (2 B*T*C) and two rows of T per
  /// (sequence, head) (2 B*NH*T); empty for the GEMM kernels.
  View1<T> fused;
  /// Elements needed in all for (B, T, C, NH) with or without dropout (GEMM kernels).
  static std::int64_t elements(int B, int seq_len, int C, int NH, bool dropout) {
    const std::int64_t btc = static_cast<std::int64_t>(B) * seq_len * C;
    return 7 * btc + (dropout ? static_cast<std::int64_t>(B) * NH * seq_len * seq_len : 0);
  }
  /// Elements of `fused` for (B, T, C, NH).
  static std::int64_t fused_elements(int B, int seq_len, int C, int NH) {
    return 2 * static_cast<std::int64_t>(B) * seq_len * C + 2 * static_cast<std::int64_t>(B) * NH * seq_len;
  }
};

/// `inputs`: how the GEMMs (two forward, four backward) round their inputs (kernels/gemm.hpp); softmax and dropout stay in T.
/// `NKV`: key/value heads for grouped-query attention (Ainslie et al. 2023, "GQA", sec. 2.2):
/// qkv is then (B*T, (NH + 2 NKV) HS) holding [q | k | v], and query head h attends with
/// key/value head h / (NH / NKV); 0 = NH (multi-head attention, qkv (B*T, 3C)). NKV divides NH.
template <class T>
void attention_forward(View2<T> out, View1<T> att, View2<const T> qkv, int B, int seq_len, int NH,
                       const AttentionDropout& drop, const AttentionScratch<T>& ws,
                       GemmInputs inputs = GemmInputs::native, int NKV = 0);

/// dqkv = gradient wrt qkv (overwritten; the layout of qkv, the k and v gradients summed over each
/// group's query heads). Uses att saved by forward and the same dropout.
template <class T>
void attention_backward(View2<T> dqkv, View1<T> dpre, View2<const T> dout, View2<const T> qkv, View1<const T> att,
                        int B, int seq_len, int NH, const AttentionDropout& drop, const AttentionScratch<T>& ws,
                        GemmInputs inputs = GemmInputs::native, int NKV = 0);

/// Fused attention (see the file comment). Same contract as attention_forward, except that `lse`
/// (B*NH*T) receives each query row's log-sum-exp of its scaled scores, log sum_j exp(s_tj),
/// instead of the probabilities; q, k, v, y of `ws` and ws.fused are used, pdrop is not (the
/// dropout mask is recomputed from its counter-based key). With GemmInputs::bf16 the operands of
/// the products the GEMM kernels would run in bf16 (q, k, v, the dropped-out probabilities) are
/// rounded to bf16 and the products accumulate in T, the math of the bf16 GEMM path. Local.
template <class T>
void attention_forward_fused(View2<T> out, View1<T> lse, View2<const T> qkv, int B, int seq_len, int NH,
                             const AttentionDropout& drop, const AttentionScratch<T>& ws,
                             GemmInputs inputs = GemmInputs::native, int NKV = 0);

/// Backward of attention_forward_fused: dqkv as attention_backward, from the `lse` forward wrote.
/// Uses q, k, v, y, dq, dk, dv and fused of `ws`; with GemmInputs::bf16, dY, the probabilities and
/// dS are rounded where the GEMM path rounds them. Local.
template <class T>
void attention_backward_fused(View2<T> dqkv, View2<const T> dout, View2<const T> qkv, View1<const T> lse, int B, int seq_len, int NH, const AttentionDropout& drop,
                              const AttentionScratch<T>& ws, GemmInputs inputs = GemmInputs::native, int NKV = 0);

/// Reference implementations (same contract, no scratch).
template <class T>
void attention_forward_ref(View2<T> out, View1<T> att, View2<const T> qkv, int B, int seq_len, int NH,
                           const AttentionDropout& drop);
template <class T>
void attention_backward_ref(View2<T> dqkv, View1<T> dpre, View2<const T> dout, View2<const T> qkv,
                            View1<const T> att, int B, int seq_len, int NH, const AttentionDropout& drop);

}  // namespace trident
