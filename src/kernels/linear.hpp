// kernels/linear.hpp: fully connected layer y = x W^T + b (PyTorch nn.Linear convention), GEMMs
// through the GEMM seam (kernels/gemm.hpp: OpenBLAS or oneDNN on the host, cuBLAS on NVIDIA GPUs).
//
// Layer: kernels. Local. Shapes: inp (N, C), weight (OC, C), bias (OC) or empty, out (N, OC).
// These are also the local partitions of Megatron-LM's column/row-parallel linears (Shoeybi et al.
// 2019, sec. 3): the communication lives in the model layer, not here.
#pragma once

#include "core/types.hpp"
#include "kernels/gemm.hpp"

namespace trident {

/// out = inp * weight^T + bias. `inputs`: how the GEMM rounds its inputs (kernels/gemm.hpp).
template <class T>
void linear_forward(View2<T> out, View2<const T> inp, View2<const T> weight, View1<const T> bias,
                    GemmInputs inputs = GemmInputs::native);

/// dinp = dout * weight (+= when accumulate_dinp), dweight += dout^T * inp, dbias += sum_rows(dout).
/// dinp may be empty (0 x 0) to skip it (the first layer needs no input gradient); dbias may be empty.
/// `inputs` applies to both GEMMs (the bias sum is in T).
template <class T>
void linear_backward(View2<T> dinp, View2<T> dweight, View1<T> dbias, View2<const T> dout, View2<const T> inp,
                     View2<const T> weight, bool accumulate_dinp = false, GemmInputs inputs = GemmInputs::native);

/// linear_forward and linear_backward with bf16 inputs where `inp` is held in bf16 already (an
/// activation kept only for GEMMs, model/block.hpp): the GEMMs through gemm_bf16(), so bitwise the
/// float functions with GemmInputs::bf16 on an inp whose rounding this one holds. Float only.
void linear_forward_bf16(View2<float> out, View2<const bf16_t> inp, View2<const float> weight, View1<const float> bias);
void linear_backward_bf16(View2<float> dinp, View2<float> dweight, View1<float> dbias, View2<const float> dout,
                          View2<const bf16_t> inp, View2<const float> weight, bool accumulate_dinp = false);

/// out[n, :] += bias (the bias of a row-parallel linear, added once after the all-reduce).
template <class T>
void add_bias(View2<T> out, View1<const T> bias);

}  // namespace trident
