// kernels/rope.hpp: rotary position embedding (Su et al. 2021, "RoFormer", sec. 3.4.2, eq. 34) in
// Hugging Face's convention (transformers' modeling_llama.py, rotate_half): channel i of a head
// pairs with channel i + HS/2, and the pair at position t turns by the angle t * theta^(-2i/HS).
// Meta's original checkpoints pair neighbouring channels (2i, 2i+1) instead; the two differ by a
// fixed permutation of the q and k projection rows, which HF's conversion script applies. Trident
// stores the HF layout, so its q_proj/k_proj export and import without permutation.
//
// Layer: kernels. Local. Shapes: x (B*T, ld), whose first n_heads * HS columns are the rotated
// heads (the q and k heads of a [q | k | v] projection), position of row r = r mod T; table
// (2 * T * HS/2): cos then sin of every (position, pair) angle, filled by rope_table.
#pragma once

#include "core/types.hpp"

namespace trident {

/// table[t * HS/2 + i] = cos(t theta^(-2i/HS)), table[T * HS/2 + t * HS/2 + i] = sin(...), for
/// t < seq_len, i < HS/2. Angles in double, rounded to T once (HF computes them in float32: equal
/// to ~1e-7 relative). The table depends only on (seq_len, HS, theta): fill it once per pass.
template <class T>
void rope_table(View1<T> table, int seq_len, int head_size, double theta);

/// Rotates the first n_heads heads of every row of x in place (forward), angles from `table`.
template <class T>
void rope_forward(View2<T> x, View1<const T> table, int seq_len, int n_heads, int head_size);

/// The transpose of rope_forward (a rotation by the opposite angle), in place: turns the gradient
/// with respect to the rotated values into the gradient with respect to the values before it.
template <class T>
void rope_backward(View2<T> dx, View1<const T> table, int seq_len, int n_heads, int head_size);

}  // namespace trident
