#include "kernels/bf16_staging.hpp"

#include <functional>

namespace trident::detail {

void Bf16Staging::reserve(std::int64_t n) {
  if (buf_.size() >= n) return;
  Kokkos::fence();                  // earlier GEMMs may still read the buffer
  buf_ = TrackedBuffer<bf16_t>();  // free first, so the peak is the new size alone
  buf_ = TrackedBuffer<bf16_t>("trident::gemm::bf16_inputs", n, MemCategory::activations);
  // The kept copies again, from their sources (unchanged while kept: GemmInputReuse's contract),
  // so the bits are those of the first rounding.
  for (const Kept& k : kept_) round_(buf_.data() + k.offset, k.in, k.n);
}

void Bf16Staging::keep(const float* in, std::int64_t n) {
  if (n <= 0 || find(in, n) != nullptr) return;
  reserve(kept_end_ + n);
  round_(buf_.data() + kept_end_, in, n);
  kept_.push_back(Kept{in, n, kept_end_});
  kept_end_ += n;
}

void Bf16Staging::end_keep() noexcept {
  kept_.clear();
  kept_end_ = 0;
}

const bf16_t* Bf16Staging::find(const float* in, std::int64_t n) const {
  // std::less gives a total order on pointers into different arrays too.
  const std::less<const float*> before;
  for (const Kept& k : kept_)
    if (!before(in, k.in) && !before(k.in + k.n, in + n)) return buf_.data() + k.offset + (in - k.in);
  return nullptr;
}

std::pair<const bf16_t*, const bf16_t*> Bf16Staging::inputs(const float* a, std::int64_t na, const float* b,
                                                            std::int64_t nb) {
  // Grow before taking any pointer into the buffer: growth replaces it.
  const std::int64_t ra = find(a, na) == nullptr ? na : 0, rb = find(b, nb) == nullptr ? nb : 0;
  reserve(kept_end_ + ra + rb);
  const bf16_t* a16 = ra == 0 ? find(a, na) : nullptr;
  const bf16_t* b16 = rb == 0 ? find(b, nb) : nullptr;
  bf16_t* s = buf_.data() + kept_end_;
  if (a16 == nullptr) {
    round_(s, a, na);
    a16 = s;
  }
  if (b16 == nullptr) {
    round_(s + ra, b, nb);
    b16 = s + ra;
  }
  return {a16, b16};
}

void Bf16Staging::release() {
  if (!kept_.empty()) return;
  Kokkos::fence();
  buf_ = TrackedBuffer<bf16_t>();
}

}  // namespace trident::detail
