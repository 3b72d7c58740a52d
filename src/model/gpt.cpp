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

// Dropout sites: 8 per block (keyed by the global block index), the embedding's after the last block's.
constexpr std::uint32_t kSiteAttn = 0, kSiteAttnResid = 1, kSiteMlpResid = 2;
std::uint32_t site(int layer, std::uint32_t kind) { return static_cast<std::uint32_t>(layer) * 8u + kind; }

const char* kBlockTensors[12] = {"ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
                                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",       "ln_2.bias",
                                 "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};

struct Dims {
  std::int64_t BT, C, Cl, att, Vp;
  int n_local;
  bool head;
};
Dims dims(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T) {
  const int tp = layout.part().tp_size;
  Dims d{};
  d.BT = static_cast<std::int64_t>(max_B) * max_T;
  d.C = m.n_embd;
  d.Cl = m.n_embd / tp;
  d.att = static_cast<std::int64_t>(max_B) * (m.n_head / tp) * max_T * max_T;
  d.n_local = layout.part().n_layers;
  d.head = layout.part().last_stage();
  const int w = layout.find("transformer.wte.weight");
  d.Vp = w >= 0 ? layout.tensors()[static_cast<size_t>(w)].shape[0] : 0;
  return d;
}

/// Sizes of every activation buffer of a Gpt, in allocation order (one place for the
/// constructor and for memory planning).
std::vector<std::int64_t> activation_plan(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T,
                                          bool recompute, int stashes) {
  const Dims d = dims(m, layout, max_B, max_T);
  const std::int64_t BT = d.BT, C = d.C, Cl = d.Cl;
  const std::vector<std::int64_t> layer = {BT * C,  BT,     BT,     BT * 3 * Cl,     d.att,          BT * Cl,
                                           BT * C,  BT * C, BT,     BT,              BT * 4 * Cl,    BT * 4 * Cl};
  std::vector<std::int64_t> plan;
  for (int s = 0; s < stashes; ++s) {
    for (int l = 0; l <= d.n_local; ++l) plan.push_back(BT * C);  // residual stream
    if (!recompute)
      for (int l = 0; l < d.n_local; ++l) plan.insert(plan.end(), layer.begin(), layer.end());
    if (d.head) plan.insert(plan.end(), {BT * C, BT, BT, BT * d.Vp, BT, BT, 2 * BT});  // lnf .. ce stats
  }
  if (recompute) plan.insert(plan.end(), layer.begin(), layer.end());
  plan.insert(plan.end(), {BT * C, BT * C, BT * C, BT * Cl, BT * 3 * Cl, BT * 4 * Cl, d.att, BT * C,  // scratch
                           BT * Cl, BT * Cl, BT * Cl, BT * Cl, BT * Cl, BT * Cl, BT * Cl,             // attention q k v y dq dk dv
                           m.dropout > 0.0 ? d.att : 0});                                             // attention pdrop
  return plan;
}
}  // namespace

GptSchedule GptSchedule::make(const ParamLayout& layout, const ModelConfig& m) {
  GptSchedule s;
  const ModelPart& part = layout.part();
  s.has_embed = part.first_stage();
  s.has_head = part.last_stage();
  auto unit = [&](const std::string& name) { return layout.unit_of(name); };
  if (s.has_embed) {
    const auto e = uniq({unit("transformer.wte.weight"), unit("transformer.wpe.weight")});
    s.fwd_params.push_back(e);
    s.bwd_params.push_back({});
    s.grads.push_back(e);
    s.layers.push_back(-1);
  }
  for (int l = part.first_layer; l < part.first_layer + part.n_layers; ++l) {
    const int b = unit("transformer.h." + std::to_string(l) + ".ln_1.weight");
    s.fwd_params.push_back({b});
    s.bwd_params.push_back({b});
    s.grads.push_back({b});
    s.layers.push_back(l);
  }
  if (s.has_head) {
    const auto h = uniq({unit("transformer.ln_f.weight"), unit("transformer.wte.weight")});
    s.fwd_params.push_back(h);
    s.bwd_params.push_back(h);
    s.grads.push_back(h);
    s.layers.push_back(-1);
  }
  const int S = static_cast<int>(s.fwd_params.size());
  s.last_grad_module.assign(layout.units().size(), -1);
  for (int mod = S - 1; mod >= 0; --mod)
    for (int u : s.grads[static_cast<size_t>(mod)]) s.last_grad_module[static_cast<size_t>(u)] = mod;
  for (int mod = 0; mod < S; ++mod)
    if (s.layers[static_cast<size_t>(mod)] < 0)
      for (int u : s.fwd_params[static_cast<size_t>(mod)])
        if (!contains(s.special_units, u)) s.special_units.push_back(u);
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
  for (int mod = 0; mod < S; ++mod)
    visit(s.fwd_params[static_cast<size_t>(mod)],
          mod + 1 < S ? s.fwd_params[static_cast<size_t>(mod + 1)]
                      : (s.has_head ? s.fwd_params[static_cast<size_t>(mod)] : std::vector<int>{}),
          s.forward_order);
  for (int mod = S - 1; mod >= 0; --mod)
    visit(s.bwd_params[static_cast<size_t>(mod)], mod > 0 ? s.bwd_params[static_cast<size_t>(mod - 1)] : std::vector<int>{},
          s.backward_order);
  (void)m;
  return s;
}

template <class T>
std::int64_t Gpt<T>::activation_elements(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T,
                                         bool recompute, int stashes) {
  std::int64_t n = 0;
  for (auto e : activation_plan(m, layout, max_B, max_T, recompute, stashes)) n += e;
  return n;
}

template <class T>
Gpt<T>::Gpt(const ModelConfig& m, const ParamLayout& layout, Communicator* tp_comm, int max_B, int max_T,
            bool recompute, int stashes)
    : m_(m),
      layout_(layout),
      sched_(GptSchedule::make(layout, m)),
      tp_(tp_comm),
      tp_size_(layout.part().tp_size),
      tp_rank_(layout.part().tp_rank),
      max_B_(max_B),
      max_T_(max_T),
      recompute_(recompute) {
  if (max_T > m.block_size) throw Error("Gpt: max_T exceeds block_size");
  if (tp_size_ > 1 && (tp_comm == nullptr || tp_comm->size() != tp_size_))
    throw Error("Gpt: the tensor-parallel communicator does not match the layout's tp size");
  if (stashes < 1) throw Error("Gpt: at least one activation stash");
  const Dims d = dims(m, layout, max_B, max_T);
  C_ = static_cast<int>(d.C);
  Cl_ = static_cast<int>(d.Cl);
  NHl_ = m.n_head / tp_size_;
  n_local_ = d.n_local;
  Vp_ = static_cast<int>(d.Vp);
  vocab_start_ = tp_rank_ * Vp_;
  vocab_rows_ = std::max(0, std::min(m.vocab_size, vocab_start_ + Vp_) - vocab_start_);

  const auto sizes = activation_plan(m, layout, max_B, max_T, recompute, stashes);
  stash_.resize(static_cast<size_t>(stashes));
  std::vector<View1<T>*> views;
  auto layer_views = [&views](LayerActs& l) {
    views.insert(views.end(), {&l.ln1, &l.ln1_mean, &l.ln1_rstd, &l.qkv, &l.att, &l.atty, &l.res_mid, &l.ln2,
                               &l.ln2_mean, &l.ln2_rstd, &l.fch, &l.fch_gelu});
  };
  for (Stash& s : stash_) {
    s.res.resize(static_cast<size_t>(n_local_ + 1));
    for (auto& r : s.res) views.push_back(&r);
    if (!recompute) {
      s.layers.resize(static_cast<size_t>(n_local_));
      for (auto& l : s.layers) layer_views(l);
    }
    if (d.head) views.insert(views.end(), {&s.lnf, &s.lnf_mean, &s.lnf_rstd, &s.logits, &s.losses, &s.row_max, &s.stats});
  }
  if (recompute) layer_views(shared_layer_);
  views.insert(views.end(), {&proj_, &dres_, &dln_, &datty_, &dqkv_, &dfch_, &dpre_, &dproj_, &attn_ws_.q, &attn_ws_.k,
                             &attn_ws_.v, &attn_ws_.y, &attn_ws_.dq, &attn_ws_.dk, &attn_ws_.dv, &attn_ws_.pdrop});
  std::int64_t total = 0;
  for (auto e : sizes) total += e;
  acts_ = TrackedBuffer<T>("trident::Gpt::activations", total, MemCategory::activations);
  std::int64_t off = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    *views[i] = acts_.slice(off, sizes[i]);
    off += sizes[i];
  }
  t_wte_ = layout.find("transformer.wte.weight");
  t_wpe_ = layout.find("transformer.wpe.weight");
  t_lnf_w_ = layout.find("transformer.ln_f.weight");
  t_lnf_b_ = layout.find("transformer.ln_f.bias");
  for (int l = layout.part().first_layer; l < layout.part().first_layer + n_local_; ++l) {
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
DropoutKey Gpt<T>::key(const Stash& s, std::uint32_t st) const {
  DropoutKey k;
  k.seed = s.ctx.seed;
  k.site = st;
  k.step = s.ctx.step;
  k.p = (s.ctx.train && m_.dropout > 0.0) ? m_.dropout : 0.0;
  // Element index of (b, t, c) is ((sample_offset + b) * T + t) * C + c: global, layout-free.
  k.offset = s.ctx.sample_offset * static_cast<std::uint64_t>(s.seq) * static_cast<std::uint64_t>(m_.n_embd);
  return k;
}

template <class T>
void Gpt<T>::tp_sum(View1<T> x) {
  if (tp_size_ > 1) tp_->all_reduce(x.data(), x.extent(0));
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
void Gpt<T>::block_forward(Stash& s, int ll, const BlockW& bw) {
  const int gl = layout_.part().first_layer + ll;  // global block index: dropout keys
  const std::int64_t BT = static_cast<std::int64_t>(s.B) * s.seq, C = C_, Cl = Cl_;
  auto mat = [BT](const View1<T>& v, std::int64_t cols) { return as_matrix(v.data(), BT, cols); };
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };
  LayerActs& a = acts(s, ll);
  AttentionDropout adrop;
  adrop.sample_offset = s.ctx.sample_offset;
  adrop.n_head_total = m_.n_head;
  adrop.head_offset = tp_rank_ * NHl_;
  adrop.key = key(s, site(gl, kSiteAttn));
  // Attention: column-parallel QKV (this rank's heads), local attention, row-parallel projection
  // whose partial sums are all-reduced over tp before the (replicated) bias.
  layernorm_forward<T>(mat(a.ln1, C), a.ln1_mean, a.ln1_rstd, mat(s.res[ll], C), bw.ln1_w, bw.ln1_b);
  linear_forward<T>(mat(a.qkv, 3 * Cl), mat(a.ln1, C), bw.attn_w, bw.attn_b, gemm_);
  attention_forward<T>(mat(a.atty, Cl), a.att, mat(a.qkv, 3 * Cl), s.B, s.seq, NHl_, adrop, attn_ws_, gemm_);
  linear_forward<T>(mat(proj_, C), mat(a.atty, Cl), bw.proj_w, View1<const T>(), gemm_);
  tp_sum(sub(proj_, C));
  add_bias<T>(mat(proj_, C), bw.proj_b);
  dropout_apply<T>(sub(proj_, C), key(s, site(gl, kSiteAttnResid)));
  residual_forward<T>(sub(a.res_mid, C), sub(s.res[ll], C), sub(proj_, C));
  // MLP: column-parallel up-projection (4C / tp), GELU, row-parallel down-projection, all-reduce.
  layernorm_forward<T>(mat(a.ln2, C), a.ln2_mean, a.ln2_rstd, mat(a.res_mid, C), bw.ln2_w, bw.ln2_b);
  linear_forward<T>(mat(a.fch, 4 * Cl), mat(a.ln2, C), bw.fc_w, bw.fc_b, gemm_);
  gelu_forward<T>(sub(a.fch_gelu, 4 * Cl), sub(a.fch, 4 * Cl));
  linear_forward<T>(mat(proj_, C), mat(a.fch_gelu, 4 * Cl), bw.fcp_w, View1<const T>(), gemm_);
  tp_sum(sub(proj_, C));
  add_bias<T>(mat(proj_, C), bw.fcp_b);
  dropout_apply<T>(sub(proj_, C), key(s, site(gl, kSiteMlpResid)));
  residual_forward<T>(sub(s.res[ll + 1], C), sub(a.res_mid, C), sub(proj_, C));
}

template <class T>
void Gpt<T>::block_backward(Stash& s, int ll, const BlockW& bw, const BlockW& bg) {
  // On entry dres holds d x_{l+1}; on exit d x_l.
  const int gl = layout_.part().first_layer + ll;
  const std::int64_t BT = static_cast<std::int64_t>(s.B) * s.seq, C = C_, Cl = Cl_;
  auto mat = [BT](const View1<T>& v, std::int64_t cols) { return as_matrix(v.data(), BT, cols); };
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };
  LayerActs& a = acts(s, ll);
  Kokkos::deep_copy(sub(dproj_, C), sub(dres_, C));
  dropout_apply<T>(sub(dproj_, C), key(s, site(gl, kSiteMlpResid)));
  linear_backward<T>(mat(dfch_, 4 * Cl), bg.fcp_w, bg.fcp_b, mat(dproj_, C), mat(a.fch_gelu, 4 * Cl), bw.fcp_w,
                     /*accumulate_dinp=*/false, gemm_);
  gelu_backward<T>(sub(dfch_, 4 * Cl), sub(dfch_, 4 * Cl), sub(a.fch, 4 * Cl));
  linear_backward<T>(mat(dln_, C), bg.fc_w, bg.fc_b, mat(dfch_, 4 * Cl), mat(a.ln2, C), bw.fc_w,
                     /*accumulate_dinp=*/false, gemm_);
  tp_sum(sub(dln_, C));  // column-parallel: the input gradient is a sum over tp partitions
  layernorm_backward<T>(mat(dres_, C), bg.ln2_w, bg.ln2_b, mat(dln_, C), mat(a.res_mid, C), bw.ln2_w, a.ln2_mean,
                        a.ln2_rstd);
  Kokkos::deep_copy(sub(dproj_, C), sub(dres_, C));
  dropout_apply<T>(sub(dproj_, C), key(s, site(gl, kSiteAttnResid)));
  linear_backward<T>(mat(datty_, Cl), bg.proj_w, bg.proj_b, mat(dproj_, C), mat(a.atty, Cl), bw.proj_w,
                     /*accumulate_dinp=*/false, gemm_);
  AttentionDropout adrop;
  adrop.sample_offset = s.ctx.sample_offset;
  adrop.n_head_total = m_.n_head;
  adrop.head_offset = tp_rank_ * NHl_;
  adrop.key = key(s, site(gl, kSiteAttn));
  attention_backward<T>(mat(dqkv_, 3 * Cl), dpre_, mat(datty_, Cl), mat(a.qkv, 3 * Cl), a.att, s.B, s.seq, NHl_, adrop,
                        attn_ws_, gemm_);
  linear_backward<T>(mat(dln_, C), bg.attn_w, bg.attn_b, mat(dqkv_, 3 * Cl), mat(a.ln1, C), bw.attn_w,
                     /*accumulate_dinp=*/false, gemm_);
  tp_sum(sub(dln_, C));
  layernorm_backward<T>(mat(dres_, C), bg.ln1_w, bg.ln1_b, mat(dln_, C), mat(s.res[ll], C), bw.ln1_w, a.ln1_mean,
                        a.ln1_rstd);
}

template <class T>
double Gpt<T>::forward(UnitProvider<T>& p, View1<const token_t> tokens, View1<const token_t> targets, int B,
                       int seq_len, const ForwardContext& ctx, bool for_backward, int stash) {
  if (B > max_B_ || seq_len > max_T_ || B < 1 || seq_len < 1) throw Error("Gpt::forward: batch shape exceeds the allocation");
  Stash& s = stash_.at(static_cast<size_t>(stash));
  s.B = B;
  s.seq = seq_len;
  s.ctx = ctx;
  s.tokens = tokens;
  s.targets = targets;
  const std::int64_t BT = static_cast<std::int64_t>(B) * seq_len, C = C_;
  auto mat = [BT](const View1<T>& v, std::int64_t cols) { return as_matrix(v.data(), BT, cols); };
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };
  const auto& fp = sched_.fwd_params;
  const int S = static_cast<int>(fp.size());
  drop(p, {});  // a forward without backward may have left the head held
  p.begin_pass(Pass::forward, sched_.forward_order);
  int mod = 0;
  if (sched_.has_embed) {
    hold(p, fp[0]);
    const TensorSpec& wte = layout_.tensors()[static_cast<size_t>(t_wte_)];
    const T* Eb = held_[static_cast<size_t>(wte.unit)];
    const T* Pb = held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_wpe_)].unit)];
    // Vocab-parallel: each tp rank embeds its vocabulary rows (zero elsewhere) and tp rank 0 adds
    // the position embedding; the sum over tp is then exactly wte[token] + wpe[t] everywhere.
    embedding_forward<T>(mat(s.res[0], C), tokens, mat2(Eb, t_wte_), vocab_start_, vocab_rows_,
                         tp_rank_ == 0 ? View2<const T>(mat2(Pb, t_wpe_)) : View2<const T>(), B, seq_len);
    tp_sum(sub(s.res[0], C));
    dropout_apply<T>(sub(s.res[0], C), key(s, site(m_.n_layer, 0)));
    drop(p, mod + 1 < S ? fp[static_cast<size_t>(mod + 1)] : std::vector<int>{});
    ++mod;
  }
  for (int ll = 0; ll < n_local_; ++ll, ++mod) {
    hold(p, fp[static_cast<size_t>(mod)]);
    block_forward(s, ll, block_weights(held_[static_cast<size_t>(fp[static_cast<size_t>(mod)][0])], ll));
    const bool keep_for_head = mod + 1 < S;
    drop(p, keep_for_head ? fp[static_cast<size_t>(mod + 1)] : std::vector<int>{});
    p.progress();
  }
  if (!sched_.has_head) return 0.0;
  hold(p, fp[static_cast<size_t>(mod)]);
  const T* Hb = held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_lnf_w_)].unit)];
  const T* Eb = held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_wte_)].unit)];
  layernorm_forward<T>(mat(s.lnf, C), s.lnf_mean, s.lnf_rstd, mat(s.res[static_cast<size_t>(n_local_)], C),
                       vec(Hb, t_lnf_w_), vec(Hb, t_lnf_b_));
  linear_forward<T>(mat(s.logits, Vp_), mat(s.lnf, C), mat2(Eb, t_wte_), View1<const T>(), gemm_);
  double loss = 0.0;
  if (targets.extent(0) > 0) {
    // Vocab-parallel cross entropy: global row max, then sums of exp and the target logit.
    View1<T> rmax = sub(s.row_max, 1), sumexp(s.stats.data(), static_cast<size_t>(BT)),
             tlogit(s.stats.data() + BT, static_cast<size_t>(BT));
    cross_entropy_row_max<T>(rmax, mat(s.logits, Vp_), vocab_rows_);
    if (tp_size_ > 1) tp_->all_reduce(rmax.data(), rmax.data(), rmax.extent(0), dtype_of<T>(), ReduceOp::max);
    cross_entropy_partials<T>(sumexp, tlogit, mat(s.logits, Vp_), rmax, targets, vocab_start_, vocab_rows_);
    tp_sum(View1<T>(s.stats.data(), static_cast<size_t>(2 * BT)));
    loss = cross_entropy_losses<T>(sub(s.losses, 1), sumexp, rmax, tlogit, targets);
  }
  drop(p, for_backward ? fp[static_cast<size_t>(mod)] : std::vector<int>{});
  return loss;
}

template <class T>
void Gpt<T>::backward(UnitProvider<T>& p, T dloss, int stash) {
  Stash& s = stash_.at(static_cast<size_t>(stash));
  if (sched_.has_head && s.targets.extent(0) == 0) throw Error("Gpt::backward: the last forward computed no loss");
  const std::int64_t BT = static_cast<std::int64_t>(s.B) * s.seq, C = C_;
  auto mat = [BT](const View1<T>& v, std::int64_t cols) { return as_matrix(v.data(), BT, cols); };
  auto sub = [BT](const View1<T>& v, std::int64_t width) { return View1<T>(v.data(), static_cast<size_t>(BT * width)); };
  const auto& bp = sched_.bwd_params;
  const int S = static_cast<int>(bp.size());
  auto done = [&](int mod) {
    for (int u : sched_.grads[static_cast<size_t>(mod)])
      if (sched_.last_grad_module[static_cast<size_t>(u)] == mod) p.grads_done(u);
  };
  p.begin_pass(Pass::backward, sched_.backward_order);
  int mod = S - 1;
  if (sched_.has_head) {
    hold(p, bp[static_cast<size_t>(mod)]);
    const int uE = layout_.tensors()[static_cast<size_t>(t_wte_)].unit, uH = layout_.tensors()[static_cast<size_t>(t_lnf_w_)].unit;
    const T* Eb = held_[static_cast<size_t>(uE)];
    const T* Hb = held_[static_cast<size_t>(uH)];
    T* gE = p.grads(uE);
    T* gH = p.grads(uH);
    View1<const T> rmax(s.row_max.data(), static_cast<size_t>(BT)), sumexp(s.stats.data(), static_cast<size_t>(BT));
    cross_entropy_backward_split<T>(mat(s.logits, Vp_), mat(s.logits, Vp_), rmax, sumexp, s.targets, vocab_start_,
                                    vocab_rows_, dloss);
    linear_backward<T>(mat(dln_, C), mat2(gE, t_wte_), View1<T>(), mat(s.logits, Vp_), mat(s.lnf, C), mat2(Eb, t_wte_),
                       /*accumulate_dinp=*/false, gemm_);
    tp_sum(sub(dln_, C));
    fill<T>(sub(dres_, C), T(0));
    layernorm_backward<T>(mat(dres_, C), vec(gH, t_lnf_w_), vec(gH, t_lnf_b_), mat(dln_, C),
                          mat(s.res[static_cast<size_t>(n_local_)], C), vec(Hb, t_lnf_w_), s.lnf_mean, s.lnf_rstd);
    done(mod);
    drop(p, mod > 0 ? bp[static_cast<size_t>(mod - 1)] : std::vector<int>{});
    --mod;
  }
  for (int ll = n_local_ - 1; ll >= 0; --ll, --mod) {
    const auto& need = bp[static_cast<size_t>(mod)];
    hold(p, need);
    const BlockW w = block_weights(held_[static_cast<size_t>(need[0])], ll);
    if (recompute_) block_forward(s, ll, w);  // same kernels, same dropout keys: bitwise the saved values
    block_backward(s, ll, w, block_weights(p.grads(need[0]), ll));
    done(mod);
    drop(p, mod > 0 ? bp[static_cast<size_t>(mod - 1)] : std::vector<int>{});
    p.progress();
  }
  if (sched_.has_embed) {
    dropout_apply<T>(sub(dres_, C), key(s, site(m_.n_layer, 0)));
    const TensorSpec& wte = layout_.tensors()[static_cast<size_t>(t_wte_)];
    const TensorSpec& wpe = layout_.tensors()[static_cast<size_t>(t_wpe_)];
    T* gE = p.grads(wte.unit);
    T* gP = p.grads(wpe.unit);
    embedding_backward<T>(mat2(gE, t_wte_), mat2(gP, t_wpe_), mat(dres_, C), s.tokens, vocab_start_, vocab_rows_, s.B,
                          s.seq);
    done(0);
  }
  drop(p, {});
}

template <class T>
View1<T> Gpt<T>::stage_input(int stash) {
  const Stash& s = stash_.at(static_cast<size_t>(stash));
  return s.res.front();
}
template <class T>
View1<const T> Gpt<T>::stage_output(int stash) const {
  const Stash& s = stash_.at(static_cast<size_t>(stash));
  return View1<const T>(s.res.back().data(), static_cast<size_t>(static_cast<std::int64_t>(s.B) * s.seq * C_));
}
template <class T>
View1<T> Gpt<T>::output_grad() {
  return dres_;
}
template <class T>
View1<const T> Gpt<T>::input_grad() const {
  return View1<const T>(dres_.data(), dres_.extent(0));
}

template <class T>
View2<const T> Gpt<T>::logits(int stash) const {
  const Stash& s = stash_.at(static_cast<size_t>(stash));
  return as_matrix<const T>(s.logits.data(), static_cast<std::int64_t>(s.B) * s.seq, Vp_);
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace trident
