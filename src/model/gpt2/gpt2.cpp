// model/gpt2/gpt2.cpp: the GPT-2 family -- layout, block, registry record.
#include "model/gpt2/gpt2.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/attention.hpp"
#include "kernels/convert.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/gelu.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "model/gpt2/hf_gpt2.hpp"

#include <array>
#include <cmath>
#include <type_traits>

namespace trident {

namespace {

// Units: "embed" (wte, wpe) -- or "wte" and "wpe" with pp > 1, so the tied copies have equal units
// on both stages --, groups of `unit_blocks` blocks ("h.0", "h.2-3", ...), "head" (ln_f) and "wte"
// (the copy); unit_blocks = 0 puts everything but separate wte units in one unit. Init as GPT-2:
// N(0, 0.02), the residual projections c_proj N(0, 0.02 / sqrt(2 n_layer)) (Radford et al. 2019,
// sec. 2.3).
void build_layout(ParamLayout& L, const ModelConfig& m, int unit_blocks) {
  const ModelPart& part = L.part();
  const std::int64_t C = m.n_embd, V = m.vocab_size;
  const double s = 0.02, s_proj = 0.02 / std::sqrt(2.0 * m.n_layer);
  const bool tied = part.pp_size > 1;
  if (tied) L.set_tied_embedding("transformer.wte.weight");
  if (part.first_stage()) {
    if (tied) {
      L.begin_unit("wte", /*alone=*/true);
      L.add("transformer.wte.weight", {V, C}, true, InitKind::normal, s, 0);
      L.begin_unit("wpe", /*alone=*/true);
      L.add("transformer.wpe.weight", {m.block_size, C}, true, InitKind::normal, s, -1);
    } else {
      L.begin_unit(unit_blocks == 0 ? "model" : "embed");
      L.add("transformer.wte.weight", {V, C}, true, InitKind::normal, s, 0);
      L.add("transformer.wpe.weight", {m.block_size, C}, true, InitKind::normal, s, -1);
    }
  }
  for (int i = part.first_layer; i < part.first_layer + part.n_layers; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    L.begin_block(i, unit_blocks, "h.");
    L.add(p + "ln_1.weight", {C}, false, InitKind::ones, 0, -1);
    if (m.bias) L.add(p + "ln_1.bias", {C}, false, InitKind::zeros, 0, -1);
    L.add(p + "attn.c_attn.weight", {3 * C, C}, true, InitKind::normal, s, 0, 3);
    if (m.bias) L.add(p + "attn.c_attn.bias", {3 * C}, false, InitKind::zeros, 0, 0, 3);
    L.add(p + "attn.c_proj.weight", {C, C}, true, InitKind::normal, s_proj, 1);
    if (m.bias) L.add(p + "attn.c_proj.bias", {C}, false, InitKind::zeros, 0, -1);
    L.add(p + "ln_2.weight", {C}, false, InitKind::ones, 0, -1);
    if (m.bias) L.add(p + "ln_2.bias", {C}, false, InitKind::zeros, 0, -1);
    L.add(p + "mlp.c_fc.weight", {4 * C, C}, true, InitKind::normal, s, 0);
    if (m.bias) L.add(p + "mlp.c_fc.bias", {4 * C}, false, InitKind::zeros, 0, 0);
    L.add(p + "mlp.c_proj.weight", {C, 4 * C}, true, InitKind::normal, s_proj, 1);
    if (m.bias) L.add(p + "mlp.c_proj.bias", {C}, false, InitKind::zeros, 0, -1);
  }
  if (part.last_stage()) {
    L.begin_head(unit_blocks);
    L.add("transformer.ln_f.weight", {C}, false, InitKind::ones, 0, -1);
    if (m.bias) L.add("transformer.ln_f.bias", {C}, false, InitKind::zeros, 0, -1);
    if (tied) {
      L.begin_unit("wte", /*alone=*/true);
      L.add("transformer.wte.weight", {V, C}, true, InitKind::normal, s, 0, 1, /*tied_copy=*/true);
    }
  }
}


const char* kBlockTensors[12] = {"ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
                                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",       "ln_2.bias",
                                 "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};

/// GPT-2's block on one tp rank (Megatron-LM, Shoeybi et al. 2019, sec. 3):
///   x = x + dropout(c_proj(attention(c_attn(ln_1(x)))));  x = x + dropout(mlp.c_proj(gelu(mlp.c_fc(ln_2(x)))))
/// c_attn and c_fc are column-parallel (this rank's heads / 4C/tp columns), the projections
/// row-parallel with one all-reduce each before the (replicated) bias.
template <class T>
class Gpt2Block final : public Block<T> {
 public:
  Gpt2Block(const ModelConfig& m, const ParamLayout& layout) : m_(m), layout_(layout) {
    const int tp = layout.part().tp_size;
    C_ = m.n_embd;
    Cl_ = m.n_embd / tp;
    NHl_ = m.n_head / tp;
    for (int l = layout.part().first_layer; l < layout.part().first_layer + layout.part().n_layers; ++l) {
      std::array<int, 12> idx{};
      for (int k = 0; k < 12; ++k) idx[k] = layout.find("transformer.h." + std::to_string(l) + "." + kBlockTensors[k]);
      t_.push_back(idx);
    }
  }
  // Saved: ln1, ln1_mean, ln1_rstd, qkv, att, atty, res_mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu.
  std::vector<std::int64_t> saved_sizes(std::int64_t BT, std::int64_t att) const override {
    const std::int64_t C = C_, Cl = Cl_;
    return {BT * C, BT, BT, BT * 3 * Cl, att, BT * Cl, BT * C, BT * C, BT, BT, BT * 4 * Cl, BT * 4 * Cl};
  }
  // ln1, atty, ln2 and fch_gelu are read only by linear layers: bf16 with bf16 GEMM inputs.
  std::vector<bool> gemm_only_saved() const override {
    return {true, false, false, false, false, true, false, true, false, false, false, true};
  }
  // Scratch: proj, datty, dqkv, dfch, dpre, dproj.
  std::vector<std::int64_t> scratch_sizes(std::int64_t BT, std::int64_t att) const override {
    const std::int64_t C = C_, Cl = Cl_;
    return {BT * C, BT * Cl, BT * 3 * Cl, BT * 4 * Cl, att, BT * C};
  }

  std::int64_t gemm_operand_elements(std::int64_t BT, std::int64_t att) const override {
    const std::int64_t C = C_, Cl = Cl_;
    return std::max({linear_gemm_operands(BT, C, 3 * Cl), attention_gemm_operands(m_, att),
                     linear_gemm_operands(BT, Cl, C), linear_gemm_operands(BT, C, 4 * Cl),
                     linear_gemm_operands(BT, 4 * Cl, C)});
  }

  void forward(const BlockEnv<T>& e, int ll, const T* p, const std::vector<View1<T>>& a, View1<const T> x_in,
               View1<T> y) override {
    const int gl = layout_.part().first_layer + ll;
    const std::int64_t C = C_, Cl = Cl_;
    const auto& t = t_[static_cast<size_t>(ll)];
    const auto& s = *e.scratch;
    View1<T> x(const_cast<T*>(x_in.data()), x_in.extent(0));
    View1<T> proj = s[0];
    layernorm_to(e, a[0], a[1], a[2], e.mat(x, C), vec(p, t[0]), vec(p, t[1]));
    e.linear_forward_saved(e.mat(a[3], 3 * Cl), a[0], C, mat(p, t[2]), vec(p, t[3]));
    // The attention output in float (into backward's datty scratch where it is kept in bf16).
    e.attention_fwd(e.mat(e.produce_into(a[5], s[1]), Cl), a[4], e.mat(a[3], 3 * Cl), NHl_,
                    e.attention_dropout(gl, NHl_));
    e.keep_rounded(a[5], s[1], Cl);
    e.linear_forward_saved(e.mat(proj, C), a[5], Cl, mat(p, t[4]), View1<const T>());
    e.tp_sum(e.sub(proj, C));
    add_bias<T>(e.mat(proj, C), vec(p, t[5]));
    dropout_apply<T>(e.sub(proj, C), e.key(dropout_site(gl, kSiteAttnResid)));
    residual_forward<T>(e.sub(a[6], C), e.sub(x, C), e.sub(proj, C));
    layernorm_to(e, a[7], a[8], a[9], e.mat(a[6], C), vec(p, t[6]), vec(p, t[7]));
    e.linear_forward_saved(e.mat(a[10], 4 * Cl), a[7], C, mat(p, t[8]), vec(p, t[9]));
    if (e.stored_bf16()) {
      if constexpr (std::is_same_v<T, float>) gelu_forward_bf16(e.sub16(a[11], 4 * Cl), e.sub(a[10], 4 * Cl));
    } else {
      gelu_forward<T>(e.sub(a[11], 4 * Cl), e.sub(a[10], 4 * Cl));
    }
    e.linear_forward_saved(e.mat(proj, C), a[11], 4 * Cl, mat(p, t[10]), View1<const T>());
    e.tp_sum(e.sub(proj, C));
    add_bias<T>(e.mat(proj, C), vec(p, t[11]));
    dropout_apply<T>(e.sub(proj, C), e.key(dropout_site(gl, kSiteMlpResid)));
    residual_forward<T>(e.sub(y, C), e.sub(a[6], C), e.sub(proj, C));
  }

  void backward(const BlockEnv<T>& e, int ll, const T* p, T* g, const std::vector<View1<T>>& a,
                View1<const T> x_in) override {
    const int gl = layout_.part().first_layer + ll;
    const std::int64_t C = C_, Cl = Cl_;
    const auto& t = t_[static_cast<size_t>(ll)];
    const auto& s = *e.scratch;
    View1<T> x(const_cast<T*>(x_in.data()), x_in.extent(0));
    View1<T> datty = s[1], dqkv = s[2], dfch = s[3], dpre = s[4], dproj = s[5], dres = e.dres, dln = e.dln;
    Kokkos::deep_copy(e.sub(dproj, C), e.sub(dres, C));
    dropout_apply<T>(e.sub(dproj, C), e.key(dropout_site(gl, kSiteMlpResid)));
    e.linear_backward_saved(e.mat(dfch, 4 * Cl), mat(g, t[10]), vec(g, t[11]), e.mat(dproj, C), a[11], 4 * Cl, mat(p, t[10]));
    gelu_backward<T>(e.sub(dfch, 4 * Cl), e.sub(dfch, 4 * Cl), e.sub(a[10], 4 * Cl));
    e.linear_backward_saved(e.mat(dln, C), mat(g, t[8]), vec(g, t[9]), e.mat(dfch, 4 * Cl), a[7], C, mat(p, t[8]));
    e.tp_sum(e.sub(dln, C));  // column-parallel: the input gradient is a sum over tp partitions
    layernorm_backward<T>(e.mat(dres, C), vec(g, t[6]), vec(g, t[7]), e.mat(dln, C), e.mat(a[6], C), vec(p, t[6]),
                          a[8], a[9]);
    Kokkos::deep_copy(e.sub(dproj, C), e.sub(dres, C));
    dropout_apply<T>(e.sub(dproj, C), e.key(dropout_site(gl, kSiteAttnResid)));
    e.linear_backward_saved(e.mat(datty, Cl), mat(g, t[4]), vec(g, t[5]), e.mat(dproj, C), a[5], Cl, mat(p, t[4]));
    e.attention_bwd(e.mat(dqkv, 3 * Cl), dpre, e.mat(datty, Cl), e.mat(a[3], 3 * Cl), a[4], NHl_,
                    e.attention_dropout(gl, NHl_));
    e.linear_backward_saved(e.mat(dln, C), mat(g, t[2]), vec(g, t[3]), e.mat(dqkv, 3 * Cl), a[0], C, mat(p, t[2]));
    e.tp_sum(e.sub(dln, C));
    layernorm_backward<T>(e.mat(dres, C), vec(g, t[0]), vec(g, t[1]), e.mat(dln, C), e.mat(x, C), vec(p, t[0]), a[1],
                          a[2]);
  }

 private:
  /// LayerNorm into the saved activation `out` (float, or bf16 where the env stores it so).
  void layernorm_to(const BlockEnv<T>& e, const View1<T>& out, View1<T> mean, View1<T> rstd, View2<const T> inp,
                    View1<const T> w, View1<const T> b) const {
    if constexpr (std::is_same_v<T, float>)
      if (e.saved_bf16) return layernorm_forward_bf16(e.mat16(out, inp.extent(1)), mean, rstd, inp, w, b);
    layernorm_forward<T>(e.mat(out, static_cast<std::int64_t>(inp.extent(1))), mean, rstd, inp, w, b);
  }
  View1<T> vec(const T* base, int tensor) const { return unit_tensor(layout_, base, tensor); }
  View2<T> mat(const T* base, int tensor) const { return unit_matrix(layout_, base, tensor); }
  ModelConfig m_;
  const ParamLayout& layout_;
  int C_, Cl_, NHl_;
  std::vector<std::array<int, 12>> t_;
};

template <class T>
std::unique_ptr<Block<T>> make_block(const ModelConfig& m, const ParamLayout& layout) {
  return std::make_unique<Gpt2Block<T>>(m, layout);
}

std::string block_tensor(int layer) { return "transformer.h." + std::to_string(layer) + ".ln_1.weight"; }

// HF's GPT2Config (transformers/models/gpt2/configuration_gpt2.py): n_layer, n_head, n_embd,
// n_positions; biases always (Trident's export writes "bias": false for a model without them).
void hf_read_config(const std::map<std::string, std::string>& c, ModelConfig& m) {
  m.arch = ModelArch::gpt2;
  m.n_layer = hf_int(c, "n_layer", 12);
  m.n_head = hf_int(c, "n_head", 12);
  m.n_embd = hf_int(c, "n_embd", 768);
  m.block_size = hf_int(c, "n_positions", 1024);
  m.vocab_size = hf_int(c, "vocab_size", 50257);
  m.bias = hf_bool(c, "bias", true);
  m.dropout = 0.0;
  // In 64 bits: n_embd may be any int here (validate() bounds the model afterwards).
  const std::int64_t four = 4 * static_cast<std::int64_t>(m.n_embd);
  if (c.count("n_inner") && c.at("n_inner") != "null" && hf_int(c, "n_inner", 0) != four)
    throw ConfigError("config.json: \"n_inner\" = " + c.at("n_inner") + ": Trident's GPT-2 MLP is 4 n_embd = " +
                      std::to_string(four) + " wide");
  const auto act = c.find("activation_function");
  if (act != c.end() && act->second != "gelu" && act->second != "gelu_new")
    throw ConfigError("config.json: \"activation_function\" = " + act->second + ": Trident's GPT-2 uses GELU");
  if (act != c.end() && act->second == "gelu_new")
    log::warn("config.json: activation_function = gelu_new (the tanh approximation of GELU); Trident computes the "
              "exact GELU, so logits differ from Hugging Face's in about the third decimal");
  const double eps = hf_double(c, "layer_norm_epsilon", 1e-5);
  if (!(eps > 0) || !std::isfinite(eps))
    throw ConfigError("config.json: \"layer_norm_epsilon\" = " + c.at("layer_norm_epsilon") + " is not a positive number");
  if (eps != 1e-5)
    log::warn("config.json: layer_norm_epsilon = %g; Trident's GPT-2 LayerNorm uses 1e-5, so logits differ slightly",
              eps);
  if (!hf_bool(c, "tie_word_embeddings", true))
    throw ConfigError("config.json: \"tie_word_embeddings\" = false: Trident's GPT-2 ties its LM head");
}

}  // namespace

ModelFamily gpt2_family() {
  ModelFamily f{};
  f.arch = ModelArch::gpt2;
  f.name = "gpt2";
  f.build_layout = build_layout;
  f.block_f32 = make_block<float>;
  f.block_f64 = make_block<double>;
  f.token_embedding = "transformer.wte.weight";
  f.position_embedding = "transformer.wpe.weight";
  f.final_norm_weight = "transformer.ln_f.weight";
  f.final_norm_bias = "transformer.ln_f.bias";
  f.untied_head = nullptr;
  f.final_norm = NormKind::layernorm;
  f.block_tensor = block_tensor;
  f.mlp_width = [](const ModelConfig& m) { return 4.0 * m.n_embd; };
  f.hf_name = hf_gpt2_name;
  f.hf_transposed = hf_gpt2_transposed;
  f.hf_config_json = hf_gpt2_config_json;
  f.hf_model_type = "gpt2";
  f.hf_read_config = hf_read_config;
  return f;
}

}  // namespace trident
