// data/sampler.hpp: the order in which training windows are visited.
//
// Layer: data. Local; a pure function, no state.
// Sample i of the run (its global sample index: step * global_batch_size + position in the
// batch) is the window starting at offset(i). Epoch e = i / n visits all n = tokens - T window
// offsets once, in the order of a pseudo-random permutation keyed by (seed, e): a 4-round Feistel
// network over the next power of four >= n with cycle walking (Black & Rogaway 2002, "Ciphers
// with arbitrary finite domains", sec. 2), Philox as the round function. Nothing depends on dp,
// so a run resumed on another layout continues the same sequence, and the restart state is just
// the step (docs/design.md).
#pragma once

#include <cstdint>

namespace trident {

class Sampler {
 public:
  /// Windows of T+1 tokens over a split of n_tokens tokens. Throws Error (naming both counts) when
  /// n_tokens <= T, too few for one window.
  Sampler(std::uint64_t seed, std::int64_t n_tokens, int T);

  /// Number of distinct windows (one epoch).
  std::int64_t num_windows() const { return n_; }
  /// Start offset of the window for global sample index i (i >= 0). Local.
  std::int64_t offset(std::int64_t i) const;
  /// The permutation itself: position `pos` of epoch `epoch` (both >= 0, pos < num_windows()).
  std::int64_t permute(std::int64_t epoch, std::int64_t pos) const;

 private:
  std::uint64_t seed_;
  std::int64_t n_;
  int half_bits_;  // the domain is 2^(2 * half_bits_)
};

}  // namespace trident
