// train/checkpoint_reshard.hpp: reading any piece of any tensor from a checkpoint written at any
// layout -- the primitive behind resuming on another dp x tp x pp layout or ZeRO stage.
//
// Layer: train. Local (each rank reads what it needs with hyperslab reads).
// A checkpoint indexes each tensor's tp pieces as the writing run cut them (split_dim,
// split_groups, the writer's tp); a reader wants elements of *its* tp piece. Both pieces map to
// runs of global elements (model/param_layout.hpp tp_runs); intersecting the reader's runs with
// each written piece's runs, in global order, gives the reads. Pipeline and data-parallel layouts
// need nothing more: tensors are found by global name, and the index says in which shard each
// element of a piece sits.
#pragma once

#include "io/checkpoint_file.hpp"
#include "model/param_layout.hpp"

#include <cstdint>
#include <string>

namespace trident {

/// Reads elements [begin, begin + count) of this rank's tp piece (tp_size, tp_rank) of tensor `t`,
/// array `kind`, from `rd` -- whatever tp the file was written with -- into `out` as `type`
/// (f32/f64). Elements of the piece that are padding (vocabulary padded to a multiple of tp) are
/// set to zero. Local. Throws CheckpointError when the file has no such tensor, another global
/// shape or split, or does not cover an element.
void read_tensor_piece(const CheckpointReader& rd, const std::string& kind, const TensorSpec& t, int tp_size,
                       int tp_rank, std::int64_t begin, std::int64_t count, DataType type, void* out);

}  // namespace trident
