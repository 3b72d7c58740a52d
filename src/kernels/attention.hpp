// kernels/attention.hpp: causal multi-head scaled dot-product attention (Vaswani et al. 2017,
// sec. 3.2.1, eq. 1) with dropout on the attention probabilities (as nanoGPT's attn_dropout).
//
// Layer: kernels. Local. Shapes: qkv (B*T, 3*C) holding [q | k | v], each split into NH heads of
// HS = C / NH channels (head h at columns h*HS of its third); out (B*T, C); att (B*NH*T*T)
// holds the softmax probabilities (before dropout) saved for backward; dpre (B*NH*T*T) is
// backward scratch. C, NH are this rank's (tensor-parallel local) sizes.
#pragma once

#include "core/types.hpp"
#include "kernels/dropout.hpp"

namespace trident {

/// Global indices that key the attention-dropout mask, so it does not depend on dp or tp:
/// element (b, h, t, t2) has index (((sample_offset + b) * n_head_total + head_offset + h) * T + t) * T + t2.
struct AttentionDropout {
  DropoutKey key;                 ///< key.offset is ignored
  std::uint64_t sample_offset = 0;
  int head_offset = 0;
  int n_head_total = 1;
};

template <class T>
void attention_forward(View2<T> out, View1<T> att, View2<const T> qkv, int B, int seq_len, int NH,
                       const AttentionDropout& drop);

/// dqkv = gradient wrt qkv (overwritten). Uses att saved by forward and the same dropout.
template <class T>
void attention_backward(View2<T> dqkv, View1<T> dpre, View2<const T> dout, View2<const T> qkv, View1<const T> att,
                        int B, int seq_len, int NH, const AttentionDropout& drop);

}  // namespace trident
