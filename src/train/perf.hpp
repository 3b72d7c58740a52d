// train/perf.hpp: the peak FLOP/s that MFU is quoted against.
//
// Layer: train. Local.
// MFU (model FLOPs utilisation, Chowdhery et al. 2022, "PaLM", sec. 4.1 / appendix B) =
// achieved model FLOP/s / peak FLOP/s. The peak is the deck's [train] peak_tflops, or, when that
// is 0, measured here: the best of a few single-precision 512^3 GEMMs through the GEMM seam
// (kernels/gemm.hpp: the same BLAS the model uses), i.e. the compute ceiling this rank really has.
// On a GPU a 512^3 fp32 GEMM is far below the bf16 tensor-core peak: give peak_tflops there.
#pragma once

namespace trident {

/// Measured FLOP/s of a 512^3 float GEMM on this rank (best of 5 after one warm-up). ~20 ms. Local.
double measure_gemm_flops();

/// One small float and double GEMM through the GEMM seam, so that the BLAS allocates its work
/// buffers now (OpenBLAS spins forever when that allocation fails later, e.g. under ulimit -v).
/// ~1 ms. Local.
void warm_up_blas();

}  // namespace trident
