// kernels/bf16_staging.hpp: the bf16 copies of GEMM inputs (GemmInputs::bf16, kernels/gemm.hpp)
// that both GEMM backends make: one buffer holding, first, the operands a GemmInputReuse scope keeps
// for several GEMMs and, after them, the operands rounded for the current GEMM alone. Private to the
// kernels layer: the backends (kernels/gemm_onednn.cpp, kernels/gemm_cublas.cpp) own one each.
//
// Layer: kernels. Local. Not thread-safe: the owner serialises calls (the host backend under its
// mutex; the CUDA backend runs on the thread that drives Kokkos).
#pragma once

#include "core/memory.hpp"
#include "kernels/convert.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace trident::detail {

class Bf16Staging {
 public:
  /// out[i] = to_bf16(in[i]) for i < n (kernels/convert.hpp), on the backend's memory space; may
  /// be asynchronous in stream order (the CUDA backend).
  using Round = void (*)(bf16_t* out, const float* in, std::int64_t n);

  explicit Bf16Staging(Round round) : round_(round) {}

  /// Rounds in[0, n) into the kept region (after what is kept already) and keeps the copy until
  /// end_keep(); in[0, n) must not change until then. The buffer grows as needed: it fences
  /// (earlier GEMMs may still read it), frees the old buffer before allocating the new one (the
  /// peak is the new size) and rounds the kept copies again from their sources. n <= 0 keeps
  /// nothing.
  void keep(const float* in, std::int64_t n);
  /// Forgets every kept copy (their room is reused by the next GEMMs).
  void end_keep() noexcept;
  /// Copies kept so far.
  std::size_t kept() const { return kept_.size(); }
  /// The buffer now: [data, data + size).
  const bf16_t* data() const { return buf_.data(); }
  std::int64_t size() const { return buf_.size(); }

  /// The bf16 inputs of one GEMM reading a[0, na) and b[0, nb): a kept copy where the operand lies
  /// wholly inside a kept range (then it is not rounded again), else a copy rounded now into the
  /// buffer after the kept region. Valid until the next call. An operand given as nullptr (one the
  /// caller holds in bf16 already, gemm_bf16()) is neither rounded nor given room: nullptr back.
  std::pair<const bf16_t*, const bf16_t*> inputs(const float* a, std::int64_t na, const float* b, std::int64_t nb);

  /// Lends buf_[0, n) to a caller that writes bf16 operands into it itself (GemmBf16Room), growing
  /// the buffer first; inputs() then rounds after it. Throws Error while copies are kept or another
  /// loan is out. While lent the buffer does not grow: inputs() that would need it to throws Error.
  bf16_t* lend(std::int64_t n);
  /// Ends the loan (never throws).
  void end_lend() noexcept;

  /// Frees the buffer unless copies are kept or a loan is out (then it keeps it). Fences first.
  void release();

 private:
  struct Kept {
    const float* in;
    std::int64_t n, offset;  ///< the copy of in[0, n) is buf_[offset, offset + n)
  };
  /// Where in buf_ the kept copy of in[0, n) starts, or -1 where no kept range holds all of it.
  std::int64_t kept_offset(const float* in, std::int64_t n) const;
  /// Grows the buffer to at least n elements, the kept copies rounded again into its front.
  void reserve(std::int64_t n);

  Round round_;
  TrackedBuffer<bf16_t> buf_;
  std::vector<Kept> kept_;
  std::int64_t kept_end_ = 0;
  std::int64_t lent_ = 0;  ///< elements lent (lend()), 0 if none
};

}  // namespace trident::detail
