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

namespace {

/// The geometry of tp partition r of a split tensor: runs of `rows * inner` elements, `outer *
/// groups` of them (none when rows <= 0). Throws what tp_runs documents.
struct Split {
  std::int64_t d, block, q, inner = 1, outer = 1, lo, rows;
};
Split split_of(const std::vector<std::int64_t>& g, int split_dim, int groups, int P, int r) {
  Split s{};
  s.d = g[static_cast<size_t>(split_dim)];
  if (s.d % groups != 0) throw Error("tp_runs: dimension does not divide into its groups");
  s.block = s.d / groups;
  if ((groups > 1 || split_dim > 0) && s.block % P != 0)
    throw Error("tp_runs: a split dimension of " + std::to_string(s.block) + " does not divide by tp = " +
                std::to_string(P));
  s.q = (s.block + P - 1) / P;
  for (size_t i = static_cast<size_t>(split_dim) + 1; i < g.size(); ++i) s.inner *= g[i];  // after split_dim
  for (size_t i = 0; i < static_cast<size_t>(split_dim); ++i) s.outer *= g[i];            // before split_dim
  s.lo = std::min(s.block, r * s.q);
  s.rows = std::min(s.block, (r + 1) * s.q) - s.lo;
  return s;
}

std::int64_t numel_of(const std::vector<std::int64_t>& g) {
  std::int64_t numel = 1;
  for (auto d : g) numel *= d;
  return numel;
}

}  // namespace

std::vector<Run> tp_runs(const std::vector<std::int64_t>& g, int split_dim, int groups, int P, int r) {
  if (split_dim < 0 || P == 1) return {Run{0, 0, numel_of(g)}};
  const Split s = split_of(g, split_dim, groups, P, r);
  std::vector<Run> runs;
  if (s.rows <= 0) return runs;
  const std::int64_t local_dim = groups * s.q;  // the partition's extent along split_dim (padded)
  for (std::int64_t o = 0; o < s.outer; ++o)
    for (std::int64_t k = 0; k < groups; ++k)
      runs.push_back(Run{(o * local_dim + k * s.q) * s.inner, (o * s.d + k * s.block + s.lo) * s.inner, s.rows * s.inner});
  return runs;
}

std::int64_t tp_partition_numel(const std::vector<std::int64_t>& g, int split_dim, int groups, int P, int r) {
  // The sum of tp_runs' counts without building them (outer * groups runs: a row of the model's
  // largest matrices each, which the performance model asks for thousands of layouts).
  if (split_dim < 0 || P == 1) return numel_of(g);
  const Split s = split_of(g, split_dim, groups, P, r);
  return s.rows <= 0 ? 0 : s.outer * groups * s.rows * s.inner;
}

}  // namespace trident
