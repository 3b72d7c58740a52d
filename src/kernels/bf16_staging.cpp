#include "kernels/bf16_staging.hpp"

#include "core/error.hpp"

#include <functional>
#include <string>

namespace trident::detail {

void Bf16Staging::reserve(std::int64_t n) {
  if (buf_.size() >= n) return;
  if (lent_ > 0)
    throw Error("gemm: the bf16 input scratch would grow to " + std::to_string(n) +
                " elements while a GemmBf16Room holds " + std::to_string(lent_) +
                " of it (a GEMM in the room's scope rounds float operands; it must take them in bf16)");
  Kokkos::fence();                  // earlier GEMMs may still read the buffer
  buf_ = TrackedBuffer<bf16_t>();  // free first, so the peak is the new size alone
  buf_ = TrackedBuffer<bf16_t>("trident::gemm::bf16_inputs", n, MemCategory::activations);
  // The kept copies again, from their sources (unchanged while kept: GemmInputReuse's contract),
  // so the bits are those of the first rounding.
  for (const Kept& k : kept_) round_(buf_.data() + k.offset, k.in, k.n);
}

void Bf16Staging::keep(const float* in, std::int64_t n) {
  if (n <= 0 || kept_offset(in, n) >= 0) return;
  reserve(kept_end_ + n);
  round_(buf_.data() + kept_end_, in, n);
  kept_.push_back(Kept{in, n, kept_end_});
  kept_end_ += n;
}

bf16_t* Bf16Staging::lend(std::int64_t n) {
  if (!kept_.empty() || lent_ > 0)
    throw Error("gemm: the bf16 input scratch is in use (kept copies or another room): a GemmBf16Room cannot be lent");
  if (n < 0) throw Error("gemm: a GemmBf16Room of " + std::to_string(n) + " elements");
  reserve(n);
  lent_ = n;
  kept_end_ = n;
  return buf_.data();
}

void Bf16Staging::end_lend() noexcept {
  lent_ = 0;
  kept_end_ = 0;
}

void Bf16Staging::end_keep() noexcept {
  kept_.clear();
  kept_end_ = 0;
}

std::int64_t Bf16Staging::kept_offset(const float* in, std::int64_t n) const {
  // std::less gives a total order on pointers into different arrays too.
  const std::less<const float*> before;
  for (const Kept& k : kept_)
    if (!before(in, k.in) && !before(k.in + k.n, in + n)) return k.offset + (in - k.in);
  return -1;
}

std::pair<const bf16_t*, const bf16_t*> Bf16Staging::inputs(const float* a, std::int64_t na, const float* b,
                                                            std::int64_t nb) {
  if (a == nullptr) na = 0;  // held in bf16 by the caller
  if (b == nullptr) nb = 0;
  std::int64_t oa = a == nullptr ? 0 : kept_offset(a, na), ob = b == nullptr ? 0 : kept_offset(b, nb);
  const std::int64_t ra = oa < 0 ? na : 0, rb = ob < 0 ? nb : 0;  // elements to round now
  reserve(kept_end_ + ra + rb);  // offsets, not pointers, survive a growth
  if (oa < 0) {
    oa = kept_end_;
    round_(buf_.data() + oa, a, na);
  }
  if (ob < 0) {
    ob = kept_end_ + ra;
    round_(buf_.data() + ob, b, nb);
  }
  return {a == nullptr ? nullptr : buf_.data() + oa, b == nullptr ? nullptr : buf_.data() + ob};
}

void Bf16Staging::release() {
  if (!kept_.empty() || lent_ > 0) return;
  Kokkos::fence();
  buf_ = TrackedBuffer<bf16_t>();
}

}  // namespace trident::detail
