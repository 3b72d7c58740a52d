// kernels/embedding.hpp: token + learned position embedding (GPT-2, Radford et al. 2019 sec. 2.3;
// nanoGPT model.py `tok_emb + pos_emb`).
//
// Layer: kernels. Local. Shapes: tokens (B*T), wte (V, C), wpe (Tmax, C), out (B*T, C), T <= Tmax.
#pragma once

#include "core/types.hpp"

namespace trident {

/// out[b*T+t, :] = wte[tokens[b*T+t], :] + wpe[t, :]. Token ids must lie in [0, V) (the data
/// layer checks them when it loads a file).
template <class T>
void embedding_forward(View2<T> out, View1<const token_t> tokens, View2<const T> wte, View2<const T> wpe, int B,
                       int seq_len);

/// dwte[tokens[n], :] += dout[n, :]; dwpe[t, :] += sum_b dout[b*T+t, :]. Accumulates.
/// Deterministic: every output element is summed by one thread in a fixed order (no atomics).
template <class T>
void embedding_backward(View2<T> dwte, View2<T> dwpe, View2<const T> dout, View1<const token_t> tokens, int B,
                        int seq_len);

}  // namespace trident
