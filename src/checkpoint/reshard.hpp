// checkpoint/reshard.hpp: `trident ckpt reshard`, a checkpoint rewritten offline for another
// dp x tp x pp layout and ZeRO stage.
//
// Layer: checkpoint. The model state of the target layout comes through a CheckpointStateFactory
// (checkpoint/model_schema.hpp), so an offline reshard runs exactly the code of a resume plus a
// save without this layer knowing the model; reading across layouts is checkpoint/tensor_read.hpp.
#pragma once

#include "checkpoint/model_schema.hpp"
#include "parallel/communicator.hpp"

#include <cstdint>
#include <string>

namespace trident {

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
/// the target layout would write, through the same code as a training run (the state `make_state`
/// builds is loaded, then snapshot and write_checkpoint_file, committed atomically by commit_file).
/// `schema` checks the input first (require_intact). The values are copied
/// exactly (bitwise, the same dtype). World rank 0 shows the progress of the verification, the
/// load and the write of its own share (core/progress.hpp; local, never collective). The world must have dp * tp * pp ranks; the target layout is
/// checked with validate() against the source deck. Collective over `world`. Throws ConfigError
/// (collective) for an impossible layout or world size, CheckpointError for an unreadable input or
/// a failed write (an existing output is then left as it was).
ReshardResult reshard_checkpoint(const std::string& input, const ReshardOptions& opt, Communicator& world,
                                 const ModelSchema& schema, const CheckpointStateFactory& make_state);

}  // namespace trident
