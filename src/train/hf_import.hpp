// train/hf_import.hpp: `trident ckpt import --format hf DIR`: a Hugging Face model directory
// (config.json + model.safetensors or sharded model-*.safetensors with their index) as a Trident
// checkpoint at step 0, which `[train] init_from` fine-tunes and `trident eval` / `sample` read.
//
// Layer: train (it builds the model's state, train/model_state.hpp, and saves it exactly as a
// training run would). The family comes from config.json's model_type (model/family.hpp:
// gpt2 -> GPT2LMHeadModel, llama -> LlamaForCausalLM); names, transpositions (GPT-2's Conv1D) and
// the shape keys are the family's Hugging Face mapping read backwards, so an export followed by an
// import gives bitwise the same weights. Values in F32, BF16, F16 (widened exactly) or F64.
#pragma once

#include "parallel/communicator.hpp"

#include <cstdint>
#include <string>

namespace trident {

/// How an imported checkpoint's deck begins its [data] path (it records no token file; the deck
/// needs one): "none (imported from DIR)". `trident eval` reads it to ask for --data.
inline constexpr const char* kImportedDataPath = "none (imported from ";

struct HfImportOptions {
  std::string dir;        ///< the Hugging Face model directory
  std::string output;     ///< a .h5 file, or a directory (committed as its step_00000000.h5, `latest`)
  std::string tokenizer;  ///< tokenizer kind of the model's ids; empty: config.json's trident_tokenizer,
                          ///< else gpt2 for a GPT-2 with GPT-2's vocabulary
  int block_size = 0;     ///< context length of the checkpoint's model; 0: config.json's (llama only may differ)
  bool force = false;     ///< replace an existing output file
};

struct HfImportResult {
  std::string output;     ///< the checkpoint written
  std::string family, tokenizer;
  std::int64_t n_tensors = 0, n_parameters = 0;
  double seconds = 0.0;
};

/// Reads opt.dir and writes a float32 checkpoint of one rank's layout (dp = tp = pp = 1, ZeRO 0;
/// into a new file, a file replaced with opt.force, or a directory that holds no checkpoint and no
/// run -- never into a run's checkpoints;
/// `ckpt reshard` or any resume changes it) at step 0 with zero AdamW moments. Collective over
/// comm (world rank 0 reads and builds the state on its own; the others wait). Throws ConfigError
/// (collective) for a model the families cannot represent, a tensor missing, extra or of another
/// shape, or no tokenizer kind; IoError (collective) for unreadable input or an unwritable output.
HfImportResult import_hf(const HfImportOptions& opt, Communicator& comm);

}  // namespace trident
