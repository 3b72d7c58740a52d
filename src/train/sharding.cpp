#include "train/sharding.hpp"

#include <algorithm>

namespace trident {

std::vector<FlatRange> dp_shard_ranges(const ParamLayout& layout, int dp_size, int dp_rank) {
  std::vector<FlatRange> out;
  for (const UnitSpec& u : layout.units()) {
    const std::int64_t piece = (u.numel + dp_size - 1) / dp_size;
    const std::int64_t a = std::min(u.numel, piece * dp_rank), b = std::min(u.numel, piece * (dp_rank + 1));
    out.push_back({u.offset + a, b - a});
  }
  return out;
}

}  // namespace trident
