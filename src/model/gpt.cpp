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

#include <algorithm>

namespace trident {

namespace {
std::vector<int> uniq(std::vector<int> v) {
  std::vector<int> out;
  for (int u : v)
    if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
  return out;
}
bool contains(const std::vector<int>& v, int u) { return std::find(v.begin(), v.end(), u) != v.end(); }

// Dropout sites: 8 per block, the embedding dropout after the last block's.
constexpr std::uint32_t kSiteAttn = 0, kSiteAttnResid = 1, kSiteMlpResid = 2;
std::uint32_t site(int layer, std::uint32_t kind) { return static_cast<std::uint32_t>(layer) * 8u + kind; }

const char* kBlockTensors[12] = {"ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
                                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",       "ln_2.bias",
                                 "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};

/// Sizes of every activation buffer of a Gpt, in allocation order (one place for the
/// constructor and for memory planning).
std::vector<std::int64_t> activation_plan(const ModelConfig& m, int max_B, int max_T, bool recompute) {
  const std::int64_t BT = static_cast<std::int64_t>(max_B) * max_T, C = m.n_embd, V = m.vocab_size;
  const std::int64_t att = static_cast<std::int64_t>(max_B) * m.n_head * max_T * max_T;
  std::vector<std::int64_t> plan;
  for (int l = 0; l <= m.n_layer; ++l) plan.push_back(BT * C);  // residual stream
  const int stored_layers = recompute ? 1 : m.n_layer;
  for (int l = 0; l < stored_layers; ++l)
    plan.insert(plan.end(), {BT * C, BT, BT, BT * 3 * C, att, BT * C, BT * C, BT * C, BT, BT, BT * 4 * C, BT * 4 * C});
  plan.insert(plan.end(), {BT * C, BT, BT, BT * V, BT, BT * C,                          // ln_f .. proj
                           BT * C, BT * C, BT * C, BT * 3 * C, BT * 4 * C, att, BT * C,  // backward scratch
                           BT * C, BT * C, BT * C, BT * C, BT * C, BT * C, BT * C,       // attention q k v y dq dk dv
                           m.dropout > 0.0 ? att : 0});                                  // attention pdrop
  return plan;
}
}  // namespace

GptSchedule GptSchedule::make(const ParamLayout& layout, const ModelConfig& m) {
  GptSchedule s;
  const int L = m.n_layer;
  const int E = layout.unit_of("transformer.wte.weight"), H = layout.unit_of("transformer.ln_f.weight");
  s.fwd_params.push_back({E});
  s.bwd_params.push_back({});
  s.grads.push_back({E});
  for (int l = 0; l < L; ++l) {
    const int b = layout.unit_of("transformer.h." + std::to_string(l) + ".ln_1.weight");
    s.fwd_params.push_back({b});
    s.bwd_params.push_back({b});
    s.grads.push_back({b});
  }
  s.fwd_params.push_back(uniq({H, E}));
  s.bwd_params.push_back(uniq({H, E}));
  s.grads.push_back(uniq({H, E}));
  s.last_grad_segment.assign(layout.units().size(), -1);
  for (int seg = L + 1; seg >= 0; --seg)
    for (int u : s.grads[static_cast<size_t>(seg)]) s.last_grad_segment[static_cast<size_t>(u)] = seg;
  // Simulate the holding rule of Gpt::hold/drop to list the acquisitions of each pass.
  std::vector<int> held;
  auto visit = [&](const std::vector<int>& need, const std::vector<int>& next, std::vector<int>& order) {
    for (int u : need)
      if (!contains(held, u)) {
        order.push_back(u);
        held.push_back(u);
      }
    std::vector<int> kept;
    for (int u : held)
      if (contains(next, u)) kept.push_back(u);
    held = kept;
  };
  for (int seg = 0; seg <= L + 1; ++seg)
    visit(s.fwd_params[static_cast<size_t>(seg)],
          s.fwd_params[static_cast<size_t>(std::min(seg + 1, L + 1))], s.forward_order);
  for (int seg = L + 1; seg >= 0; --seg)
    visit(s.bwd_params[static_cast<size_t>(seg)], seg > 0 ? s.bwd_params[static_cast<size_t>(seg - 1)] : std::vector<int>{},
          s.backward_order);
  return s;
}

template <class T>
std::int64_t Gpt<T>::activation_elements(const ModelConfig& m, int max_B, int max_T, bool recompute) {
  std::int64_t n = 0;
  for (auto e : activation_plan(m, max_B, max_T, recompute)) n += e;
  return n;
}

template <class T>
Gpt<T>::Gpt(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T, bool recompute)
    : m_(m), layout_(layout), sched_(GptSchedule::make(layout, m)), max_B_(max_B), max_T_(max_T), recompute_(recompute) {
  if (max_T > m.block_size) throw Error("Gpt: max_T exceeds block_size");
  const auto sizes = activation_plan(m, max_B, max_T, recompute);
  res_.resize(m.n_layer + 1);
  layers_.resize(recompute ? 1 : m.n_layer);
  std::vector<View1<T>*> views;
  for (auto& r : res_) views.push_back(&r);
  for (auto& l : layers_)
    views.insert(views.end(), {&l.ln1, &l.ln1_mean, &l.ln1_rstd, &l.qkv, &l.att, &l.atty, &l.res_mid, &l.ln2,
                               &l.ln2_mean, &l.ln2_rstd, &l.fch, &l.fch_gelu});
  views.insert(views.end(), {&lnf_, &lnf_mean_, &lnf_rstd_, &logits_, &losses_, &proj_, &dres_, &dln_, &datty_,
                             &dqkv_, &dfch_, &dpre_, &dproj_, &attn_ws_.q, &attn_ws_.k, &attn_ws_.v, &attn_ws_.y,
                             &attn_ws_.dq, &attn_ws_.dk, &attn_ws_.dv, &attn_ws_.pdrop});
  std::int64_t total = 0;
  for (auto e : sizes) total += e;
  acts_ = TrackedBuffer<T>("trident::Gpt::activations", total, MemCategory::activations);
  std::int64_t off = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    *views[i] = acts_.slice(off, sizes[i]);
    off += sizes[i];
  }
  t_wte_ = layout.at("transformer.wte.weight");
  t_wpe_ = layout.at("transformer.wpe.weight");
  t_lnf_w_ = layout.at("transformer.ln_f.weight");
  t_lnf_b_ = layout.find("transformer.ln_f.bias");
  for (int l = 0; l < m.n_layer; ++l) {
    std::array<int, 12> idx{};
    for (int k = 0; k < 12; ++k) idx[k] = layout.find("transformer.h." + std::to_string(l) + "." + kBlockTensors[k]);
    t_block_.push_back(idx);
  }
  held_.assign(layout.units().size(), nullptr);
}

template <class T>
View1<T> Gpt<T>::vec(const T* unit_base, int tensor) const {
  if (tensor < 0) return View1<T>();
  const TensorSpec& t = layout_.tensors()[static_cast<size_t>(tensor)];
  T* base = const_cast<T*>(unit_base) + (t.offset - layout_.units()[static_cast<size_t>(t.unit)].offset);
  return View1<T>(base, static_cast<size_t>(t.numel));
}

template <class T>
View2<T> Gpt<T>::mat2(const T* unit_base, int tensor) const {
  const TensorSpec& t = layout_.tensors()[static_cast<size_t>(tensor)];
  T* base = const_cast<T*>(unit_base) + (t.offset - layout_.units()[static_cast<size_t>(t.unit)].offset);
  return as_matrix(base, t.shape[0], t.shape[1]);
}

template <class T>
typename Gpt<T>::BlockW Gpt<T>::block_weights(const T* base, int l) const {
  const auto& i = t_block_[static_cast<size_t>(l)];
  return BlockW{vec(base, i[0]), vec(base, i[1]),  mat2(base, i[2]),  vec(base, i[3]),
                mat2(base, i[4]), vec(base, i[5]), vec(base, i[6]),   vec(base, i[7]),
                mat2(base, i[8]), vec(base, i[9]), mat2(base, i[10]), vec(base, i[11])};
}

template <class T>
DropoutKey Gpt<T>::key(std::uint32_t s) const {
  DropoutKey k;
  k.seed = ctx_.seed;
  k.site = s;
  k.step = ctx_.step;
  k.p = (ctx_.train && m_.dropout > 0.0) ? m_.dropout : 0.0;
  // Element index of (b, t, c) is ((sample_offset + b) * T + t) * C + c: global, layout-free.
  k.offset = ctx_.sample_offset * static_cast<std::uint64_t>(T_) * static_cast<std::uint64_t>(m_.n_embd);
  return k;
}

template <class T>
void Gpt<T>::hold(UnitProvider<T>& p, const std::vector<int>& need) {
  for (int u : need)
    if (held_[static_cast<size_t>(u)] == nullptr) held_[static_cast<size_t>(u)] = p.acquire(u);
}

template <class T>
void Gpt<T>::drop(UnitProvider<T>& p, const std::vector<int>& keep) {
  for (size_t u = 0; u < held_.size(); ++u)
    if (held_[u] != nullptr && !contains(keep, static_cast<int>(u))) {
      p.release(static_cast<int>(u));
      held_[u] = nullptr;
    }
}

template <class T>
void Gpt<T>::block_forward(int l, const BlockW& bw) {
  const std::int64_t BT = static_cast<std::int64_t>(B_) * T_, C = m_.n_embd;
  auto mat = [BT](const View1<T>& v, std::int64_t cols) { return as_matrix(v.data(), BT, cols); };
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };
  LayerActs& a = acts(l);
  AttentionDropout adrop;
  adrop.sample_offset = ctx_.sample_offset;
  adrop.n_head_total = m_.n_head;
  adrop.key = key(site(l, kSiteAttn));
  layernorm_forward<T>(mat(a.ln1, C), a.ln1_mean, a.ln1_rstd, mat(res_[l], C), bw.ln1_w, bw.ln1_b);
  linear_forward<T>(mat(a.qkv, 3 * C), mat(a.ln1, C), bw.attn_w, bw.attn_b);
  attention_forward<T>(mat(a.atty, C), a.att, mat(a.qkv, 3 * C), B_, T_, m_.n_head, adrop, attn_ws_);
  linear_forward<T>(mat(proj_, C), mat(a.atty, C), bw.proj_w, bw.proj_b);
  dropout_apply<T>(sub(proj_, C), key(site(l, kSiteAttnResid)));
  residual_forward<T>(sub(a.res_mid, C), sub(res_[l], C), sub(proj_, C));
  layernorm_forward<T>(mat(a.ln2, C), a.ln2_mean, a.ln2_rstd, mat(a.res_mid, C), bw.ln2_w, bw.ln2_b);
  linear_forward<T>(mat(a.fch, 4 * C), mat(a.ln2, C), bw.fc_w, bw.fc_b);
  gelu_forward<T>(sub(a.fch_gelu, 4 * C), sub(a.fch, 4 * C));
  linear_forward<T>(mat(proj_, C), mat(a.fch_gelu, 4 * C), bw.fcp_w, bw.fcp_b);
  dropout_apply<T>(sub(proj_, C), key(site(l, kSiteMlpResid)));
  residual_forward<T>(sub(res_[l + 1], C), sub(a.res_mid, C), sub(proj_, C));
}

template <class T>
void Gpt<T>::block_backward(int l, const BlockW& bw, const BlockW& bg) {
  // On entry dres holds d x_{l+1}; on exit d x_l.
  const std::int64_t BT = static_cast<std::int64_t>(B_) * T_, C = m_.n_embd;
  auto mat = [BT](const View1<T>& v, std::int64_t cols) { return as_matrix(v.data(), BT, cols); };
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };
  LayerActs& a = acts(l);
  Kokkos::deep_copy(sub(dproj_, C), sub(dres_, C));
  dropout_apply<T>(sub(dproj_, C), key(site(l, kSiteMlpResid)));
  linear_backward<T>(mat(dfch_, 4 * C), bg.fcp_w, bg.fcp_b, mat(dproj_, C), mat(a.fch_gelu, 4 * C), bw.fcp_w);
  gelu_backward<T>(sub(dfch_, 4 * C), sub(dfch_, 4 * C), sub(a.fch, 4 * C));
  linear_backward<T>(mat(dln_, C), bg.fc_w, bg.fc_b, mat(dfch_, 4 * C), mat(a.ln2, C), bw.fc_w);
  layernorm_backward<T>(mat(dres_, C), bg.ln2_w, bg.ln2_b, mat(dln_, C), mat(a.res_mid, C), bw.ln2_w, a.ln2_mean,
                        a.ln2_rstd);
  Kokkos::deep_copy(sub(dproj_, C), sub(dres_, C));
  dropout_apply<T>(sub(dproj_, C), key(site(l, kSiteAttnResid)));
  linear_backward<T>(mat(datty_, C), bg.proj_w, bg.proj_b, mat(dproj_, C), mat(a.atty, C), bw.proj_w);
  AttentionDropout adrop;
  adrop.sample_offset = ctx_.sample_offset;
  adrop.n_head_total = m_.n_head;
  adrop.key = key(site(l, kSiteAttn));
  attention_backward<T>(mat(dqkv_, 3 * C), dpre_, mat(datty_, C), mat(a.qkv, 3 * C), a.att, B_, T_, m_.n_head, adrop,
                        attn_ws_);
  linear_backward<T>(mat(dln_, C), bg.attn_w, bg.attn_b, mat(dqkv_, 3 * C), mat(a.ln1, C), bw.attn_w);
  layernorm_backward<T>(mat(dres_, C), bg.ln1_w, bg.ln1_b, mat(dln_, C), mat(res_[l], C), bw.ln1_w, a.ln1_mean,
                        a.ln1_rstd);
}

template <class T>
double Gpt<T>::forward(UnitProvider<T>& p, View1<const token_t> tokens, View1<const token_t> targets, int B,
                       int seq_len, const ForwardContext& ctx, bool for_backward) {
  if (B > max_B_ || seq_len > max_T_ || B < 1 || seq_len < 1) throw Error("Gpt::forward: batch shape exceeds the allocation");
  B_ = B;
  T_ = seq_len;
  ctx_ = ctx;
  tokens_ = tokens;
  targets_ = targets;
  const int L = m_.n_layer;
  const std::int64_t BT = static_cast<std::int64_t>(B) * seq_len, C = m_.n_embd, V = m_.vocab_size;
  auto mat = [BT](const View1<T>& v, std::int64_t cols) { return as_matrix(v.data(), BT, cols); };
  drop(p, {});  // a forward without backward may have left the head held
  p.begin_pass(Pass::forward, sched_.forward_order);

  hold(p, sched_.fwd_params[0]);
  const T* E = held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_wte_)].unit)];
  embedding_forward<T>(mat(res_[0], C), tokens, mat2(E, t_wte_), mat2(E, t_wpe_), B, seq_len);
  dropout_apply<T>(View1<T>(res_[0].data(), static_cast<size_t>(BT * C)), key(site(L, 0)));
  drop(p, sched_.fwd_params[1]);

  for (int l = 0; l < L; ++l) {
    const auto& need = sched_.fwd_params[static_cast<size_t>(l + 1)];
    hold(p, need);
    block_forward(l, block_weights(held_[static_cast<size_t>(need[0])], l));
    drop(p, sched_.fwd_params[static_cast<size_t>(l + 2)]);
    p.progress();
  }
  hold(p, sched_.fwd_params[static_cast<size_t>(L + 1)]);
  const T* Hb = held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_lnf_w_)].unit)];
  E = held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_wte_)].unit)];
  layernorm_forward<T>(mat(lnf_, C), lnf_mean_, lnf_rstd_, mat(res_[L], C), vec(Hb, t_lnf_w_), vec(Hb, t_lnf_b_));
  linear_forward<T>(mat(logits_, V), mat(lnf_, C), mat2(E, t_wte_), View1<const T>());
  double loss = 0.0;
  if (targets.extent(0) > 0)
    loss = cross_entropy_forward<T>(View1<T>(losses_.data(), static_cast<size_t>(BT)), mat(logits_, V), targets);
  drop(p, for_backward ? sched_.fwd_params[static_cast<size_t>(L + 1)] : std::vector<int>{});
  return loss;
}

template <class T>
void Gpt<T>::backward(UnitProvider<T>& p, T dloss) {
  if (targets_.extent(0) == 0) throw Error("Gpt::backward: the last forward computed no loss");
  const int L = m_.n_layer;
  const std::int64_t BT = static_cast<std::int64_t>(B_) * T_, C = m_.n_embd, V = m_.vocab_size;
  auto mat = [BT](const View1<T>& v, std::int64_t cols) { return as_matrix(v.data(), BT, cols); };
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };
  auto done = [&](int seg) {
    for (int u : sched_.grads[static_cast<size_t>(seg)])
      if (sched_.last_grad_segment[static_cast<size_t>(u)] == seg) p.grads_done(u);
  };
  p.begin_pass(Pass::backward, sched_.backward_order);

  // Head: dlogits in place of the logits, then through the tied embedding and ln_f.
  hold(p, sched_.bwd_params[static_cast<size_t>(L + 1)]);
  const int uE = layout_.tensors()[static_cast<size_t>(t_wte_)].unit, uH = layout_.tensors()[static_cast<size_t>(t_lnf_w_)].unit;
  const T* E = held_[static_cast<size_t>(uE)];
  const T* Hb = held_[static_cast<size_t>(uH)];
  T* gE = p.grads(uE);
  T* gH = p.grads(uH);
  cross_entropy_backward<T>(mat(logits_, V), mat(logits_, V), targets_, dloss);
  linear_backward<T>(mat(dln_, C), mat2(gE, t_wte_), View1<T>(), mat(logits_, V), mat(lnf_, C), mat2(E, t_wte_));
  fill<T>(sub(dres_, C), T(0));
  layernorm_backward<T>(mat(dres_, C), vec(gH, t_lnf_w_), vec(gH, t_lnf_b_), mat(dln_, C), mat(res_[L], C),
                        vec(Hb, t_lnf_w_), lnf_mean_, lnf_rstd_);
  done(L + 1);
  drop(p, sched_.bwd_params[static_cast<size_t>(L)]);

  for (int l = L - 1; l >= 0; --l) {
    const auto& need = sched_.bwd_params[static_cast<size_t>(l + 1)];
    hold(p, need);
    const BlockW w = block_weights(held_[static_cast<size_t>(need[0])], l);
    if (recompute_) block_forward(l, w);  // same kernels, same dropout keys: bitwise the saved values
    block_backward(l, w, block_weights(p.grads(need[0]), l));
    done(l + 1);
    drop(p, sched_.bwd_params[static_cast<size_t>(l)]);
    p.progress();
  }
  dropout_apply<T>(sub(dres_, C), key(site(L, 0)));
  T* gE0 = p.grads(uE);
  embedding_backward<T>(mat2(gE0, t_wte_), mat2(gE0, t_wpe_), mat(dres_, C), tokens_, B_, T_);
  done(0);
  drop(p, {});
}

template <class T>
View2<const T> Gpt<T>::logits() const {
  return as_matrix<const T>(logits_.data(), static_cast<std::int64_t>(B_) * T_, m_.vocab_size);
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace trident
