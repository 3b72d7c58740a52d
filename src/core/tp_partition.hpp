// core/tp_partition.hpp: which elements of a tensor a tensor-parallel rank holds.
//
// Layer: core (pure arithmetic, no allocation). Used by the model (parameter layout and
// initialisation of each rank's partition) and by the checkpoint layer (reassembling partitions
// written at one tp size for a reader at another), which is why it sits below both.
//
// A tensor of global shape g is split over tp along `split_dim` (Megatron-LM, Shoeybi et al. 2019,
// sec. 3): dim 0 = column-parallel rows (or vocab-parallel rows of the embedding), dim 1 =
// row-parallel columns, -1 = replicated. With split_groups = k the split dimension holds k blocks
// (e.g. [q | k | v] of c_attn) that are split separately, so a rank gets whole heads of each.
// Invariants: the *tp partition* of rank r is ceil(block / tp) rows of each block; every grouped
// or non-vocabulary split dimension divides by tp, and only an ungrouped dim-0 split (the
// vocabulary) may leave padding at the end of the last partitions.
#pragma once

#include <cstdint>
#include <vector>

namespace trident {

/// `count` consecutive elements of a local tp partition at `local`, which are elements
/// [global, global + count) of the row-major global tensor.
struct Run {
  std::int64_t local = 0, global = 0, count = 0;
};

/// The valid elements of tp partition `tp_rank` of `tp_size` of a tensor with `global_shape`,
/// split along split_dim in split_groups blocks, as runs in local order. Local, pure. Throws
/// Error when a grouped or non-vocabulary split dimension does not divide by tp.
std::vector<Run> tp_runs(const std::vector<std::int64_t>& global_shape, int split_dim, int split_groups, int tp_size,
                         int tp_rank);

/// Shape of the tp partitions of a tensor split over `tp_size` ranks, the same on every rank (padded
/// to ceil for ungrouped dim-0 splits; the global shape when split_dim < 0 or tp_size = 1). Local, pure.
std::vector<std::int64_t> tp_partition_shape(const std::vector<std::int64_t>& global_shape, int split_dim,
                                             int split_groups, int tp_size);

/// Number of real (unpadded) elements of tp partition `tp_rank`. Local, pure.
std::int64_t tp_partition_numel(const std::vector<std::int64_t>& global_shape, int split_dim, int split_groups,
                                 int tp_size, int tp_rank);

}  // namespace trident
