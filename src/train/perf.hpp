// train/perf.hpp: the peak FLOP/s that MFU is quoted against.
//
// Layer: train. Local.
// MFU (model FLOPs utilisation, Chowdhery et al. 2022, "PaLM", sec. 4.1 / appendix B) =
// achieved model FLOP/s / peak FLOP/s. The peak is the deck's [train] peak_tflops, or, when that
// is 0, measured here: the best of a few single-precision 512^3 GEMMs through the GEMM seam
// (kernels/gemm.hpp: the same BLAS the model uses), i.e. the compute ceiling this rank really has;
// with [train] compute_dtype = bf16, 1024^3 GEMMs with bf16 inputs (the model's GEMMs: oneDNN on
// the host, cuBLAS on a GPU), input rounding included as in training.
// On a GPU a 512^3 fp32 GEMM is far below the bf16 tensor-core peak: give peak_tflops there.
#pragma once

#include "kernels/gemm.hpp"

namespace trident {

/// Measured FLOP/s of an n^3 float GEMM on this rank, n = 512 with native inputs and 1024 with
/// bf16 inputs (best of 5 after one warm-up). ~20 ms. Local. Throws Error where `inputs` is
/// GemmInputs::bf16 and the build or CPU has no bf16 GEMM (kernels/gemm.hpp).
double measure_gemm_flops(GemmInputs inputs = GemmInputs::native);

/// One small float and double GEMM through the GEMM seam, so that the BLAS allocates its work
/// buffers now (OpenBLAS spins forever when that allocation fails later, e.g. under ulimit -v).
/// ~1 ms. Local.
void warm_up_blas();

}  // namespace trident
