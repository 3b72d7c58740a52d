// train/checkpoint_model.hpp: a trained model read back from a checkpoint for inference
// (`trident sample`), without a training run around it.
//
// Layer: train.
#pragma once

#include "core/config.hpp"
#include "model/param_store.hpp"
#include "parallel/communicator.hpp"

#include <memory>
#include <string>
#include <vector>

namespace trident {

struct CheckpointModel {
  std::string path;                     ///< the checkpoint file read (a directory resolved to its latest)
  Config cfg;                           ///< the deck stored in the checkpoint (vocab_size resolved)
  std::int64_t step = 0;
  std::string tokenizer;                ///< char | byte | gpt2 | bpe | llama3
  std::vector<std::int32_t> vocab;      ///< tokenizer vocabulary (char, byte)
  std::vector<std::uint8_t> tokenizer_model;  ///< serialized tokenizer model (bpe)
  std::unique_ptr<ParamStore<float>> store;  ///< all parameters, gathered from every shard
};

/// Reads config, tokenizer and all parameters (converted to float) of the checkpoint at `path`.
/// A directory is accepted too: its checkpoints/latest (a run directory) or latest (a checkpoint
/// directory). The file is checked first (require_intact, checkpoint/verify.hpp). Collective over
/// comm (the file is opened through MPI-IO). Throws CheckpointError.
CheckpointModel load_checkpoint_model(const std::string& path, Communicator& comm);

}  // namespace trident
