// train/sharding.hpp: which part of the flat parameter buffer a dp rank owns.
//
// Layer: train. Local, pure.
// Each sharding unit of n elements is cut into dp consecutive pieces of ceil(n / dp) elements
// (the last pieces shorter, possibly empty); dp rank d owns piece d of every unit (ZeRO,
// Rajbhandari et al. 2020, sec. 5: each rank owns 1/dp of the states). The padding this implies
// exists only in communication buffers: owned ranges, checkpoints and norms see real elements only.
#pragma once

#include "model/param_layout.hpp"

#include <cstdint>
#include <vector>

namespace trident {

struct FlatRange {
  std::int64_t offset = 0;  ///< first element in the flat buffer
  std::int64_t count = 0;
};

/// The ranges of the flat buffer dp rank `dp_rank` of `dp_size` owns, one per unit (possibly empty).
std::vector<FlatRange> dp_shard_ranges(const ParamLayout& layout, int dp_size, int dp_rank);

}  // namespace trident
