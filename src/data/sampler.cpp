#include "data/sampler.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"

namespace trident {

Sampler::Sampler(std::uint64_t seed, std::int64_t n_tokens, int T) : seed_(seed), n_(n_tokens - T) {
  if (n_ < 1)
    throw Error("the training split has " + std::to_string(n_tokens) + " tokens, too few for one sequence of " +
                std::to_string(T) + " + 1");
  half_bits_ = 1;
  while ((std::int64_t(1) << (2 * half_bits_)) < n_) ++half_bits_;
}

std::int64_t Sampler::permute(std::int64_t epoch, std::int64_t pos) const {
  const std::uint64_t mask = (std::uint64_t(1) << half_bits_) - 1;
  std::uint64_t x = static_cast<std::uint64_t>(pos);
  do {  // cycle walking: re-encrypt until the value falls inside [0, n)
    std::uint64_t left = x >> half_bits_, right = x & mask;
    for (std::uint32_t round = 0; round < 4; ++round) {
      auto r = philox4(lo32(seed_), hi32(seed_) ^ 0x5A3C9E71u, lo32(right), hi32(right),
                       static_cast<std::uint32_t>(epoch), round);
      const std::uint64_t f = ((static_cast<std::uint64_t>(r.v[1]) << 32) | r.v[0]) & mask;
      const std::uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<std::uint64_t>(n_));
  return static_cast<std::int64_t>(x);
}

std::int64_t Sampler::offset(std::int64_t i) const { return permute(i / n_, i % n_); }

}  // namespace trident
