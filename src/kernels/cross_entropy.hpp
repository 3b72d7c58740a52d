// kernels/cross_entropy.hpp: softmax cross entropy over the vocabulary, fused as in llm.c.
//
// Layer: kernels. Local. Shapes: logits (N, V), targets (N), losses (N).
// A target < 0 marks a position that carries no loss (losses[n] = 0, gradient row 0).
#pragma once

#include "core/types.hpp"

namespace trident {

/// losses[n] = logsumexp(logits[n, :]) - logits[n, targets[n]] (natural log). Returns sum of losses.
template <class T>
double cross_entropy_forward(View1<T> losses, View2<const T> logits, View1<const token_t> targets);

/// dlogits[n, v] = (softmax(logits[n])[v] - [v == targets[n]]) * dloss, for every row.
/// dloss is the gradient of the objective wrt each token loss (e.g. 1 / tokens in the global
/// batch). dlogits may alias logits (in place), which saves a (N, V) buffer.
template <class T>
void cross_entropy_backward(View2<T> dlogits, View2<const T> logits, View1<const token_t> targets, T dloss);

}  // namespace trident
