// model/gpt2/hf_gpt2.hpp: how Trident's GPT-2 maps onto Hugging Face's GPT2LMHeadModel -- tensor
// names, layouts and config.json -- for `trident ckpt export` (the model family's state-dict
// adapter; the checkpoint layer receives it through a ModelSchema, train/model_schema.hpp).
//
// Layer: model. Local, pure (strings only; nothing is read or written here).
// Mapping onto Hugging Face's GPT2Model (transformers/models/gpt2/modeling_gpt2.py):
//  - names lose nanoGPT's "transformer." prefix: transformer.wte.weight -> wte.weight,
//    transformer.h.0.attn.c_attn.weight -> h.0.attn.c_attn.weight, transformer.ln_f.weight -> ln_f.weight;
//    the LM head is tied to wte (tie_word_embeddings), as in Trident, and not written;
//  - HF's attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj are Conv1D layers whose weight is
//    (in, out), the transpose of nn.Linear's (out, in) that Trident stores: those four weights are
//    written transposed, e.g. c_attn (3C, C) -> (C, 3C); wte, wpe, LayerNorms and biases are not;
//  - a model without biases (nanoGPT bias = False) has no bias tensors: none are written and
//    config.json says "bias": false (HF's GPT-2 always has biases; loading there fills them
//    with zeros, which is the same model).
#pragma once

#include "core/config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

/// Hugging Face GPT-2 name of Trident tensor `name` (the "transformer." prefix removed). Local.
std::string hf_gpt2_name(const std::string& name);

/// True for the weights HF GPT-2 stores transposed (Conv1D: attn.c_attn, attn.c_proj, mlp.c_fc,
/// mlp.c_proj weights). Local.
bool hf_gpt2_transposed(const std::string& name);

/// config.json of the exported model `m` (vocab_size resolved): HF's GPT2Config keys, plus
/// trident_tokenizer / trident_vocab (the tokenizer kind name and, for kinds that store one, the
/// vocabulary), trident_step and trident_checkpoint (the source file's name). `dtype` is
/// "float32" | "bfloat16". Local.
std::string hf_gpt2_config_json(const ModelConfig& m, const std::string& tokenizer,
                                const std::vector<std::int32_t>& vocab, const std::string& dtype, std::int64_t step,
                                const std::string& checkpoint);

}  // namespace trident
