#include "model/family.hpp"

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/tokenizer_kind.hpp"
#include "model/gpt2/gpt2.hpp"
#include "model/llama/llama.hpp"

namespace trident {

const std::vector<ModelFamily>& model_families() {
  // The registry: one line per family.
  static const std::vector<ModelFamily> families = {gpt2_family(), llama_family()};
  return families;
}

const ModelFamily& family_of(ModelArch arch) {
  for (const ModelFamily& f : model_families())
    if (f.arch == arch) return f;
  throw Error(std::string("no model family is registered for [model] arch = ") + name_of(arch));
}

const ModelFamily* family_of_hf(const std::string& model_type) {
  for (const ModelFamily& f : model_families())
    if (model_type == f.hf_model_type) return &f;
  return nullptr;
}

namespace {
const std::string* hf_value(const std::map<std::string, std::string>& c, const std::string& key) {
  const auto it = c.find(key);
  return it == c.end() || it->second == "null" ? nullptr : &it->second;
}
}  // namespace

int hf_int(const std::map<std::string, std::string>& c, const std::string& key, int fallback) {
  const std::string* v = hf_value(c, key);
  if (v == nullptr) return fallback;
  try {
    std::size_t used = 0;
    const long long x = std::stoll(*v, &used);
    if (used == v->size() && x >= 0 && x <= (1ll << 31) - 1) return static_cast<int>(x);
  } catch (const std::exception&) {
  }
  throw ConfigError("config.json: \"" + key + "\" = " + *v + " is not an integer in [0, 2^31)");
}

double hf_double(const std::map<std::string, std::string>& c, const std::string& key, double fallback) {
  const std::string* v = hf_value(c, key);
  if (v == nullptr) return fallback;
  try {
    std::size_t used = 0;
    const double x = std::stod(*v, &used);
    if (used == v->size()) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError("config.json: \"" + key + "\" = " + *v + " is not a number");
}

bool hf_bool(const std::map<std::string, std::string>& c, const std::string& key, bool fallback) {
  const std::string* v = hf_value(c, key);
  if (v == nullptr) return fallback;
  if (*v == "true") return true;
  if (*v == "false") return false;
  throw ConfigError("config.json: \"" + key + "\" = " + *v + " is not true or false");
}

std::string hf_config_trident_keys(std::string s, const std::string& tokenizer, const std::vector<std::int32_t>& vocab,
                                   std::int64_t step, const std::string& checkpoint) {
  auto kv = [&](const std::string& k, const std::string& v) { s += "  " + json_str(k) + ": " + v + ",\n"; };
  if (parse_tokenizer_kind(tokenizer) == TokenizerKind::gpt2) {  // GPT-2 BPE ids: its end-of-text token
    kv("bos_token_id", "50256");
    kv("eos_token_id", "50256");
  }
  kv("trident_tokenizer", json_str(tokenizer));
  if (!vocab.empty()) {
    std::string v = "[";
    for (size_t i = 0; i < vocab.size(); ++i) v += (i ? "," : "") + std::to_string(vocab[i]);
    kv("trident_vocab", v + "]");
  }
  kv("trident_step", std::to_string(step));
  return s + "  \"trident_checkpoint\": " + json_str(checkpoint) + "\n}\n";
}

double flops_per_token(const ModelConfig& m) {
  const ParamLayout L = ParamLayout::make(m);
  const ModelFamily& f = family_of(m.arch);
  double n = static_cast<double>(L.numel());
  if (f.position_embedding != nullptr) {
    const int p = L.find(f.position_embedding);
    if (p >= 0) n -= static_cast<double>(L.tensors()[static_cast<size_t>(p)].numel);
  }
  return 6.0 * n + 12.0 * m.n_layer * m.n_embd * static_cast<double>(m.block_size);
}

double block_matmul_params(const ModelConfig& m) {
  ModelConfig one = m;
  if (one.vocab_size <= 0) one.vocab_size = 1;
  one.n_layer = 1;
  const ParamLayout L = ParamLayout::make(one);
  const ModelFamily& f = family_of(m.arch);
  double n = 0;
  for (const TensorSpec& t : L.tensors())
    if (t.global_shape.size() == 2 && t.name != f.token_embedding &&
        (f.position_embedding == nullptr || t.name != f.position_embedding) &&
        (f.untied_head == nullptr || t.name != f.untied_head))
      n += static_cast<double>(t.numel);
  return n;
}

double mlp_hidden(const ModelConfig& m) { return family_of(m.arch).mlp_width(m); }

}  // namespace trident
