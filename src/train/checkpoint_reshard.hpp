// train/checkpoint_reshard.hpp: reading any piece of any tensor from a checkpoint written at any
// layout -- the primitive behind resuming on another dp x tp x pp layout or ZeRO stage.
//
// Layer: train. read_tensor_piece is local (each rank reads what it needs with hyperslab reads);
// reshard_checkpoint is the offline `trident ckpt reshard` built on ModelState.
// A checkpoint indexes each tensor's tp pieces as the writing run cut them (split_dim,
// split_groups, the writer's tp); a reader wants elements of *its* tp piece. Both pieces map to
// runs of global elements (model/param_layout.hpp tp_runs); intersecting the reader's runs with
// each written piece's runs, in global order, gives the reads. Pipeline and data-parallel layouts
// need nothing more: tensors are found by global name, and the index says in which shard each
// element of a piece sits.
#pragma once

#include "io/checkpoint_file.hpp"
#include "model/param_layout.hpp"
#include "parallel/communicator.hpp"

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

/// The target layout of `trident ckpt reshard`; 0 / -1 keep the source checkpoint's value.
struct ReshardOptions {
  std::string output;        ///< a file path (*.h5), or a checkpoint directory (step_N.h5 + latest)
  int dp = 0;                ///< 0: the number of ranks / (tp * pp)
  int tp = 0;                ///< 0: the checkpoint's tp
  int pp = 0;                ///< 0: the checkpoint's pp
  int zero_stage = -1;       ///< -1: the checkpoint's ZeRO stage
  int shard_group_size = 0;  ///< 0: dp (plain FSDP / ZeRO over all of dp)
  bool force = false;        ///< replace an existing output file
};

struct ReshardResult {
  std::string input, output;  ///< the file read (a directory resolved to its latest) and the file written
  std::int64_t step = 0;
  std::string from_layout, to_layout;  ///< "dp x tp x pp, ZeRO-s"
  std::int64_t bytes = 0;              ///< size of the written file
  double seconds = 0.0;
};

/// `trident ckpt reshard`: reads checkpoint `input` (a file, or a run or checkpoint directory's
/// latest) written at any layout and writes the same state -- parameters, AdamW moments, step,
/// data position, RNG seeds, tokenizer, and the deck with [parallel] replaced -- as the checkpoint
/// the target layout would write, through the same code as a training run (ModelState load, then
/// snapshot and write_checkpoint_file, committed atomically by commit_file). The values are copied
/// exactly (bitwise, the same dtype). The world must have dp * tp * pp ranks; the target layout is
/// checked with validate() against the source deck. Collective over `world`. Throws ConfigError
/// (collective) for an impossible layout or world size, CheckpointError for an unreadable input or
/// a failed write (an existing output is then left as it was).
ReshardResult reshard_checkpoint(const std::string& input, const ReshardOptions& opt, Communicator& world);

}  // namespace trident
