// kernels/gemm_cublas.cpp: the CUDA backend of kernels/gemm.hpp (builds whose Kokkos has the CUDA
// backend): cuBLAS on the CUDA stream of Kokkos' default execution space instance, so GEMMs and
// Kokkos kernels run in program order without host synchronisation.
//
// Row-major operands through column-major cuBLAS: a row-major (r, c) matrix with row stride ld is
// the column-major (c, r) matrix with leading dimension ld, i.e. its transpose. So the row-major
// C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: cuBLAS gets B before A,
// the same op characters, and (N, M, K) instead of (M, N, K).
//
// bf16 inputs (GemmInputs::bf16): A and B are rounded to bfloat16 into a scratch buffer by a Kokkos
// kernel (kernels/convert.hpp, round to nearest even as PyTorch) and multiplied with
// cublasGemmEx / cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F (fp32 accumulation), C in fp32.
// The scratch (kernels/bf16_staging.hpp) is the one allocation of the kernels layer that outlives
// a call: it grows to the largest A + B seen (an operand kept by GemmInputReuse counted once), is
// counted under MemCategory::activations, and is freed with the cuBLAS handle at Kokkos::finalize.
#include "kernels/gemm.hpp"

#include "core/error.hpp"
#include "core/memory.hpp"
#include "kernels/bf16_staging.hpp"
#include "kernels/convert.hpp"
#include "kernels/instantiate.hpp"

#include <cublas_v2.h>

#include <limits>
#include <memory>
#include <string>
#include <type_traits>

namespace trident {

static_assert(std::is_same_v<ExecSpace, Kokkos::Cuda>, "kernels/gemm_cublas.cpp needs Kokkos' CUDA backend as default");

bool gemm_bf16_supported() { return true; }
std::string gemm_bf16_unavailable_reason() { return ""; }
// A CUDA build's GEMMs are cuBLAS's: the host library choice does not apply.
bool host_gemm_available(HostGemm lib) { return lib == HostGemm::openblas; }
void set_host_gemm(HostGemm lib) {
  if (lib != HostGemm::openblas) throw Error("gemm: a CUDA build's GEMMs are cuBLAS's: [train] host_gemm does not apply");
}
HostGemm host_gemm() { return HostGemm::openblas; }
void set_host_gemm_chooser(HostGemmChooser chooser) {
  if (chooser) throw Error("gemm: a CUDA build's GEMMs are cuBLAS's: [train] host_gemm does not apply");
}
std::vector<std::pair<GemmShape, HostGemm>> host_gemm_choices() { return {}; }
std::vector<std::vector<double>> time_host_gemm(const GemmShape&, const std::vector<HostGemm>&, int) {
  throw Error("time_host_gemm: a CUDA build's GEMMs are cuBLAS's");
}

namespace {

void check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS: ") + call + " failed: " + cublasGetStatusString(s) + " (status " +
                std::to_string(static_cast<int>(s)) + ")");
}

/// to_bf16 of in[0, n) on the device, in stream order.
void round_on_device(bf16_t* out, const float* in, std::int64_t n) {
  convert_to_bf16<float>(View1<bf16_t>(out, static_cast<size_t>(n)), View1<const float>(in, static_cast<size_t>(n)));
}

/// The process's cuBLAS handle and bf16 input scratch, created at the first GEMM.
struct Cublas {
  cublasHandle_t handle = nullptr;
  detail::Bf16Staging staging{round_on_device};
};
Cublas* g_cublas = nullptr;

Cublas& cublas() {
  if (g_cublas == nullptr) {
    auto c = std::make_unique<Cublas>();
    check(cublasCreate(&c->handle), "cublasCreate");
    const cublasStatus_t s = cublasSetStream(c->handle, ExecSpace().cuda_stream());
    if (s != CUBLAS_STATUS_SUCCESS) cublasDestroy(c->handle);
    check(s, "cublasSetStream");
    g_cublas = c.release();
    // Before Kokkos releases the device: the scratch is a Kokkos allocation, and a handle
    // destroyed after the CUDA context would fail at exit.
    Kokkos::push_finalize_hook([] {
      cublasDestroy(g_cublas->handle);
      delete g_cublas;
      g_cublas = nullptr;
    });
  }
  return *g_cublas;
}

/// bf16 copies of a (na elements) and b (nb elements), valid until the next GEMM (a copy kept by
/// GemmInputReuse where it covers the operand).
std::pair<const bf16_t*, const bf16_t*> bf16_inputs(const float* a, std::int64_t na, const float* b, std::int64_t nb) {
  return cublas().staging.inputs(a, na, b, nb);
}

}  // namespace

void gemm_release_scratch() {
  if (g_cublas == nullptr) return;
  g_cublas->staging.release();
}

namespace detail {
void gemm_reuse_keep(const float* in, std::int64_t n) { cublas().staging.keep(in, n); }
void gemm_reuse_end() noexcept {
  if (g_cublas != nullptr) g_cublas->staging.end_keep();
}
bf16_t* gemm_room_lend(std::int64_t n) { return cublas().staging.lend(n); }
void gemm_room_end() noexcept {
  if (g_cublas != nullptr) g_cublas->staging.end_lend();
}
void gemm_round(bf16_t* out, const float* in, std::int64_t n) { round_on_device(out, in, n); }
}  // namespace detail

namespace {

int to_int(std::int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max()) throw Error(std::string("gemm: ") + what + " exceeds cuBLAS' int range");
  return static_cast<int>(v);
}
/// Leading dimension of a row-major operand seen column-major: its row stride (at least 1).
int ld(std::int64_t row_stride) { return to_int(row_stride > 1 ? row_stride : 1, "a leading dimension"); }
cublasOperation_t op(char t) { return t == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <class T>
void require_float_for_bf16() {
  if constexpr (!std::is_same_v<T, float>) throw Error("gemm: bf16 inputs need float operands ([train] dtype = float)");
}

}  // namespace

template <class T>
void gemm(char transA, char transB, T alpha, View2<const T> A, View2<const T> B, T beta, View2<T> C,
          GemmInputs inputs) {
  const auto d = detail::gemm_dims("gemm", transA, transB, A.extent(0), A.extent(1), B.extent(0), B.extent(1),
                                   C.extent(0), C.extent(1));
  if (d.m == 0 || d.n == 0) return;
  cublasHandle_t h = cublas().handle;
  const int m = to_int(d.m, "M"), n = to_int(d.n, "N"), k = to_int(d.k, "K");
  const int lda = ld(A.stride(0)), ldb = ld(B.stride(0)), ldc = ld(C.stride(0));
  if (inputs == GemmInputs::bf16) {
    require_float_for_bf16<T>();
    if constexpr (std::is_same_v<T, float>) {
      const auto [a16, b16] = bf16_inputs(A.data(), static_cast<std::int64_t>(A.span()), B.data(),
                                          static_cast<std::int64_t>(B.span()));
      check(cublasGemmEx(h, op(transB), op(transA), n, m, k, &alpha, b16, CUDA_R_16BF, ldb, a16, CUDA_R_16BF, lda,
                         &beta, C.data(), CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx (bf16 inputs, fp32 accumulation)");
    }
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    check(cublasSgemm(h, op(transB), op(transA), n, m, k, &alpha, B.data(), ldb, A.data(), lda, &beta, C.data(), ldc),
          "cublasSgemm");
  else
    check(cublasDgemm(h, op(transB), op(transA), n, m, k, &alpha, B.data(), ldb, A.data(), lda, &beta, C.data(), ldc),
          "cublasDgemm");
}

template <class T>
void gemm_batched(char transA, char transB, T alpha, View3<const T> A, View3<const T> B, T beta, View3<T> C,
                  GemmInputs inputs) {
  const auto d = detail::gemm_batched_dims<T>(transA, transB, A, B, C);
  if (d.m == 0 || d.n == 0 || C.extent(0) == 0) return;
  cublasHandle_t h = cublas().handle;
  const int m = to_int(d.m, "M"), n = to_int(d.n, "N"), k = to_int(d.k, "K");
  const int batch = to_int(static_cast<std::int64_t>(C.extent(0)), "the batch size");
  const int lda = ld(A.stride(1)), ldb = ld(B.stride(1)), ldc = ld(C.stride(1));
  const long long sa = static_cast<long long>(A.stride(0)), sb = static_cast<long long>(B.stride(0)),
                  sc = static_cast<long long>(C.stride(0));
  if (inputs == GemmInputs::bf16) {
    require_float_for_bf16<T>();
    if constexpr (std::is_same_v<T, float>) {
      const auto [a16, b16] = bf16_inputs(A.data(), static_cast<std::int64_t>(A.span()), B.data(),
                                          static_cast<std::int64_t>(B.span()));
      check(cublasGemmStridedBatchedEx(h, op(transB), op(transA), n, m, k, &alpha, b16, CUDA_R_16BF, ldb, sb, a16,
                                       CUDA_R_16BF, lda, sa, &beta, C.data(), CUDA_R_32F, ldc, sc, batch,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx (bf16 inputs, fp32 accumulation)");
    }
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    check(cublasSgemmStridedBatched(h, op(transB), op(transA), n, m, k, &alpha, B.data(), ldb, sb, A.data(), lda, sa,
                                    &beta, C.data(), ldc, sc, batch),
          "cublasSgemmStridedBatched");
  else
    check(cublasDgemmStridedBatched(h, op(transB), op(transA), n, m, k, &alpha, B.data(), ldb, sb, A.data(), lda, sa,
                                    &beta, C.data(), ldc, sc, batch),
          "cublasDgemmStridedBatched");
}

namespace detail {
/// gemm_bf16() on the device: a16 or b16 is the operand held in bf16, the other (a or b) is rounded
/// as gemm() rounds it; row-major through column-major cuBLAS as gemm() does.
void gemm_bf16_held(char transA, char transB, float alpha, const GemmDims& d, const float* a, const bf16_t* a16,
                    std::int64_t a_stride, std::int64_t a_span, const float* b, const bf16_t* b16,
                    std::int64_t b_stride, std::int64_t b_span, float beta, View2<float> C) {
  if (d.m == 0 || d.n == 0) return;
  cublasHandle_t h = cublas().handle;
  const int m = to_int(d.m, "M"), n = to_int(d.n, "N"), k = to_int(d.k, "K");
  const auto [ra, rb] = bf16_inputs(a, a_span, b, b_span);
  const bf16_t* A16 = a16 != nullptr ? a16 : ra;
  const bf16_t* B16 = b16 != nullptr ? b16 : rb;
  check(cublasGemmEx(h, op(transB), op(transA), n, m, k, &alpha, B16, CUDA_R_16BF, ld(b_stride), A16, CUDA_R_16BF,
                     ld(a_stride), &beta, C.data(), CUDA_R_32F, ld(C.stride(0)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (bf16 inputs, one held in bf16, fp32 accumulation)");
}

/// gemm_batched_bf16() on the device: one strided-batched cublasGemmStridedBatchedEx on operands
/// held in bf16, row-major through column-major as gemm_batched() does.
void gemm_batched_bf16_held(char transA, char transB, float alpha, const GemmDims& d, std::int64_t batch,
                            const bf16_t* A16, std::int64_t lda, std::int64_t sa, const bf16_t* B16, std::int64_t ldb,
                            std::int64_t sb, float beta, float* C, std::int64_t ldc, std::int64_t sc) {
  if (d.m == 0 || d.n == 0 || batch == 0) return;
  cublasHandle_t h = cublas().handle;
  const int m = to_int(d.m, "M"), n = to_int(d.n, "N"), k = to_int(d.k, "K");
  const int nb = to_int(batch, "the batch size");
  check(cublasGemmStridedBatchedEx(h, op(transB), op(transA), n, m, k, &alpha, B16, CUDA_R_16BF, ld(ldb),
                                   static_cast<long long>(sb), A16, CUDA_R_16BF, ld(lda), static_cast<long long>(sa),
                                   &beta, C, CUDA_R_32F, ld(ldc), static_cast<long long>(sc), nb, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx (bf16 inputs held in bf16, fp32 accumulation)");
}
}  // namespace detail

TRIDENT_INSTANTIATE_FLOATING(TRIDENT_GEMM_INSTANTIATE)

}  // namespace trident
