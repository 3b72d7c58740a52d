// model/llama/llama.hpp: the Llama family (Touvron et al. 2023, "LLaMA", sec. 2.2; Hugging Face's
// LlamaForCausalLM): pre-RMSNorm blocks, rotary position embedding on q and k (HF's rotate_half
// convention, kernels/rope.hpp), grouped-query attention (n_kv_head key/value heads), a SwiGLU MLP
// of width ffn_hidden, no biases, the LM head tied or untied.
//
// Layer: model (family folder; registered in model/family.cpp).
// Tensor names are Hugging Face's ("model.layers.0.self_attn.q_proj.weight"), stored in nn.Linear's
// (out, in) order, so export and import map names one to one without transposition.
// Tensor parallelism (Megatron-LM sec. 3): q_proj, k_proj, v_proj, gate_proj and up_proj are
// column-parallel (whole query heads, whole key/value heads, F/tp columns), o_proj and down_proj
// row-parallel; the layout puts q, k, v (and gate, up) next to each other, so on every tp rank
// their partitions are one contiguous matrix and one GEMM computes them all.
#pragma once

#include "model/family.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

/// The llama record of the family registry.
ModelFamily llama_family();

/// config.json of an exported Llama model (HF's LlamaConfig keys plus trident_* keys, as
/// hf_gpt2_config_json). Local.
std::string hf_llama_config_json(const ModelConfig& m, const std::string& tokenizer,
                                 const std::vector<std::int32_t>& vocab, const std::string& dtype, std::int64_t step,
                                 const std::string& checkpoint);

}  // namespace trident
