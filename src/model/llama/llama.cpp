// model/llama/llama.cpp: the Llama family -- layout, block, Hugging Face mapping, registry record.
#include "model/llama/llama.hpp"

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/tokenizer_kind.hpp"
#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/linear.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"

#include <array>
#include <cmath>

namespace trident {

namespace {

const char* kEmbed = "model.embed_tokens.weight";
const char* kNorm = "model.norm.weight";
const char* kHead = "lm_head.weight";

// Units as gpt2's: "embed" (embed_tokens; alone, so a tied copy on the last stage has equal pieces),
// groups of unit_blocks blocks ("layers.0", "layers.2-3"), "head" (norm and an untied lm_head),
// "embed" again for the last stage's tied copy (pp > 1); unit_blocks = 0: one unit "model" but for
// the tied embedding's. Init N(0, 0.02) (HF's initializer_range), the residual projections o_proj
// and down_proj N(0, 0.02 / sqrt(2 n_layer)) as GPT-2's (Radford et al. 2019, sec. 2.3), norms 1.
void build_layout(ParamLayout& L, const ModelConfig& m, int unit_blocks) {
  const ModelPart& part = L.part();
  const std::int64_t C = m.n_embd, V = m.vocab_size, HS = m.n_embd / m.n_head;
  const std::int64_t Cq = m.n_head * HS, Ckv = static_cast<std::int64_t>(m.kv_heads()) * HS, F = m.ffn_width();
  const double s = 0.02, s_proj = 0.02 / std::sqrt(2.0 * m.n_layer);
  const bool tied_pp = m.tie_embeddings && part.pp_size > 1;
  if (tied_pp) L.set_tied_embedding(kEmbed);
  if (part.first_stage()) {
    L.begin_unit(unit_blocks == 0 && !tied_pp ? "model" : "embed", /*alone=*/tied_pp);
    L.add(kEmbed, {V, C}, true, InitKind::normal, s, 0);
  }
  for (int i = part.first_layer; i < part.first_layer + part.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    L.begin_block(i, unit_blocks, "layers.");
    L.add(p + "input_layernorm.weight", {C}, false, InitKind::ones, 0, -1);
    L.add(p + "self_attn.q_proj.weight", {Cq, C}, true, InitKind::normal, s, 0);
    L.add(p + "self_attn.k_proj.weight", {Ckv, C}, true, InitKind::normal, s, 0);
    L.add(p + "self_attn.v_proj.weight", {Ckv, C}, true, InitKind::normal, s, 0);
    L.add(p + "self_attn.o_proj.weight", {C, Cq}, true, InitKind::normal, s_proj, 1);
    L.add(p + "post_attention_layernorm.weight", {C}, false, InitKind::ones, 0, -1);
    L.add(p + "mlp.gate_proj.weight", {F, C}, true, InitKind::normal, s, 0);
    L.add(p + "mlp.up_proj.weight", {F, C}, true, InitKind::normal, s, 0);
    L.add(p + "mlp.down_proj.weight", {C, F}, true, InitKind::normal, s_proj, 1);
  }
  if (part.last_stage()) {
    L.begin_head(unit_blocks);
    L.add(kNorm, {C}, false, InitKind::ones, 0, -1);
    if (!m.tie_embeddings) L.add(kHead, {V, C}, true, InitKind::normal, s, 0);
    if (tied_pp) {
      L.begin_unit("embed", /*alone=*/true);
      L.add(kEmbed, {V, C}, true, InitKind::normal, s, 0, 1, /*tied_copy=*/true);
    }
  }
}

/// Llama's block on one tp rank:
///   h = x + o_proj(attention(rope(q_proj, k_proj), v_proj)(rmsnorm(x)))   (grouped-query)
///   y = h + down_proj(silu(gate_proj(rmsnorm(h))) * up_proj(rmsnorm(h)))
/// with dropout on the two residual branches and the attention probabilities when [model]
/// dropout > 0 (HF's Llama has attention dropout only; 0 is the default and makes them equal).
template <class T>
class LlamaBlock final : public Block<T> {
 public:
  LlamaBlock(const ModelConfig& m, const ParamLayout& layout) : m_(m), layout_(layout) {
    const int tp = layout.part().tp_size;
    C_ = m.n_embd;
    HS_ = m.n_embd / m.n_head;
    NHl_ = m.n_head / tp;
    NKVl_ = m.kv_heads() / tp;
    Cq_ = NHl_ * HS_;
    W_ = (NHl_ + 2 * NKVl_) * HS_;
    Fl_ = m.ffn_width() / tp;
    max_T_ = m.block_size;
    for (int l = layout.part().first_layer; l < layout.part().first_layer + layout.part().n_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      t_.push_back({layout.at(p + "input_layernorm.weight"), layout.at(p + "self_attn.q_proj.weight"),
                    layout.at(p + "self_attn.o_proj.weight"), layout.at(p + "post_attention_layernorm.weight"),
                    layout.at(p + "mlp.gate_proj.weight"), layout.at(p + "mlp.down_proj.weight")});
    }
  }
  // Saved: ln1, rstd1, qkv (after rotation), att, atty, res_mid, ln2, rstd2, gu, h.
  std::vector<std::int64_t> saved_sizes(std::int64_t BT, std::int64_t att) const override {
    const std::int64_t C = C_;
    return {BT * C, BT, BT * W_, att, BT * Cq_, BT * C, BT * C, BT, BT * 2 * Fl_, BT * Fl_};
  }
  // ln1, atty, ln2 and h are read only by linear layers: bf16 with bf16 GEMM inputs.
  std::vector<bool> gemm_only_saved() const override {
    return {true, false, false, false, true, false, true, false, false, true};
  }
  // Scratch: proj, datty, dqkv, dgu, dh, dpre, dproj, the rotary table (cos and sin of up to
  // max_T positions, kernels/rope.hpp).
  std::vector<std::int64_t> scratch_sizes(std::int64_t BT, std::int64_t att) const override {
    const std::int64_t C = C_;
    return {BT * C, BT * Cq_, BT * W_, BT * 2 * Fl_, BT * Fl_, att, BT * C, static_cast<std::int64_t>(max_T_) * HS_};
  }

  std::int64_t gemm_operand_elements(std::int64_t BT, std::int64_t att) const override {
    const std::int64_t C = C_;
    return std::max({linear_gemm_operands(BT, C, W_), attention_gemm_operands(m_, att),
                     linear_gemm_operands(BT, Cq_, C), linear_gemm_operands(BT, C, 2 * Fl_),
                     linear_gemm_operands(BT, Fl_, C)});
  }

  void forward(const BlockEnv<T>& e, int ll, const T* p, const std::vector<View1<T>>& a, View1<const T> x_in,
               View1<T> y) override {
    const int gl = layout_.part().first_layer + ll;
    const std::int64_t C = C_;
    const auto& t = t_[static_cast<size_t>(ll)];
    View1<T> x(const_cast<T*>(x_in.data()), x_in.extent(0)), proj = (*e.scratch)[0];
    // ln1, atty, ln2 and h are produced into free scratch where they are kept in bf16.
    rmsnorm_forward<T>(e.mat(e.produce_into(a[0], proj), C), a[1], e.mat(x, C), vec(p, t[0]), m_.norm_eps);
    e.keep_rounded(a[0], proj, C);
    e.linear_forward_saved(e.mat(a[2], W_), a[0], C, rows(p, t[1], W_), View1<const T>());
    rope_forward<T>(e.mat(a[2], W_), table(e), e.seq, NHl_ + NKVl_, HS_);
    const View1<T> datty = (*e.scratch)[1], dh = (*e.scratch)[4];
    e.attention_fwd(e.mat(e.produce_into(a[4], datty), Cq_), a[3], e.mat(a[2], W_), NHl_,
                    e.attention_dropout(gl, NHl_), NKVl_);
    e.keep_rounded(a[4], datty, Cq_);
    e.linear_forward_saved(e.mat(proj, C), a[4], Cq_, mat(p, t[2]), View1<const T>());
    e.tp_sum(e.sub(proj, C));
    dropout_apply<T>(e.sub(proj, C), e.key(dropout_site(gl, kSiteAttnResid)));
    residual_forward<T>(e.sub(a[5], C), e.sub(x, C), e.sub(proj, C));
    rmsnorm_forward<T>(e.mat(e.produce_into(a[6], proj), C), a[7], e.mat(a[5], C), vec(p, t[3]), m_.norm_eps);
    e.keep_rounded(a[6], proj, C);
    e.linear_forward_saved(e.mat(a[8], 2 * Fl_), a[6], C, rows(p, t[4], 2 * Fl_), View1<const T>());
    swiglu_forward<T>(e.mat(e.produce_into(a[9], dh), Fl_), e.mat(a[8], 2 * Fl_));
    e.keep_rounded(a[9], dh, Fl_);
    e.linear_forward_saved(e.mat(proj, C), a[9], Fl_, mat(p, t[5]), View1<const T>());
    e.tp_sum(e.sub(proj, C));
    dropout_apply<T>(e.sub(proj, C), e.key(dropout_site(gl, kSiteMlpResid)));
    residual_forward<T>(e.sub(y, C), e.sub(a[5], C), e.sub(proj, C));
  }

  void backward(const BlockEnv<T>& e, int ll, const T* p, T* g, const std::vector<View1<T>>& a,
                View1<const T> x_in) override {
    const int gl = layout_.part().first_layer + ll;
    const std::int64_t C = C_;
    const auto& t = t_[static_cast<size_t>(ll)];
    const auto& s = *e.scratch;
    View1<T> x(const_cast<T*>(x_in.data()), x_in.extent(0));
    View1<T> datty = s[1], dqkv = s[2], dgu = s[3], dh = s[4], dpre = s[5], dproj = s[6], dres = e.dres, dln = e.dln;
    Kokkos::deep_copy(e.sub(dproj, C), e.sub(dres, C));
    dropout_apply<T>(e.sub(dproj, C), e.key(dropout_site(gl, kSiteMlpResid)));
    e.linear_backward_saved(e.mat(dh, Fl_), mat(g, t[5]), View1<T>(), e.mat(dproj, C), a[9], Fl_, mat(p, t[5]));
    swiglu_backward<T>(e.mat(dgu, 2 * Fl_), e.mat(dh, Fl_), e.mat(a[8], 2 * Fl_));
    e.linear_backward_saved(e.mat(dln, C), rows(g, t[4], 2 * Fl_), View1<T>(), e.mat(dgu, 2 * Fl_), a[6], C,
                            rows(p, t[4], 2 * Fl_));
    e.tp_sum(e.sub(dln, C));  // column-parallel: the input gradient is a sum over tp partitions
    rmsnorm_backward<T>(e.mat(dres, C), vec(g, t[3]), e.mat(dln, C), e.mat(a[5], C), vec(p, t[3]), a[7]);
    Kokkos::deep_copy(e.sub(dproj, C), e.sub(dres, C));
    dropout_apply<T>(e.sub(dproj, C), e.key(dropout_site(gl, kSiteAttnResid)));
    e.linear_backward_saved(e.mat(datty, Cq_), mat(g, t[2]), View1<T>(), e.mat(dproj, C), a[4], Cq_, mat(p, t[2]));
    e.attention_bwd(e.mat(dqkv, W_), dpre, e.mat(datty, Cq_), e.mat(a[2], W_), a[3], NHl_,
                    e.attention_dropout(gl, NHl_), NKVl_);
    rope_backward<T>(e.mat(dqkv, W_), table(e), e.seq, NHl_ + NKVl_, HS_);
    e.linear_backward_saved(e.mat(dln, C), rows(g, t[1], W_), View1<T>(), e.mat(dqkv, W_), a[0], C,
                            rows(p, t[1], W_));
    e.tp_sum(e.sub(dln, C));
    rmsnorm_backward<T>(e.mat(dres, C), vec(g, t[0]), e.mat(dln, C), e.mat(x, C), vec(p, t[0]), a[1]);
  }

 private:
  /// The rotary table for env's sequence length, filled when that length is new (every forward
  /// and backward of a stash has the same one; recompute refills nothing).
  View1<const T> table(const BlockEnv<T>& e) {
    View1<T> tab = (*e.scratch)[7];
    if (table_seq_ != e.seq) {
      rope_table<T>(tab, e.seq, HS_, m_.rope_theta);
      table_seq_ = e.seq;
    }
    return View1<const T>(tab.data(), static_cast<size_t>(e.seq) * HS_);
  }
  View1<T> vec(const T* base, int tensor) const { return unit_tensor(layout_, base, tensor); }
  View2<T> mat(const T* base, int tensor) const { return unit_matrix(layout_, base, tensor); }
  /// `n` rows from tensor `tensor` on: q|k|v or gate|up, adjacent in the unit (see llama.hpp).
  View2<T> rows(const T* base, int tensor, std::int64_t n) const { return unit_rows(layout_, base, tensor, n, C_); }
  ModelConfig m_;
  const ParamLayout& layout_;
  int C_, HS_, NHl_, NKVl_, Cq_, W_, Fl_, max_T_;
  int table_seq_ = -1;  // sequence length the rotary table holds
  std::vector<std::array<int, 6>> t_;  // input_layernorm, q_proj, o_proj, post_attention_layernorm, gate_proj, down_proj
};

template <class T>
std::unique_ptr<Block<T>> make_block(const ModelConfig& m, const ParamLayout& layout) {
  return std::make_unique<LlamaBlock<T>>(m, layout);
}

std::string block_tensor(int layer) { return "model.layers." + std::to_string(layer) + ".input_layernorm.weight"; }
std::string hf_name(const std::string& name) { return name; }

// HF's LlamaConfig (transformers/models/llama/configuration_llama.py) and its defaults.
void hf_read_config(const std::map<std::string, std::string>& c, ModelConfig& m) {
  m.arch = ModelArch::llama;
  m.bias = false;
  m.dropout = 0.0;
  m.n_embd = hf_int(c, "hidden_size", 4096);
  m.n_layer = hf_int(c, "num_hidden_layers", 32);
  m.n_head = hf_int(c, "num_attention_heads", 32);
  m.n_kv_head = hf_int(c, "num_key_value_heads", m.n_head);
  m.ffn_hidden = hf_int(c, "intermediate_size", 11008);
  m.block_size = hf_int(c, "max_position_embeddings", 2048);
  m.vocab_size = hf_int(c, "vocab_size", 32000);
  m.norm_eps = hf_double(c, "rms_norm_eps", 1e-6);
  m.rope_theta = hf_double(c, "rope_theta", 10000.0);
  m.tie_embeddings = hf_bool(c, "tie_word_embeddings", false);
  if (m.n_head > 0 && hf_int(c, "head_dim", m.n_embd / m.n_head) * m.n_head != m.n_embd)
    throw ConfigError("config.json: \"head_dim\" * num_attention_heads is not hidden_size: Trident's Llama has "
                      "head_dim = hidden_size / num_attention_heads");
  const auto act = c.find("hidden_act");
  if (act != c.end() && act->second != "silu")
    throw ConfigError("config.json: \"hidden_act\" = " + act->second + ": Trident's Llama MLP is SwiGLU (silu)");
  const auto scaling = c.find("rope_scaling");
  const auto type = c.count("rope_scaling.rope_type") ? c.find("rope_scaling.rope_type") : c.find("rope_scaling.type");
  const bool plain = type != c.end() && type->second == "default";  // "default": plain rotary, no scaling
  if (scaling != c.end() && scaling->second != "null" && !plain)
    throw ConfigError("config.json: \"rope_scaling\" is set: rotary scaling (Llama 3.1's, YaRN, linear) is not built; "
                      "only plain rotary embeddings with rope_theta");
  if (hf_bool(c, "attention_bias", false) || hf_bool(c, "mlp_bias", false))
    throw ConfigError("config.json: attention_bias or mlp_bias is true: Trident's Llama has no biases");
  if (hf_int(c, "pretraining_tp", 1) != 1)
    throw ConfigError("config.json: \"pretraining_tp\" is not 1: that sliced-matmul emulation is not built");
}
bool hf_transposed(const std::string&) { return false; }

}  // namespace

std::string hf_llama_config_json(const ModelConfig& m, const std::string& tokenizer,
                                 const std::vector<std::int32_t>& vocab, const std::string& dtype, std::int64_t step,
                                 const std::string& checkpoint) {
  std::string s = "{\n";
  auto kv = [&](const std::string& k, const std::string& v) { s += "  " + json_str(k) + ": " + v + ",\n"; };
  kv("architectures", "[\"LlamaForCausalLM\"]");
  kv("model_type", json_str("llama"));
  kv("vocab_size", std::to_string(m.vocab_size));
  kv("hidden_size", std::to_string(m.n_embd));
  kv("intermediate_size", std::to_string(m.ffn_width()));
  kv("num_hidden_layers", std::to_string(m.n_layer));
  kv("num_attention_heads", std::to_string(m.n_head));
  kv("num_key_value_heads", std::to_string(m.kv_heads()));
  kv("head_dim", std::to_string(m.n_embd / m.n_head));
  kv("max_position_embeddings", std::to_string(m.block_size));
  kv("hidden_act", json_str("silu"));
  kv("rms_norm_eps", json_num(m.norm_eps));
  kv("rope_theta", json_num(m.rope_theta));
  kv("attention_bias", "false");
  kv("mlp_bias", "false");
  kv("attention_dropout", json_num(m.dropout));
  kv("initializer_range", "0.02");
  kv("tie_word_embeddings", m.tie_embeddings ? "true" : "false");
  kv("torch_dtype", json_str(dtype));
  return hf_config_trident_keys(s, tokenizer, vocab, step, checkpoint);
}

ModelFamily llama_family() {
  ModelFamily f{};
  f.arch = ModelArch::llama;
  f.name = "llama";
  f.build_layout = build_layout;
  f.block_f32 = make_block<float>;
  f.block_f64 = make_block<double>;
  f.token_embedding = kEmbed;
  f.position_embedding = nullptr;
  f.final_norm_weight = kNorm;
  f.final_norm_bias = nullptr;
  f.untied_head = kHead;
  f.final_norm = NormKind::rmsnorm;
  f.block_tensor = block_tensor;
  f.mlp_width = [](const ModelConfig& m) { return static_cast<double>(m.ffn_width()); };
  f.hf_name = hf_name;
  f.hf_transposed = hf_transposed;
  f.hf_config_json = hf_llama_config_json;
  f.hf_model_type = "llama";
  f.hf_read_config = hf_read_config;
  return f;
}

}  // namespace trident
