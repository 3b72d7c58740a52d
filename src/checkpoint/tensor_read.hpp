// checkpoint/tensor_read.hpp: reading any range of any tp partition of any tensor from a
// checkpoint written at any layout -- the primitive behind resuming on another dp x tp x pp
// layout or ZeRO stage, `trident sample`, `ckpt diff`, `ckpt export` and `ckpt reshard`.
//
// Layer: checkpoint. Local (each rank reads what it needs with hyperslab reads through io's
// CheckpointReader). A checkpoint indexes each tensor's tp partitions as the writing run cut them
// (split_dim, split_groups, the writer's tp); a reader wants elements of *its* partition. Both map
// to runs of global elements (core/tp_partition.hpp); intersecting the reader's runs with each
// written partition's runs, in global order, gives the reads. Pipeline and data-parallel layouts
// need nothing more: tensors are found by global name, and the index says in which shard each
// element of a partition sits.
#pragma once

#include "io/checkpoint_file.hpp"

#include <cstdint>
#include <string>

namespace trident {

/// Reads elements [begin, begin + count) of tp partition (tp_size, tp_rank) of tensor `t` (its
/// name, global shape and tp split), array `kind`, from `rd` -- whatever tp the file was written
/// with -- into `out` as `type` (f32/f64). Elements of the partition that are padding (vocabulary
/// padded to a multiple of tp) are set to zero. Local. Throws CheckpointError when the file has no
/// such tensor, another global shape or split, or does not cover an element.
void read_tp_partition(const CheckpointReader& rd, const std::string& kind, const CkptTensor& t, int tp_size,
                       int tp_rank, std::int64_t begin, std::int64_t count, DataType type, void* out);

}  // namespace trident
