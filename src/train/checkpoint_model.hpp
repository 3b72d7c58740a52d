// train/checkpoint_model.hpp: a trained model read back from a checkpoint for inference
// (`trident sample`), without a training run around it.
//
// Layer: train.
#pragma once

#include "core/config.hpp"
#include "io/checkpoint_file.hpp"
#include "model/param_store.hpp"
#include "parallel/communicator.hpp"

#include <memory>
#include <string>
#include <vector>

namespace trident {

struct CheckpointModel {
  Config cfg;                           ///< the deck stored in the checkpoint (vocab_size resolved)
  std::int64_t step = 0;
  std::string tokenizer;                ///< char | byte | gpt2
  std::vector<std::int32_t> vocab;      ///< tokenizer vocabulary (empty for gpt2)
  std::unique_ptr<ParamStore<float>> store;  ///< all parameters, gathered from every shard
};

/// Reads config, tokenizer and all parameters (converted to float) of the checkpoint at `path`.
/// A directory is accepted too: its checkpoints/latest (a run directory) or latest (a checkpoint
/// directory). Collective over comm (the file is opened through MPI-IO). Throws CheckpointError.
CheckpointModel load_checkpoint_model(const std::string& path, Communicator& comm);

/// Checks the index and the restart metadata of `rd` (check_checkpoint_index/_metadata, what
/// `trident ckpt verify` checks), recomputes the XXH64 checksum of every shard dataset
/// (CheckpointReader::verify, the reading spread over comm) and throws CheckpointError on every
/// rank when anything is wrong: "checkpoint 'P' is damaged: <first problem> (<hint>)". Every reader
/// of parameters (resume, sample, reshard, export) calls it first, so a damaged file is never
/// turned into a new one. Collective over comm.
void require_intact(const CheckpointReader& rd, Communicator& comm, const std::string& hint);

/// `path` itself if it is a file, else the latest checkpoint below a run or checkpoint directory.
/// Throws CheckpointError when there is none. Local.
std::string resolve_checkpoint_path(const std::string& path);

}  // namespace trident
