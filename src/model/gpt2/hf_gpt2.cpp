#include "model/gpt2/hf_gpt2.hpp"

#include "core/json.hpp"
#include "model/family.hpp"
#include "core/tokenizer_kind.hpp"

#include <cstring>

namespace trident {

std::string hf_gpt2_config_json(const ModelConfig& m, const std::string& tokenizer,
                                const std::vector<std::int32_t>& vocab, const std::string& dtype, std::int64_t step,
                                const std::string& checkpoint) {
  std::string s = "{\n";
  auto kv = [&](const std::string& k, const std::string& v) { s += "  " + json_str(k) + ": " + v + ",\n"; };
  kv("architectures", "[\"GPT2LMHeadModel\"]");
  kv("model_type", json_str("gpt2"));
  kv("vocab_size", std::to_string(m.vocab_size));
  kv("n_positions", std::to_string(m.block_size));
  kv("n_ctx", std::to_string(m.block_size));
  kv("n_embd", std::to_string(m.n_embd));
  kv("n_layer", std::to_string(m.n_layer));
  kv("n_head", std::to_string(m.n_head));
  kv("n_inner", std::to_string(4 * m.n_embd));
  // Trident's GELU is the exact erf form (nanoGPT's nn.GELU()); HF's "gelu" is that one.
  kv("activation_function", json_str("gelu"));
  kv("resid_pdrop", json_num(m.dropout));
  kv("embd_pdrop", json_num(m.dropout));
  kv("attn_pdrop", json_num(m.dropout));
  kv("layer_norm_epsilon", "1e-05");
  kv("initializer_range", "0.02");
  kv("scale_attn_weights", "true");
  kv("tie_word_embeddings", "true");
  kv("bias", m.bias ? "true" : "false");
  kv("torch_dtype", json_str(dtype));
  return hf_config_trident_keys(s, tokenizer, vocab, step, checkpoint);
}


std::string hf_gpt2_name(const std::string& name) {
  const std::string prefix = "transformer.";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

bool hf_gpt2_transposed(const std::string& name) {
  for (const char* tail : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const std::size_t n = std::strlen(tail);
    if (name.size() >= n && name.compare(name.size() - n, n, tail) == 0) return true;
  }
  return false;
}

}  // namespace trident
