// kernels/gemm.hpp: the one GEMM seam of Trident. Every matrix product of the model (linear
// layers, attention scores and values, the GEMM probe of the MFU log) goes through gemm() or
// gemm_batched(); the build decides the backend:
//  - host builds (Debian's Kokkos 3.4): KokkosBlas::gemm, i.e. OpenBLAS sgemm/dgemm
//    (kernels/gemm_kokkosblas.cpp), except that fp32 GEMMs may go to oneDNN's matmul instead
//    ([train] host_gemm: HostGemm below) and bf16-input GEMMs always do (kernels/gemm_onednn.cpp);
//  - CUDA builds (a Kokkos 4.x with CUDA): cuBLAS on Kokkos' CUDA stream (kernels/gemm_cublas.cpp).
//
// Layer: kernels. Local. All matrices are row-major (LayoutRight) device views, as everywhere in
// Trident (core/types.hpp); op(X) is X ('N') or X^T ('T'), as in BLAS.
// Invariants: with HostGemm::openblas and native inputs a host build computes exactly what
// KokkosBlas::gemm computes (same calls, same order), so its results are bitwise those of the code
// before this seam; oneDNN's may differ from them in the last bits (another summation order).
#pragma once

#include "core/types.hpp"
#include "kernels/convert.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace trident {

/// How a GEMM treats its inputs. native: in the operand type (sgemm / dgemm). bf16: both inputs
/// rounded to bfloat16 (nearest even), products accumulated and C written in fp32 (cuBLAS
/// CUBLAS_COMPUTE_32F on tensor cores; oneDNN's bf16 matmul on CPUs with AVX512-BF16; the mixed
/// precision of Micikevicius et al. 2018, sec. 3, and of PyTorch's bf16 autocast). bf16 needs
/// float operands, and a CUDA build or a host build with oneDNN on such a CPU.
enum class GemmInputs { native, bf16 };

/// A batch of equal row-major matrices stored back to back: (batch, rows, cols).
template <class T>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, MemSpace, Unmanaged>;

/// True where gemm() accepts GemmInputs::bf16: a CUDA build, or a host build with oneDNN on a CPU
/// with the AVX512-BF16 dot product. Local.
bool gemm_bf16_supported();

/// Empty where gemm_bf16_supported(); otherwise one sentence saying what is missing (no oneDNN in
/// this build, or the CPU's instructions), for error messages. Local.
std::string gemm_bf16_unavailable_reason();

/// The library of native float GEMMs in a host build: OpenBLAS's sgemm (through KokkosBlas), or
/// oneDNN's fp32 matmul (AVX-512 kernels where OpenBLAS 0.3.21 has only AVX2 ones, e.g. on AMD Zen 4:
/// about 2x sgemm there). The process-wide choice is the trainer's ([train] host_gemm, train/peak.hpp
/// resolves auto from a probe); double GEMMs and CUDA builds ignore it. Default openblas.
enum class HostGemm { openblas, onednn };

/// Sets the library of native float GEMMs. Local (process-wide). Throws Error for onednn in a
/// build without oneDNN.
void set_host_gemm(HostGemm lib);
/// The library set last (openblas until set). Local.
HostGemm host_gemm();
/// True where set_host_gemm(lib) is accepted. Local.
bool host_gemm_available(HostGemm lib);

/// One native float GEMM shape as the per-shape library choice keys it: op(A) (m, k), op(B)
/// (k, n), `batch` such products (1 for gemm()). Strides are not part of it.
struct GemmShape {
  char ta = 'N', tb = 'N';
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  /// "NT 1x2048x1152x384" (trans, batch x m x n x k): the text of logs and of the peak cache.
  std::string text() const;
  bool operator<(const GemmShape& o) const;
};

/// Picks the library of one native float GEMM shape ([train] host_gemm = shape: train/peak.hpp
/// installs one that reads, or probes and records, a per-CPU table). Called at the first use of
/// each shape in the process (threads that meet a new shape together may each call it; the first
/// answer stored is used by all), outside any lock the seam holds; it may call time_host_gemm()
/// but not gemm().
using HostGemmChooser = std::function<HostGemm(const GemmShape&)>;

/// Installs `chooser` for the native float GEMMs of this process and forgets the choices made so
/// far; an empty one goes back to the one library of set_host_gemm(). Local (process-wide). Throws
/// Error for a non-empty chooser in a build without oneDNN.
void set_host_gemm_chooser(HostGemmChooser chooser);

/// The shapes the installed chooser has decided in this process, with their library, in shape
/// order (empty without a chooser). Local.
std::vector<std::pair<GemmShape, HostGemm>> host_gemm_choices();

/// FLOP/s of each of `libs` on GEMMs of shape `s` (alpha 1, beta 0): rate[l][r] is libs[l] in
/// round r. One set of contiguous operands serves every library and round (allocated and filled
/// once: batch * (m k + k n + m n) floats of plain host memory, not in the memory ledger). Each
/// library first makes one warm-up call and one call that sizes its repetitions (enough for about
/// a millisecond per round, at most 1000); the rounds then alternate between the libraries, so a
/// load that comes and goes touches each alike. Cost: about 2 + rounds * max(1 ms, one call) per
/// library. Local. Throws Error for a library this build lacks, a shape with a non-positive
/// extent or rounds <= 0.
std::vector<std::vector<double>> time_host_gemm(const GemmShape& s, const std::vector<HostGemm>& libs, int rounds);

/// Frees the bf16 input scratch that GemmInputs::bf16 GEMMs keep between calls (it grows again at
/// the next one): after a one-off large GEMM such as the peak probe. Local; fences.
void gemm_release_scratch();

namespace detail {
/// The backend's side of GemmInputReuse: keep the bf16 rounding of in[0, n) for the GEMMs until
/// gemm_reuse_end(), which never throws. Local.
void gemm_reuse_keep(const float* in, std::int64_t n);
void gemm_reuse_end() noexcept;
}  // namespace detail

/// Rounds a GEMM operand that several GemmInputs::bf16 GEMMs in a row read to bf16 once, instead
/// of once per GEMM (the backward of a linear layer reads dY in dX = dY W and in dW = dY^T X): from
/// construction to destruction, a bf16 GEMM whose A or B lies inside [data, data + n) reads the
/// copy made at construction. The copy lives at the front of the GEMMs' bf16 input scratch, in
/// place of the room the GEMMs would round that operand into: where each GEMM of the scope reads
/// the kept operand, the scratch peaks at the largest A + B of one GEMM, as without a scope (what
/// Block::gemm_operand_elements bounds; growth frees the old scratch first and rounds the kept
/// copy again from its source).
/// Results are bitwise those without the scope (rounding is elementwise and deterministic).
/// Does nothing for GemmInputs::native, for T other than float, and where bf16 GEMMs are not
/// supported (the GEMMs then raise their own error). The caller must not write the operand while
/// the scope lives (GEMMs would read the stale copy), and scopes do not nest: the constructor
/// throws Error if another one is alive. Local (process-wide); fences on growth of the scratch.
template <class T>
class GemmInputReuse {
 public:
  GemmInputReuse(GemmInputs inputs, const T* data, std::int64_t n);
  ~GemmInputReuse();
  GemmInputReuse(const GemmInputReuse&) = delete;
  GemmInputReuse& operator=(const GemmInputReuse&) = delete;

 private:
  bool active_ = false;
};

/// C = alpha op(A) op(B) + beta C. Local; asynchronous on the device like any Kokkos kernel.
/// Shapes: op(A) (M, K), op(B) (K, N), C (M, N); K = 0 gives C = beta C. Throws Error for a
/// trans character other than 'N'/'T', inconsistent shapes, GemmInputs::bf16 where it is not
/// supported or with double operands, and on a cuBLAS failure (naming the call and its status).
template <class T>
void gemm(char transA, char transB, T alpha, View2<const T> A, View2<const T> B, T beta, View2<T> C,
          GemmInputs inputs = GemmInputs::native);

/// C = alpha op(A) op(B) + beta C with bf16 inputs (GemmInputs::bf16) where one operand is stored
/// in bf16 already (kernels/convert.hpp's bf16_t bits, row-major), as activations kept only for
/// GEMMs are with [train] compute_dtype = bf16 (model/block.hpp, Block::gemm_only_saved): that
/// operand is read as it is, the float one is rounded as gemm() rounds it (or read from a
/// GemmInputReuse copy). Bitwise what gemm(..., GemmInputs::bf16) gives on float operands whose
/// rounding the bf16 operand holds. Local; asynchronous on the device. Throws Error as gemm(), and
/// where bf16 GEMMs are not supported (gemm_bf16_unavailable_reason()).
void gemm_bf16(char transA, char transB, float alpha, View2<const bf16_t> A, View2<const float> B, float beta,
               View2<float> C);
void gemm_bf16(char transA, char transB, float alpha, View2<const float> A, View2<const bf16_t> B, float beta,
               View2<float> C);

/// gemm_batched() with bf16 inputs (GemmInputs::bf16) where both operands are stored in bf16
/// already (kernels/convert.hpp's bf16_t bits, row-major, back to back), as the GEMM attention
/// writes its packed heads, probabilities and dS with [train] compute_dtype = bf16
/// (kernels/attention.hpp): nothing is rounded, nothing staged. Bitwise what gemm_batched(...,
/// GemmInputs::bf16) gives on float operands whose rounding A and B hold. Local; asynchronous on
/// the device. Throws Error as gemm_batched(), and where bf16 GEMMs are not supported.
void gemm_batched_bf16(char transA, char transB, float alpha, View3<const bf16_t> A, View3<const bf16_t> B,
                       float beta, View3<float> C);

/// Room for bf16 GEMM operands that the caller writes itself (for gemm_bf16() or
/// gemm_batched_bf16()), lent from the front of the GEMMs' bf16 input scratch from construction to
/// destruction: an operand written there in bf16 by the kernel that produces it (the attention's
/// probabilities and dS) takes no float copy and no rounding pass, and no memory beyond what the
/// GEMMs would have staged it in. GEMMs in the scope must take operands held in bf16 only: one
/// that would round a float operand and needs more scratch than lent throws Error (growing would
/// move the room). Like GemmInputReuse, process-wide, and the two do not nest (Error). Throws
/// Error where bf16 GEMMs are not supported (gemm_bf16_unavailable_reason()). Local.
class GemmBf16Room {
 public:
  explicit GemmBf16Room(std::int64_t n);
  ~GemmBf16Room();
  GemmBf16Room(const GemmBf16Room&) = delete;
  GemmBf16Room& operator=(const GemmBf16Room&) = delete;
  /// The n lent elements (device memory in a CUDA build).
  bf16_t* data() const { return data_; }
  /// data()[0, n) = to_bf16(in[0, n)) with the backend's rounding (the one gemm() uses; bitwise
  /// to_bf16), n <= the lent size. Asynchronous in stream order on the device. Local.
  void round_from(const float* in, std::int64_t n) const;

 private:
  bf16_t* data_ = nullptr;
  std::int64_t n_ = 0;
};

/// For every i of the batch: C_i = alpha op(A_i) op(B_i) + beta C_i (A, B, C of equal batch size).
/// One strided-batched call on CUDA (cublasGemmStridedBatchedEx), a loop of gemm() on the host.
/// Local; errors as gemm().
template <class T>
void gemm_batched(char transA, char transB, T alpha, View3<const T> A, View3<const T> B, T beta, View3<T> C,
                  GemmInputs inputs = GemmInputs::native);

namespace detail {

/// A GEMM's sizes: op(A) is (m, k), op(B) (k, n), C (m, n).
struct GemmDims {
  std::int64_t m, n, k;
};
/// Throws Error unless a batched GEMM's A, B and C hold equally many matrices.
void check_batch_sizes(std::int64_t a, std::int64_t b, std::int64_t c);
/// The (M, N, K) of a GEMM whose operands have these (rows, cols), checked. Throws Error naming
/// `what` and the shapes when op(A) (M, K), op(B) (K, N) and C (M, N) do not agree.
GemmDims gemm_dims(const char* what, char transA, char transB, std::int64_t a_rows, std::int64_t a_cols,
                   std::int64_t b_rows, std::int64_t b_cols, std::int64_t c_rows, std::int64_t c_cols);

/// The backend's side of gemm_bf16(): C = alpha op(A) op(B) + beta C with bf16 inputs, where
/// exactly one of A16 (then A is nullptr) and B16 (then B is nullptr) is the operand held in bf16;
/// lda/ldb are row strides, a_span/b_span the elements an operand covers. d from gemm_dims().
void gemm_bf16_held(char transA, char transB, float alpha, const GemmDims& d, const float* A, const bf16_t* A16,
                    std::int64_t lda, std::int64_t a_span, const float* B, const bf16_t* B16, std::int64_t ldb,
                    std::int64_t b_span, float beta, View2<float> C);

/// The backend's side of gemm_batched_bf16(): both operands held in bf16; lda/ldb/ldc row strides,
/// sa/sb/sc the strides between the matrices of the batch.
void gemm_batched_bf16_held(char transA, char transB, float alpha, const GemmDims& d, std::int64_t batch,
                            const bf16_t* A16, std::int64_t lda, std::int64_t sa, const bf16_t* B16, std::int64_t ldb,
                            std::int64_t sb, float beta, float* C, std::int64_t ldc, std::int64_t sc);

/// The backend's side of GemmBf16Room: lend n elements of the bf16 input scratch (growing it
/// first), take them back (never throws), and round into them as the GEMMs round their inputs.
bf16_t* gemm_room_lend(std::int64_t n);
void gemm_room_end() noexcept;
void gemm_round(bf16_t* out, const float* in, std::int64_t n);

/// gemm_dims() of one matrix of each batch, after checking that A, B and C hold equally many.
template <class T>
GemmDims gemm_batched_dims(char transA, char transB, const View3<const T>& A, const View3<const T>& B,
                           const View3<T>& C) {
  check_batch_sizes(A.extent(0), B.extent(0), C.extent(0));
  return gemm_dims("gemm_batched", transA, transB, A.extent(1), A.extent(2), B.extent(1), B.extent(2), C.extent(1),
                   C.extent(2));
}

}  // namespace detail

// The explicit instantiations of gemm() and gemm_batched() for one scalar type; each backend file
// instantiates them for float and double (kernels/instantiate.hpp).
#define TRIDENT_GEMM_INSTANTIATE(T)                                                                   \
  template void gemm<T>(char, char, T, View2<const T>, View2<const T>, T, View2<T>, GemmInputs);       \
  template void gemm_batched<T>(char, char, T, View3<const T>, View3<const T>, T, View3<T>, GemmInputs);

}  // namespace trident
