// kernels/layernorm.hpp: layer normalisation (Ba, Kiros, Hinton 2016, eq. 4), eps = 1e-5 as
// PyTorch's nn.LayerNorm; the backward is the closed form used by llm.c's layernorm_backward.
//
// Layer: kernels. Local. Shapes: inp/out (N, C); weight, bias (C) (bias may be empty);
// mean, rstd (N), saved by forward for backward.
#pragma once

#include "core/types.hpp"
#include "kernels/convert.hpp"

namespace trident {

/// out = (inp - mean) * rstd * weight + bias, per row. Saves mean and rstd.
template <class T>
void layernorm_forward(View2<T> out, View1<T> mean, View1<T> rstd, View2<const T> inp, View1<const T> weight,
                       View1<const T> bias);

/// layernorm_forward writing out in bf16 (each value rounded to nearest even, kernels/convert.hpp):
/// bitwise the bf16 rounding of the float function's output, for activations kept only as GEMM
/// inputs (model/block.hpp, Block::gemm_only_saved). mean and rstd stay float.
void layernorm_forward_bf16(View2<bf16_t> out, View1<float> mean, View1<float> rstd, View2<const float> inp,
                            View1<const float> weight, View1<const float> bias);

/// dinp += d/dinp, dweight += sum_rows(dout * xhat), dbias += sum_rows(dout) (dbias may be empty).
/// Accumulates into all three, as the residual stream and gradient accumulation need. dinp must
/// not overlap dout, inp or weight, nor dweight weight (the host path is compiled on that promise).
template <class T>
void layernorm_backward(View2<T> dinp, View1<T> dweight, View1<T> dbias, View2<const T> dout, View2<const T> inp,
                        View1<const T> weight, View1<const T> mean, View1<const T> rstd);

}  // namespace trident
