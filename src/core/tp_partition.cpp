#include "core/tp_partition.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <string>

namespace trident {

std::vector<std::int64_t> tp_partition_shape(const std::vector<std::int64_t>& g, int split_dim, int groups, int P) {
  std::vector<std::int64_t> s = g;
  if (split_dim < 0 || P == 1) return s;
  const std::int64_t block = g[static_cast<size_t>(split_dim)] / groups;
  s[static_cast<size_t>(split_dim)] = groups * ((block + P - 1) / P);
  return s;
}

std::vector<Run> tp_runs(const std::vector<std::int64_t>& g, int split_dim, int groups, int P, int r) {
  std::int64_t numel = 1;
  for (auto d : g) numel *= d;
  if (split_dim < 0 || P == 1) return {Run{0, 0, numel}};
  const std::int64_t d = g[static_cast<size_t>(split_dim)];
  if (d % groups != 0) throw Error("tp_runs: dimension does not divide into its groups");
  const std::int64_t block = d / groups;
  if ((groups > 1 || split_dim > 0) && block % P != 0)
    throw Error("tp_runs: a split dimension of " + std::to_string(block) + " does not divide by tp = " + std::to_string(P));
  const std::int64_t q = (block + P - 1) / P;
  std::int64_t inner = 1;  // elements after split_dim
  for (size_t i = static_cast<size_t>(split_dim) + 1; i < g.size(); ++i) inner *= g[i];
  std::int64_t outer = 1;  // elements before split_dim
  for (size_t i = 0; i < static_cast<size_t>(split_dim); ++i) outer *= g[i];
  const std::int64_t lo = std::min(block, r * q), hi = std::min(block, (r + 1) * q), rows = hi - lo;
  std::vector<Run> runs;
  if (rows <= 0) return runs;
  const std::int64_t local_dim = groups * q;  // the partition's extent along split_dim (padded)
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t k = 0; k < groups; ++k)
      runs.push_back(Run{(o * local_dim + k * q) * inner, (o * d + k * block + lo) * inner, rows * inner});
  return runs;
}

std::int64_t tp_partition_numel(const std::vector<std::int64_t>& g, int split_dim, int groups, int P, int r) {
  std::int64_t n = 0;
  for (const Run& run : tp_runs(g, split_dim, groups, P, r)) n += run.count;
  return n;
}

}  // namespace trident
