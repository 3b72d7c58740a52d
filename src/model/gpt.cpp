#include "model/gpt.hpp"

#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"

namespace trident {

template <class T>
GptWeights<T> bind_weights(T* base, const ParamLayout& layout, const ModelConfig& m) {
  auto v1 = [&](const std::string& name) {
    const int i = layout.find(name);
    if (i < 0) return View1<T>();
    const TensorSpec& t = layout.tensors()[i];
    return View1<T>(base + t.offset, static_cast<size_t>(t.numel));
  };
  auto v2 = [&](const std::string& name) {
    const TensorSpec& t = layout.tensors()[layout.at(name)];
    return as_matrix(base + t.offset, t.shape[0], t.shape[1]);
  };
  GptWeights<T> w;
  w.wte = v2("transformer.wte.weight");
  w.wpe = v2("transformer.wpe.weight");
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    BlockWeights<T> b;
    b.ln1_w = v1(p + "ln_1.weight");
    b.ln1_b = v1(p + "ln_1.bias");
    b.attn_w = v2(p + "attn.c_attn.weight");
    b.attn_b = v1(p + "attn.c_attn.bias");
    b.proj_w = v2(p + "attn.c_proj.weight");
    b.proj_b = v1(p + "attn.c_proj.bias");
    b.ln2_w = v1(p + "ln_2.weight");
    b.ln2_b = v1(p + "ln_2.bias");
    b.fc_w = v2(p + "mlp.c_fc.weight");
    b.fc_b = v1(p + "mlp.c_fc.bias");
    b.fcp_w = v2(p + "mlp.c_proj.weight");
    b.fcp_b = v1(p + "mlp.c_proj.bias");
    w.h.push_back(b);
  }
  w.lnf_w = v1("transformer.ln_f.weight");
  w.lnf_b = v1("transformer.ln_f.bias");
  return w;
}

template <class T>
Gpt<T>::Gpt(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T) : m_(m), max_B_(max_B), max_T_(max_T) {
  if (max_T > m.block_size) throw Error("Gpt: max_T exceeds block_size");
  const std::int64_t BT = static_cast<std::int64_t>(max_B) * max_T, C = m.n_embd, V = m.vocab_size;
  const std::int64_t att = static_cast<std::int64_t>(max_B) * m.n_head * max_T * max_T;
  // One allocation for every activation; the views below carve it up.
  std::vector<std::pair<View1<T>*, std::int64_t>> plan;
  res_.resize(m.n_layer + 1);
  for (auto& r : res_) plan.push_back({&r, BT * C});
  layers_.resize(m.n_layer);
  for (auto& l : layers_) {
    plan.insert(plan.end(), {{&l.ln1, BT * C}, {&l.ln1_mean, BT}, {&l.ln1_rstd, BT}, {&l.qkv, BT * 3 * C},
                             {&l.att, att}, {&l.atty, BT * C}, {&l.res_mid, BT * C}, {&l.ln2, BT * C},
                             {&l.ln2_mean, BT}, {&l.ln2_rstd, BT}, {&l.fch, BT * 4 * C}, {&l.fch_gelu, BT * 4 * C}});
  }
  plan.insert(plan.end(), {{&lnf_, BT * C}, {&lnf_mean_, BT}, {&lnf_rstd_, BT}, {&logits_, BT * V}, {&losses_, BT},
                           {&proj_, BT * C}, {&dres_, BT * C}, {&dln_, BT * C}, {&datty_, BT * C},
                           {&dqkv_, BT * 3 * C}, {&dfch_, BT * 4 * C}, {&dpre_, att}, {&dproj_, BT * C},
                           {&attn_ws_.q, BT * C}, {&attn_ws_.k, BT * C}, {&attn_ws_.v, BT * C},
                           {&attn_ws_.y, BT * C}, {&attn_ws_.dq, BT * C}, {&attn_ws_.dk, BT * C},
                           {&attn_ws_.dv, BT * C}, {&attn_ws_.pdrop, m.dropout > 0.0 ? att : 0}});
  std::int64_t total = 0;
  for (auto& p : plan) total += p.second;
  acts_ = TrackedBuffer<T>("trident::Gpt::activations", total, MemCategory::activations);
  std::int64_t off = 0;
  for (auto& p : plan) {
    *p.first = acts_.slice(off, p.second);
    off += p.second;
  }
}

template <class T>
View2<T> Gpt<T>::mat(const View1<T>& v, std::int64_t cols, std::int64_t rows) const {
  return as_matrix(v.data(), rows, cols);
}

template <class T>
DropoutKey Gpt<T>::key(std::uint32_t site) const {
  DropoutKey k;
  k.seed = ctx_.seed;
  k.site = site;
  k.step = ctx_.step;
  k.p = (ctx_.train && m_.dropout > 0.0) ? m_.dropout : 0.0;
  // Element index of (b, t, c) is ((sample_offset + b) * T + t) * C + c: global, layout-free.
  k.offset = ctx_.sample_offset * static_cast<std::uint64_t>(T_) * static_cast<std::uint64_t>(m_.n_embd);
  return k;
}

namespace {
// Dropout sites: 8 per block, the embedding dropout after the last block's.
constexpr std::uint32_t kSiteAttn = 0, kSiteAttnResid = 1, kSiteMlpResid = 2;
std::uint32_t site(int layer, std::uint32_t kind) { return static_cast<std::uint32_t>(layer) * 8u + kind; }
}  // namespace

template <class T>
double Gpt<T>::forward(const GptWeights<T>& w, View1<const token_t> tokens, View1<const token_t> targets, int B,
                       int seq_len, const ForwardContext& ctx) {
  if (B > max_B_ || seq_len > max_T_ || B < 1 || seq_len < 1) throw Error("Gpt::forward: batch shape exceeds the allocation");
  B_ = B;
  T_ = seq_len;
  ctx_ = ctx;
  tokens_ = tokens;
  targets_ = targets;
  const std::int64_t BT = static_cast<std::int64_t>(B) * seq_len, C = m_.n_embd, V = m_.vocab_size;
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };

  embedding_forward<T>(mat(res_[0], C, BT), tokens, w.wte, w.wpe, B, seq_len);
  dropout_apply<T>(sub(res_[0], C), key(site(m_.n_layer, 0)));

  AttentionDropout adrop;
  adrop.sample_offset = ctx.sample_offset;
  adrop.n_head_total = m_.n_head;
  for (int l = 0; l < m_.n_layer; ++l) {
    const BlockWeights<T>& bw = w.h[l];
    LayerActs& a = layers_[l];
    adrop.key = key(site(l, kSiteAttn));
    layernorm_forward<T>(mat(a.ln1, C, BT), a.ln1_mean, a.ln1_rstd, mat(res_[l], C, BT), bw.ln1_w, bw.ln1_b);
    linear_forward<T>(mat(a.qkv, 3 * C, BT), mat(a.ln1, C, BT), bw.attn_w, bw.attn_b);
    attention_forward<T>(mat(a.atty, C, BT), a.att, mat(a.qkv, 3 * C, BT), B, seq_len, m_.n_head, adrop, attn_ws_);
    linear_forward<T>(mat(proj_, C, BT), mat(a.atty, C, BT), bw.proj_w, bw.proj_b);
    dropout_apply<T>(sub(proj_, C), key(site(l, kSiteAttnResid)));
    residual_forward<T>(sub(a.res_mid, C), sub(res_[l], C), sub(proj_, C));

    layernorm_forward<T>(mat(a.ln2, C, BT), a.ln2_mean, a.ln2_rstd, mat(a.res_mid, C, BT), bw.ln2_w, bw.ln2_b);
    linear_forward<T>(mat(a.fch, 4 * C, BT), mat(a.ln2, C, BT), bw.fc_w, bw.fc_b);
    gelu_forward<T>(sub(a.fch_gelu, 4 * C), sub(a.fch, 4 * C));
    linear_forward<T>(mat(proj_, C, BT), mat(a.fch_gelu, 4 * C, BT), bw.fcp_w, bw.fcp_b);
    dropout_apply<T>(sub(proj_, C), key(site(l, kSiteMlpResid)));
    residual_forward<T>(sub(res_[l + 1], C), sub(a.res_mid, C), sub(proj_, C));
  }
  layernorm_forward<T>(mat(lnf_, C, BT), lnf_mean_, lnf_rstd_, mat(res_[m_.n_layer], C, BT), w.lnf_w, w.lnf_b);
  linear_forward<T>(mat(logits_, V, BT), mat(lnf_, C, BT), w.wte, View1<const T>());
  if (targets.extent(0) == 0) return 0.0;
  return cross_entropy_forward<T>(sub(losses_, 1), mat(logits_, V, BT), targets);
}

template <class T>
void Gpt<T>::backward(const GptWeights<T>& w, const GptWeights<T>& g, T dloss) {
  if (targets_.extent(0) == 0) throw Error("Gpt::backward: the last forward computed no loss");
  const int B = B_, seq_len = T_;
  const std::int64_t BT = static_cast<std::int64_t>(B) * seq_len, C = m_.n_embd, V = m_.vocab_size;
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };

  // Head: dlogits in place of the logits, then through the tied embedding and ln_f.
  cross_entropy_backward<T>(mat(logits_, V, BT), mat(logits_, V, BT), targets_, dloss);
  linear_backward<T>(mat(dln_, C, BT), g.wte, View1<T>(), mat(logits_, V, BT), mat(lnf_, C, BT), w.wte);
  fill<T>(sub(dres_, C), T(0));
  layernorm_backward<T>(mat(dres_, C, BT), g.lnf_w, g.lnf_b, mat(dln_, C, BT), mat(res_[m_.n_layer], C, BT), w.lnf_w,
                        lnf_mean_, lnf_rstd_);

  AttentionDropout adrop;
  adrop.sample_offset = ctx_.sample_offset;
  adrop.n_head_total = m_.n_head;
  for (int l = m_.n_layer - 1; l >= 0; --l) {
    const BlockWeights<T>& bw = w.h[l];
    const BlockWeights<T>& bg = g.h[l];
    LayerActs& a = layers_[l];
    // MLP branch: dres holds d x_{l+1}.
    Kokkos::deep_copy(sub(dproj_, C), sub(dres_, C));
    dropout_apply<T>(sub(dproj_, C), key(site(l, kSiteMlpResid)));
    linear_backward<T>(mat(dfch_, 4 * C, BT), bg.fcp_w, bg.fcp_b, mat(dproj_, C, BT), mat(a.fch_gelu, 4 * C, BT),
                       bw.fcp_w);
    gelu_backward<T>(sub(dfch_, 4 * C), sub(dfch_, 4 * C), sub(a.fch, 4 * C));
    linear_backward<T>(mat(dln_, C, BT), bg.fc_w, bg.fc_b, mat(dfch_, 4 * C, BT), mat(a.ln2, C, BT), bw.fc_w);
    layernorm_backward<T>(mat(dres_, C, BT), bg.ln2_w, bg.ln2_b, mat(dln_, C, BT), mat(a.res_mid, C, BT), bw.ln2_w,
                          a.ln2_mean, a.ln2_rstd);
    // Attention branch: dres now holds d x_mid.
    Kokkos::deep_copy(sub(dproj_, C), sub(dres_, C));
    dropout_apply<T>(sub(dproj_, C), key(site(l, kSiteAttnResid)));
    linear_backward<T>(mat(datty_, C, BT), bg.proj_w, bg.proj_b, mat(dproj_, C, BT), mat(a.atty, C, BT), bw.proj_w);
    adrop.key = key(site(l, kSiteAttn));
    attention_backward<T>(mat(dqkv_, 3 * C, BT), dpre_, mat(datty_, C, BT), mat(a.qkv, 3 * C, BT), a.att, B, seq_len,
                          m_.n_head, adrop, attn_ws_);
    linear_backward<T>(mat(dln_, C, BT), bg.attn_w, bg.attn_b, mat(dqkv_, 3 * C, BT), mat(a.ln1, C, BT), bw.attn_w);
    layernorm_backward<T>(mat(dres_, C, BT), bg.ln1_w, bg.ln1_b, mat(dln_, C, BT), mat(res_[l], C, BT), bw.ln1_w,
                          a.ln1_mean, a.ln1_rstd);
  }
  dropout_apply<T>(sub(dres_, C), key(site(m_.n_layer, 0)));
  embedding_backward<T>(g.wte, g.wpe, mat(dres_, C, BT), tokens_, B, seq_len);
}

template <class T>
View2<const T> Gpt<T>::logits() const {
  return as_matrix<const T>(logits_.data(), static_cast<std::int64_t>(B_) * T_, m_.vocab_size);
}

#define TRIDENT_INST(T)                                                                          \
  template GptWeights<T> bind_weights<T>(T*, const ParamLayout&, const ModelConfig&);           \
  template class Gpt<T>;
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
