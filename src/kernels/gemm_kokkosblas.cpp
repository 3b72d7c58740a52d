// kernels/gemm_kokkosblas.cpp: the host backend of kernels/gemm.hpp (host builds): KokkosBlas::gemm,
// which calls OpenBLAS sgemm/dgemm for LayoutRight views (docs/design.md, "Toolchain facts").
#include "kernels/gemm.hpp"

#include "core/error.hpp"
#include "kernels/instantiate.hpp"

#include <KokkosBlas3_gemm.hpp>

namespace trident {

bool gemm_bf16_supported() { return false; }

namespace {
void refuse_bf16(GemmInputs inputs) {
  if (inputs == GemmInputs::bf16)
    throw Error("gemm: bf16 inputs need a CUDA build ([train] compute_dtype = bf16 is refused on this host build)");
}
}  // namespace

template <class T>
void gemm(char transA, char transB, T alpha, View2<const T> A, View2<const T> B, T beta, View2<T> C,
          GemmInputs inputs) {
  detail::gemm_dims("gemm", transA, transB, A.extent(0), A.extent(1), B.extent(0), B.extent(1), C.extent(0),
                    C.extent(1));
  refuse_bf16(inputs);
  const char ta[2] = {transA, '\0'}, tb[2] = {transB, '\0'};
  KokkosBlas::gemm(ta, tb, alpha, A, B, beta, C);
}

template <class T>
void gemm_batched(char transA, char transB, T alpha, View3<const T> A, View3<const T> B, T beta, View3<T> C,
                  GemmInputs inputs) {
  detail::gemm_batched_dims<T>(transA, transB, A, B, C);
  refuse_bf16(inputs);
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
