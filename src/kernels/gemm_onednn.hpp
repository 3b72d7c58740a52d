// kernels/gemm_onednn.hpp: bf16-input GEMMs on the host through oneDNN's matmul primitive (the
// GemmInputs::bf16 path of kernels/gemm.hpp in host builds). Private to the kernels layer: only
// the host backend (kernels/gemm_kokkosblas.cpp) includes it.
//
// Layer: kernels. Local. Built when CMake found oneDNN (Debian: libdnnl-dev; TRIDENT_HAVE_ONEDNN).
#pragma once

#include "kernels/convert.hpp"

#include <cstdint>
#include <string>

namespace trident::detail {

/// Empty where onednn_gemm() runs bf16 inputs at full speed: a build with oneDNN on a CPU whose
/// effective oneDNN ISA has the AVX512-BF16 dot product (VDPBF16PS; AVX512_CORE_BF16 or
/// AVX512_CORE_AMX). Otherwise one sentence saying what is missing (DNNL_MAX_CPU_ISA, oneDNN's
/// own environment variable, lowers the effective ISA, so the refusal can be tested anywhere).
std::string onednn_bf16_unavailable_reason();

/// out[i] = to_bf16(in[i]) (kernels/convert.hpp: nearest even, NaN stays NaN) for i < n: with
/// AVX512-BF16's VCVTNE2PS2BF16 where the CPU has it (blocks of 32 holding a subnormal, which the
/// instruction reads as zero, and the tail go the portable way), else a branch-free loop the
/// compiler vectorises. Bitwise equal to to_bf16 for every input. Local.
void round_to_bf16_host(bf16_t* out, const float* in, std::int64_t n);

/// Frees the bf16 scratch of onednn_gemm() (kernels/gemm.hpp: gemm_release_scratch()) unless a
/// GemmInputReuse scope keeps copies in it. Local.
void onednn_release_scratch();

/// The host side of GemmInputReuse (kernels/gemm.hpp, kernels/bf16_staging.hpp): keep the bf16
/// rounding of in[0, n) for the next bf16 GEMMs, and forget every kept copy. Local.
void onednn_reuse_keep(const float* in, std::int64_t n);
void onednn_reuse_end() noexcept;

/// The host side of GemmBf16Room (kernels/gemm.hpp, kernels/bf16_staging.hpp): lend n elements
/// of onednn_gemm()'s bf16 scratch, and take them back. Local.
bf16_t* onednn_room_lend(std::int64_t n);
void onednn_room_end() noexcept;

/// One GEMM, or a batch of equal ones, on row-major float operands through oneDNN's matmul:
///   C_i = alpha op(A_i) op(B_i) + beta C_i,  i < batch,
/// op(A_i) (M, K), op(B_i) (K, N), C_i (M, N); lda/ldb/ldc are row strides, sa/sb/sc the strides
/// between the matrices of a batch; a_span/b_span the elements A and B cover from their first.
/// bf16_inputs: A and B are rounded to bf16 (nearest even, kernels/convert.hpp) into a scratch
/// buffer that grows to the largest A + B seen (MemCategory::activations), an operand that a
/// GemmInputReuse scope keeps read from its kept copy instead; else the matmul reads
/// them as fp32 (HostGemm::onednn, kernels/gemm.hpp). It accumulates in fp32 and writes C in fp32.
/// A16 / B16 (bf16_inputs only; Error otherwise): the operand stored in bf16 already
/// (gemm_bf16()), read as it is with the strides given; A / B is then ignored (nullptr).
/// Primitives are cached by shape, strides, alpha, beta and input type (the shapes of a run are
/// few and fixed). Synchronous. Throws Error for bf16 inputs when onednn_bf16_unavailable_reason()
/// is not empty, and when oneDNN fails (naming the status and the shape).
void onednn_gemm(bool bf16_inputs, char transA, char transB, std::int64_t batch, std::int64_t M, std::int64_t N,
                 std::int64_t K, float alpha, const float* A, std::int64_t lda, std::int64_t sa, std::int64_t a_span,
                 const float* B, std::int64_t ldb, std::int64_t sb, std::int64_t b_span, float beta, float* C,
                 std::int64_t ldc, std::int64_t sc, const bf16_t* A16 = nullptr, const bf16_t* B16 = nullptr);

}  // namespace trident::detail
