// kernels/rmsnorm.hpp: root-mean-square layer normalisation (Zhang & Sennrich 2019, eq. 4), as
// Llama's and Hugging Face's LlamaRMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, no mean
// subtraction, no bias.
//
// Layer: kernels. Local. Shapes: inp/out (N, C); weight (C); rstd (N), saved by forward for
// backward.
#pragma once

#include "core/types.hpp"

namespace trident {

/// out = inp * rstd * weight per row, rstd = 1 / sqrt(mean_c(inp^2) + eps). Saves rstd.
template <class T>
void rmsnorm_forward(View2<T> out, View1<T> rstd, View2<const T> inp, View1<const T> weight, double eps);

/// With xhat = inp * rstd and g = dout * weight:
///   dinp += rstd * (g - xhat * mean_c(g * xhat)),   dweight += sum_rows(dout * xhat).
/// Accumulates into both (the residual stream and gradient accumulation need it).
template <class T>
void rmsnorm_backward(View2<T> dinp, View1<T> dweight, View2<const T> dout, View2<const T> inp, View1<const T> weight,
                      View1<const T> rstd);

}  // namespace trident
