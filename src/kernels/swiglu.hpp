// kernels/swiglu.hpp: the SwiGLU gate of Llama's MLP (Shazeer 2020, "GLU Variants Improve
// Transformer", eq. 6): h = silu(g) * u with silu(g) = g * sigmoid(g), where g and u are the
// gate and up projections of the same input.
//
// Layer: kernels. Local. Shapes: gu (N, 2F) holding [g | u] (the fused gate_proj/up_proj output:
// the two projections' rows are adjacent in the parameter buffer, so one GEMM makes both), h (N, F).
#pragma once

#include "core/types.hpp"

namespace trident {

/// h = silu(g) * u.
template <class T>
void swiglu_forward(View2<T> h, View2<const T> gu);

/// dgu = [dh * u * silu'(g) | dh * silu(g)], silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
/// Overwrites dgu (N, 2F).
template <class T>
void swiglu_backward(View2<T> dgu, View2<const T> dh, View2<const T> gu);

}  // namespace trident
