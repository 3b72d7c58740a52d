// kernels/embedding.hpp: token + learned position embedding (GPT-2, Radford et al. 2019 sec. 2.3;
// nanoGPT model.py `tok_emb + pos_emb`), vocab-parallel capable (Megatron-LM, Shoeybi et al. 2019,
// sec. 3: each tp rank holds rows [vocab_start, vocab_start + rows) of wte and contributes zero for
// tokens outside them; a sum over tp then gives every rank the full embedding, exactly).
//
// Layer: kernels. Local. Shapes: tokens (B*T), wte (rows, C) (a vocabulary partition, maybe padded),
// wpe (Tmax, C) or empty, out (B*T, C), T <= Tmax.
#pragma once

#include "core/types.hpp"

namespace trident {

/// out[b*T+t, :] = (tokens in [vocab_start, vocab_start + vocab_rows) ? wte[token - vocab_start, :] : 0)
///                 + (wpe non-empty ? wpe[t, :] : 0).
/// Token ids must lie in [0, V) (the data layer checks them when it loads a file).
template <class T>
void embedding_forward(View2<T> out, View1<const token_t> tokens, View2<const T> wte, token_t vocab_start,
                       token_t vocab_rows, View2<const T> wpe, int B, int seq_len);

/// dwte[tokens[n] - vocab_start, :] += dout[n, :] for tokens in this partition; dwpe[t, :] +=
/// sum_b dout[b*T+t, :] when dwpe is non-empty. Accumulates. Deterministic: every output element is
/// summed by one thread in a fixed order (no atomics).
template <class T>
void embedding_backward(View2<T> dwte, View2<T> dwpe, View2<const T> dout, View1<const token_t> tokens,
                        token_t vocab_start, token_t vocab_rows, int B, int seq_len);

}  // namespace trident
