// kernels/gemm_kokkosblas.cpp: the host backend of kernels/gemm.hpp (host builds): KokkosBlas::gemm,
// which calls OpenBLAS sgemm/dgemm for LayoutRight views (docs/design.md, "Toolchain facts"), and
// oneDNN's matmul (kernels/gemm_onednn.hpp) for bf16 inputs (OpenBLAS 0.3.21 has none) and, under
// HostGemm::onednn, for fp32 ones too (double always goes to OpenBLAS).
#include "kernels/gemm.hpp"

#include "core/error.hpp"
#include "kernels/instantiate.hpp"
#if TRIDENT_HAVE_ONEDNN
#include "kernels/gemm_onednn.hpp"
#endif

#include <KokkosBlas3_gemm.hpp>

#include <atomic>
#include <type_traits>

namespace trident {

std::string gemm_bf16_unavailable_reason() {
#if TRIDENT_HAVE_ONEDNN
  return detail::onednn_bf16_unavailable_reason();
#else
  return "this host build has no oneDNN, the library of its bf16 GEMMs (Debian: libdnnl-dev; "
         "tools/install_deps.sh installs it, then configure again)";
#endif
}

bool gemm_bf16_supported() { return gemm_bf16_unavailable_reason().empty(); }

void gemm_release_scratch() {
#if TRIDENT_HAVE_ONEDNN
  detail::onednn_release_scratch();
#endif
}

namespace {
std::atomic<HostGemm> g_host_gemm{HostGemm::openblas};
}  // namespace

bool host_gemm_available(HostGemm lib) { return lib == HostGemm::openblas || TRIDENT_HAVE_ONEDNN; }

void set_host_gemm(HostGemm lib) {
  if (!host_gemm_available(lib))
    throw Error("gemm: this build has no oneDNN (Debian: libdnnl-dev): its fp32 GEMMs can only be OpenBLAS's");
  g_host_gemm = lib;
}

HostGemm host_gemm() { return g_host_gemm; }

namespace {

/// Whether a native float GEMM goes to oneDNN (set_host_gemm(HostGemm::onednn)).
template <class T>
bool onednn_native() {
  return std::is_same_v<T, float> && TRIDENT_HAVE_ONEDNN && g_host_gemm.load() == HostGemm::onednn;
}

/// The oneDNN path of gemm() and gemm_batched(): bf16 inputs, or native float inputs under
/// HostGemm::onednn; float operands only.
template <class T>
void gemm_onednn(bool bf16, char transA, char transB, const detail::GemmDims& d, std::int64_t batch, T alpha,
                 const T* A, std::int64_t lda, std::int64_t sa, std::int64_t a_span, const T* B, std::int64_t ldb,
                 std::int64_t sb, std::int64_t b_span, T beta, T* C, std::int64_t ldc, std::int64_t sc) {
  if constexpr (!std::is_same_v<T, float>) {
    throw Error("gemm: bf16 inputs need float operands ([train] dtype = float)");
  } else {
#if TRIDENT_HAVE_ONEDNN
    detail::onednn_gemm(bf16, transA, transB, batch, d.m, d.n, d.k, alpha, A, lda, sa, a_span, B, ldb, sb, b_span,
                        beta, C, ldc, sc);
#else
    (void)bf16;
    (void)transA, (void)transB, (void)d, (void)batch, (void)alpha, (void)A, (void)lda, (void)sa, (void)a_span;
    (void)B, (void)ldb, (void)sb, (void)b_span, (void)beta, (void)C, (void)ldc, (void)sc;
    throw Error("gemm: bf16 inputs: " + gemm_bf16_unavailable_reason());
#endif
  }
}

}  // namespace

template <class T>
void gemm(char transA, char transB, T alpha, View2<const T> A, View2<const T> B, T beta, View2<T> C,
          GemmInputs inputs) {
  const auto d = detail::gemm_dims("gemm", transA, transB, A.extent(0), A.extent(1), B.extent(0), B.extent(1),
                                   C.extent(0), C.extent(1));
  if (inputs == GemmInputs::bf16 || onednn_native<T>())
    return gemm_onednn<T>(inputs == GemmInputs::bf16, transA, transB, d, 1, alpha, A.data(), A.stride(0), 0,
                          static_cast<std::int64_t>(A.span()), B.data(), B.stride(0), 0,
                          static_cast<std::int64_t>(B.span()), beta, C.data(), C.stride(0), 0);
  const char ta[2] = {transA, '\0'}, tb[2] = {transB, '\0'};
  KokkosBlas::gemm(ta, tb, alpha, A, B, beta, C);
}

template <class T>
void gemm_batched(char transA, char transB, T alpha, View3<const T> A, View3<const T> B, T beta, View3<T> C,
                  GemmInputs inputs) {
  const auto d = detail::gemm_batched_dims<T>(transA, transB, A, B, C);
  if (inputs == GemmInputs::bf16 || onednn_native<T>())
    return gemm_onednn<T>(inputs == GemmInputs::bf16, transA, transB, d, static_cast<std::int64_t>(C.extent(0)),
                          alpha, A.data(), A.stride(1), A.stride(0), static_cast<std::int64_t>(A.span()), B.data(),
                          B.stride(1), B.stride(0), static_cast<std::int64_t>(B.span()), beta, C.data(), C.stride(1),
                          C.stride(0));
  // KokkosKernels 3.4 has no batched GEMM on the host: one sgemm/dgemm per matrix (OpenBLAS
  // threads each of them).
  const char ta[2] = {transA, '\0'}, tb[2] = {transB, '\0'};
  const std::int64_t sa = A.extent(1) * A.extent(2), sb = B.extent(1) * B.extent(2), sc = C.extent(1) * C.extent(2);
  for (size_t i = 0; i < C.extent(0); ++i)
    KokkosBlas::gemm(ta, tb, alpha, as_matrix<const T>(A.data() + i * sa, A.extent(1), A.extent(2)),
                     as_matrix<const T>(B.data() + i * sb, B.extent(1), B.extent(2)), beta,
                     as_matrix(C.data() + i * sc, C.extent(1), C.extent(2)));
}

TRIDENT_INSTANTIATE_FLOATING(TRIDENT_GEMM_INSTANTIATE)

}  // namespace trident
