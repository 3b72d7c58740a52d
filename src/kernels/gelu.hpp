// kernels/gelu.hpp: exact GELU, x * Phi(x) (Hendrycks & Gimpel 2016, eq. 1), as PyTorch's
// nn.GELU() default (approximate='none') that nanoGPT uses.
//
// Layer: kernels. Local. Shapes: flat, equal extents.
#pragma once

#include "core/types.hpp"
#include "kernels/convert.hpp"

namespace trident {

/// out = 0.5 x (1 + erf(x / sqrt 2)). out may alias inp.
template <class T>
void gelu_forward(View1<T> out, View1<const T> inp);

/// gelu_forward writing out in bf16 (nearest even, kernels/convert.hpp): bitwise the bf16 rounding
/// of gelu_forward's output (unit_kernels checks it), for an activation kept only as a GEMM input
/// (model/block.hpp, Block::gemm_only_saved).
void gelu_forward_bf16(View1<bf16_t> out, View1<const float> inp);

/// dinp = dout * (Phi(x) + x phi(x)), where x = inp (the forward input). dinp may alias dout.
template <class T>
void gelu_backward(View1<T> dinp, View1<const T> dout, View1<const T> inp);

}  // namespace trident
