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

// ---- vocab-parallel form (Megatron-LM, Shoeybi et al. 2019, sec. 3): the logits of a row are
// split over tp ranks by vocabulary range and never gathered. Per row: m = max over all ranks
// (all-reduce max of row_max), z = sum over ranks of exp(l - m), t = the target's logit (found on
// one rank, zero elsewhere; all-reduce sum); loss = log z + m - t. Columns at or beyond
// `valid_cols` are padding (the vocabulary padded to a multiple of tp): they get zero probability
// and zero gradient; valid_cols is capped at the row's width. With one rank and no padding these give
// the same values as the fused kernels.

/// row_max[n] = max over the valid columns of logits[n, :] (the lowest float when there are none).
template <class T>
void cross_entropy_row_max(View1<T> row_max, View2<const T> logits, int valid_cols);

/// sumexp[n] = sum_v exp(logits[n, v] - row_max[n]) over valid columns; target_logit[n] =
/// logits[n, targets[n] - vocab_start] if the target is in this partition, else 0. row_max is the
/// global maximum.
template <class T>
void cross_entropy_partials(View1<T> sumexp, View1<T> target_logit, View2<const T> logits, View1<const T> row_max,
                            View1<const token_t> targets, token_t vocab_start, int valid_cols);

/// losses[n] = log(sumexp[n]) + row_max[n] - target_logit[n] (0 where targets[n] < 0), from the
/// globally reduced statistics. Returns the sum of losses.
template <class T>
double cross_entropy_losses(View1<T> losses, View1<const T> sumexp, View1<const T> row_max,
                            View1<const T> target_logit, View1<const token_t> targets);

/// dlogits[n, v] = (exp(logits[n, v] - row_max[n]) / sumexp[n] - [v + vocab_start == targets[n]])
/// * dloss on valid columns, 0 on padding and on rows whose target < 0. dlogits may alias logits.
template <class T>
void cross_entropy_backward_split(View2<T> dlogits, View2<const T> logits, View1<const T> row_max,
                                  View1<const T> sumexp, View1<const token_t> targets, token_t vocab_start,
                                  int valid_cols, T dloss);

}  // namespace trident
