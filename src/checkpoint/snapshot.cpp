#include "checkpoint/snapshot.hpp"

namespace trident {

std::int64_t CheckpointSnapshot::bytes() const {
  std::int64_t n = 0;
  for (const auto& s : storage) n += static_cast<std::int64_t>(s.size());
  return n;
}

}  // namespace trident
