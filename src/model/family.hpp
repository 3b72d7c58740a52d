// model/family.hpp: the registry of model families -- what differs between GPT-2 and a Llama-style
// decoder, in one record per family, so that the executor (model/gpt.hpp), the parameter layout,
// the ZeRO engine, the trainer, checkpoints and export see one interface.
//
// Layer: model. A family lives in its own folder (model/gpt2/, model/llama/) and is registered in
// family.cpp; adding one is a folder plus one line there and a value of ModelArch
// (core/config.hpp). What a family gives:
//  - its parameter layout: the tensors of a stage's part (names, shapes, tp split, init, units);
//  - its block (model/block.hpp), forward and backward;
//  - the names of the tensors the executor itself reads (token and position embedding, final
//    norm, LM head) and the final norm's kind;
//  - the Hugging Face mapping (names, transpositions, config.json) for export.
#pragma once

#include "core/config.hpp"
#include "model/block.hpp"
#include "model/param_layout.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace trident {

enum class NormKind { layernorm, rmsnorm };

struct ModelFamily {
  ModelArch arch;
  const char* name;  ///< the deck's [model] arch
  /// Adds this rank's tensors and units of `m` to L (whose part is set), as ParamLayout::make documents.
  void (*build_layout)(ParamLayout& L, const ModelConfig& m, int unit_blocks);
  std::unique_ptr<Block<float>> (*block_f32)(const ModelConfig& m, const ParamLayout& layout);
  std::unique_ptr<Block<double>> (*block_f64)(const ModelConfig& m, const ParamLayout& layout);
  const char* token_embedding;   ///< (V, C), vocab-parallel
  const char* position_embedding;  ///< (block_size, C) replicated, or nullptr (none)
  const char* final_norm_weight;
  const char* final_norm_bias;   ///< nullptr: none (a gpt2 model without biases has none either)
  const char* untied_head;       ///< the LM head's own (V, C) tensor when tie_embeddings is false
  NormKind final_norm;
  /// Width of the MLP's element-wise nonlinearity per token (GELU over 4C, SwiGLU over F): the
  /// step model's memory-bound term.
  double (*mlp_width)(const ModelConfig& m);
  /// Name of the first tensor of global block `layer` (its unit is the block's unit).
  std::string (*block_tensor)(int layer);
  /// Hugging Face export: name, whether HF stores the weight transposed, config.json.
  std::string (*hf_name)(const std::string& name);
  bool (*hf_transposed)(const std::string& name);
  std::string (*hf_config_json)(const ModelConfig& m, const std::string& tokenizer,
                                const std::vector<std::int32_t>& vocab, const std::string& dtype, std::int64_t step,
                                const std::string& checkpoint);

  /// Hugging Face import: the config.json model_type this family reads, and the model shape from
  /// config.json's top-level keys (io/safetensors.hpp read_json_object_scalars). The reader sets
  /// arch and every shape key of `m` but vocab_size's resolution; throws ConfigError naming the
  /// key for what the family cannot represent (another activation, rope scaling, biases).
  const char* hf_model_type;
  void (*hf_read_config)(const std::map<std::string, std::string>& config, ModelConfig& m);

  /// The block of this family for scalar type T.
  template <class T>
  std::unique_ptr<Block<T>> make_block(const ModelConfig& m, const ParamLayout& layout) const {
    if constexpr (std::is_same_v<T, double>) return block_f64(m, layout);
    else return block_f32(m, layout);
  }
  /// Name of the LM head's weight for `m`: the token embedding when tied.
  const char* head_weight(const ModelConfig& m) const {
    return m.tie_embeddings || untied_head == nullptr ? token_embedding : untied_head;
  }
};

/// The keys every exported config.json ends with, after `s` (which holds "{\n" and the family's
/// keys, each line ending in ",\n"): GPT-2's bos/eos ids for gpt2 tokens, trident_tokenizer,
/// trident_vocab (when `vocab` is not empty), trident_step, trident_checkpoint; closes the object.
/// Local.
std::string hf_config_trident_keys(std::string s, const std::string& tokenizer, const std::vector<std::int32_t>& vocab,
                                   std::int64_t step, const std::string& checkpoint);

/// Every registered family. Local.
const std::vector<ModelFamily>& model_families();
/// The registered family of `arch`. Local. Throws Error for an unregistered value.
const ModelFamily& family_of(ModelArch arch);
/// The family whose hf_model_type is `model_type`, or nullptr. Local.
const ModelFamily* family_of_hf(const std::string& model_type);

/// Helpers for the families' hf_read_config: the value of `key` as an int / double / bool, or
/// `fallback` when the key is absent or null. Throw ConfigError naming config.json's key.
int hf_int(const std::map<std::string, std::string>& c, const std::string& key, int fallback);
double hf_double(const std::map<std::string, std::string>& c, const std::string& key, double fallback);
bool hf_bool(const std::map<std::string, std::string>& c, const std::string& key, bool fallback);

/// Model FLOPs per token for one forward + backward, for MFU: 6 N + 12 L (NH HS) T, where N counts
/// every parameter except a learned position embedding (Chowdhery et al. 2022, "PaLM", appendix B;
/// the estimate nanoGPT's estimate_mfu uses).
double flops_per_token(const ModelConfig& m);

/// Parameters of the 2-D weights of one block (what its GEMMs multiply by, per token, twice in
/// forward): 12 C^2 for GPT-2, (2 NH + 2 NKV) HS C + 3 C F for Llama. Local.
double block_matmul_params(const ModelConfig& m);
/// Width of the MLP's element-wise nonlinearity (GELU over 4C, SwiGLU over F). Local.
double mlp_hidden(const ModelConfig& m);

}  // namespace trident
