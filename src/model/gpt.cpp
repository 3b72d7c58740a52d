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
#include "kernels/rmsnorm.hpp"

#include <algorithm>
#include <type_traits>

namespace trident {

namespace {
std::vector<int> uniq(std::vector<int> v) {
  std::vector<int> out;
  for (int u : v)
    if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
  return out;
}
bool contains(const std::vector<int>& v, int u) { return std::find(v.begin(), v.end(), u) != v.end(); }

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
  d.Cl = m.n_embd / tp;  // this rank's query heads * HS (n_embd = n_head * HS)
  // The saved attention state per block: every head's (T, T) probabilities, or (fused kernel) one
  // log-sum-exp per query row.
  d.att = static_cast<std::int64_t>(max_B) * (m.n_head / tp) * max_T *
          (m.attention == AttentionKernel::fused ? 1 : max_T);
  d.n_local = layout.part().n_layers;
  d.head = layout.part().last_stage();
  // The vocabulary partition: rows of the LM head on the last stage, of the token embedding on the
  // first (an untied head lives on the last stage only).
  const ModelFamily& f = family_of(m.arch);
  int w = layout.find(f.head_weight(m));
  if (w < 0) w = layout.find(f.token_embedding);
  d.Vp = w >= 0 ? layout.tensors()[static_cast<size_t>(w)].shape[0] : 0;
  return d;
}

/// Sizes of every activation buffer of a Gpt in elements of T, in allocation order (one place for
/// the constructor and for memory planning): per stash the residual stream, each block's saved
/// activations and the head's; the recompute set; the executor's scratch (dres, dln, attention),
/// then the block's. With saved_bf16 a block's gemm_only_saved activations of n bf16 values take
/// (n + 1) / 2 elements (T = float).
std::vector<std::int64_t> activation_plan(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T,
                                          bool recompute, int stashes, bool saved_bf16) {
  const Dims d = dims(m, layout, max_B, max_T);
  const std::int64_t BT = d.BT, C = d.C, Cl = d.Cl;
  const bool fused = m.attention == AttentionKernel::fused;
  const auto block = family_of(m.arch).make_block<float>(m, layout);
  std::vector<std::int64_t> layer = block->saved_sizes(BT, d.att);
  if (saved_bf16) {  // GEMM-only activations in bf16: half as many float elements, rounded up
    const std::vector<bool> only = block->gemm_only_saved();
    for (size_t i = 0; i < only.size() && i < layer.size(); ++i)
      if (only[i]) layer[i] = (layer[i] + 1) / 2;
  }
  std::vector<std::int64_t> plan;
  for (int s = 0; s < stashes; ++s) {
    for (int l = 0; l <= d.n_local; ++l) plan.push_back(BT * C);  // residual stream
    if (!recompute)
      for (int l = 0; l < d.n_local; ++l) plan.insert(plan.end(), layer.begin(), layer.end());
    if (d.head) plan.insert(plan.end(), {BT * C, BT, BT, BT * d.Vp, BT, BT, 2 * BT});  // lnf .. ce stats
  }
  if (recompute) plan.insert(plan.end(), layer.begin(), layer.end());
  plan.insert(plan.end(), {BT * C, BT * C,                                          // dres, dln
                           BT * Cl, BT * Cl, BT * Cl, BT * Cl, BT * Cl, BT * Cl, BT * Cl,  // attention q k v y dq dk dv
                           m.dropout > 0.0 && !fused ? d.att : 0,                   // attention pdrop
                           fused ? 2 * BT * Cl + 2 * d.att : 0});                   // fused: K^T, V^T, two rows
  const std::vector<std::int64_t> scratch = block->scratch_sizes(BT, d.att);
  plan.insert(plan.end(), scratch.begin(), scratch.end());
  return plan;
}
}  // namespace

GptSchedule GptSchedule::make(const ParamLayout& layout, const ModelConfig& m) {
  GptSchedule s;
  const ModelPart& part = layout.part();
  s.has_embed = part.first_stage();
  s.has_head = part.last_stage();
  const ModelFamily& f = family_of(m.arch);
  auto unit = [&](const std::string& name) { return layout.unit_of(name); };
  if (s.has_embed) {
    std::vector<int> e = {unit(f.token_embedding)};
    if (f.position_embedding != nullptr) e.push_back(unit(f.position_embedding));
    e = uniq(e);
    s.fwd_params.push_back(e);
    s.bwd_params.push_back({});
    s.grads.push_back(e);
    s.layers.push_back(-1);
  }
  for (int l = part.first_layer; l < part.first_layer + part.n_layers; ++l) {
    const int b = unit(f.block_tensor(l));
    s.fwd_params.push_back({b});
    s.bwd_params.push_back({b});
    s.grads.push_back({b});
    s.layers.push_back(l);
  }
  if (s.has_head) {
    const auto h = uniq({unit(f.final_norm_weight), unit(f.head_weight(m))});
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
  return s;
}

template <class T>
std::int64_t Gpt<T>::activation_elements(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T,
                                         bool recompute, int stashes, GemmInputs gemm) {
  std::int64_t n = 0;
  const bool saved_bf16 = std::is_same_v<T, float> && gemm == GemmInputs::bf16;
  for (auto e : activation_plan(m, layout, max_B, max_T, recompute, stashes, saved_bf16)) n += e;
  return n;
}

template <class T>
std::int64_t Gpt<T>::gemm_operand_elements(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T) {
  const Dims d = dims(m, layout, max_B, max_T);
  std::int64_t n = d.n_local > 0 ? family_of(m.arch).make_block<T>(m, layout)->gemm_operand_elements(d.BT, d.att) : 0;
  if (d.head) n = std::max(n, linear_gemm_operands(d.BT, d.C, d.Vp));
  return n;
}

template <class T>
Gpt<T>::Gpt(const ModelConfig& m, const ParamLayout& layout, Communicator* tp_comm, int max_B, int max_T,
            bool recompute, int stashes, GemmInputs gemm)
    : m_(m),
      layout_(layout),
      family_(family_of(m.arch)),
      sched_(GptSchedule::make(layout, m)),
      block_(family_of(m.arch).make_block<T>(m, layout)),
      tp_(tp_comm),
      tp_size_(layout.part().tp_size),
      tp_rank_(layout.part().tp_rank),
      max_B_(max_B),
      max_T_(max_T),
      recompute_(recompute),
      gemm_(gemm),
      saved_bf16_(std::is_same_v<T, float> && gemm == GemmInputs::bf16) {
  if (max_T > m.block_size) throw Error("Gpt: max_T exceeds block_size");
  if (tp_size_ > 1 && (tp_comm == nullptr || tp_comm->size() != tp_size_))
    throw Error("Gpt: the tensor-parallel communicator does not match the layout's tp size");
  if (stashes < 1) throw Error("Gpt: at least one activation stash");
  const Dims d = dims(m, layout, max_B, max_T);
  C_ = static_cast<int>(d.C);
  n_local_ = d.n_local;
  Vp_ = static_cast<int>(d.Vp);
  vocab_start_ = tp_rank_ * Vp_;
  vocab_rows_ = std::max(0, std::min(m.vocab_size, vocab_start_ + Vp_) - vocab_start_);

  const auto sizes = activation_plan(m, layout, max_B, max_T, recompute, stashes, saved_bf16_);
  const size_t n_saved = block_->saved_sizes(d.BT, d.att).size();
  const size_t n_scratch = block_->scratch_sizes(d.BT, d.att).size();
  stash_.resize(static_cast<size_t>(stashes));
  std::vector<View1<T>*> views;
  auto layer_views = [&views, n_saved](std::vector<View1<T>>& l) {
    l.resize(n_saved);
    for (auto& v : l) views.push_back(&v);
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
  views.insert(views.end(), {&dres_, &dln_, &attn_ws_.q, &attn_ws_.k, &attn_ws_.v, &attn_ws_.y, &attn_ws_.dq,
                             &attn_ws_.dk, &attn_ws_.dv, &attn_ws_.pdrop, &attn_ws_.fused});
  block_scratch_.resize(n_scratch);
  for (auto& v : block_scratch_) views.push_back(&v);
  std::int64_t total = 0;
  for (auto e : sizes) total += e;
  acts_ = TrackedBuffer<T>("trident::Gpt::activations", total, MemCategory::activations);
  std::int64_t off = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    *views[i] = acts_.slice(off, sizes[i]);
    off += sizes[i];
  }
  t_wte_ = layout.find(family_.token_embedding);
  t_wpe_ = family_.position_embedding != nullptr ? layout.find(family_.position_embedding) : -1;
  t_lnf_w_ = layout.find(family_.final_norm_weight);
  t_lnf_b_ = family_.final_norm_bias != nullptr ? layout.find(family_.final_norm_bias) : -1;
  t_head_ = layout.find(family_.head_weight(m));
  held_.assign(layout.units().size(), nullptr);
}

template <class T>
BlockEnv<T> Gpt<T>::env(const Stash& s) const {
  BlockEnv<T> e;
  e.m = &m_;
  e.tp = tp_;
  e.tp_size = tp_size_;
  e.tp_rank = tp_rank_;
  e.gemm = gemm_;
  e.saved_bf16 = saved_bf16_;
  e.B = s.B;
  e.seq = s.seq;
  e.ctx = s.ctx;
  e.attn = attn_ws_;
  e.scratch = &block_scratch_;
  e.dres = dres_;
  e.dln = dln_;
  return e;
}

template <class T>
void Gpt<T>::set_gemm_inputs(GemmInputs inputs) {
  if (saved_bf16_ && inputs != GemmInputs::bf16)
    throw Error("Gpt: this model stores its GEMM-only activations in bf16 (constructed with bf16 GEMM inputs); "
                "native GEMM inputs need a model constructed with them");
  gemm_ = inputs;
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
  const BlockEnv<T> e = env(s);
  const auto& fp = sched_.fwd_params;
  const int S = static_cast<int>(fp.size());
  drop(p, {});  // a forward without backward may have left the head held
  p.begin_pass(Pass::forward, sched_.forward_order);
  int mod = 0;
  if (sched_.has_embed) {
    hold(p, fp[0]);
    const TensorSpec& wte = layout_.tensors()[static_cast<size_t>(t_wte_)];
    const T* Eb = held_[static_cast<size_t>(wte.unit)];
    // Vocab-parallel: each tp rank embeds its vocabulary rows (zero elsewhere) and tp rank 0 adds
    // the position embedding; the sum over tp is then exactly wte[token] + wpe[t] everywhere.
    View2<const T> pos;
    if (t_wpe_ >= 0 && tp_rank_ == 0)
      pos = unit_matrix(layout_, held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_wpe_)].unit)], t_wpe_);
    embedding_forward<T>(e.mat(s.res[0], C), tokens, unit_matrix(layout_, Eb, t_wte_), vocab_start_, vocab_rows_, pos, B,
                         seq_len);
    e.tp_sum(e.sub(s.res[0], C));
    dropout_apply<T>(e.sub(s.res[0], C), e.key(dropout_site(m_.n_layer, 0)));
    drop(p, mod + 1 < S ? fp[static_cast<size_t>(mod + 1)] : std::vector<int>{});
    ++mod;
  }
  for (int ll = 0; ll < n_local_; ++ll, ++mod) {
    hold(p, fp[static_cast<size_t>(mod)]);
    block_->forward(e, ll, held_[static_cast<size_t>(fp[static_cast<size_t>(mod)][0])], acts(s, ll),
                    View1<const T>(s.res[static_cast<size_t>(ll)].data(), static_cast<size_t>(BT * C)),
                    s.res[static_cast<size_t>(ll + 1)]);
    const bool keep_for_head = mod + 1 < S;
    drop(p, keep_for_head ? fp[static_cast<size_t>(mod + 1)] : std::vector<int>{});
    p.progress();
  }
  if (!sched_.has_head) return 0.0;
  hold(p, fp[static_cast<size_t>(mod)]);
  const T* Hb = held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_lnf_w_)].unit)];
  const T* Wb = held_[static_cast<size_t>(layout_.tensors()[static_cast<size_t>(t_head_)].unit)];
  if (family_.final_norm == NormKind::rmsnorm)
    rmsnorm_forward<T>(e.mat(s.lnf, C), s.lnf_rstd, e.mat(s.res[static_cast<size_t>(n_local_)], C),
                       unit_tensor(layout_, Hb, t_lnf_w_), m_.norm_eps);
  else
    layernorm_forward<T>(e.mat(s.lnf, C), s.lnf_mean, s.lnf_rstd, e.mat(s.res[static_cast<size_t>(n_local_)], C),
                         unit_tensor(layout_, Hb, t_lnf_w_), unit_tensor(layout_, Hb, t_lnf_b_));
  linear_forward<T>(e.mat(s.logits, Vp_), e.mat(s.lnf, C), unit_matrix(layout_, Wb, t_head_), View1<const T>(), gemm_);
  double loss = 0.0;
  if (targets.extent(0) > 0) {
    // Vocab-parallel cross entropy: global row max, then sums of exp and the target logit.
    View1<T> rmax = e.sub(s.row_max, 1), sumexp(s.stats.data(), static_cast<size_t>(BT)),
             tlogit(s.stats.data() + BT, static_cast<size_t>(BT));
    cross_entropy_row_max<T>(rmax, e.mat(s.logits, Vp_), vocab_rows_);
    if (tp_size_ > 1) tp_->all_reduce(rmax.data(), rmax.data(), rmax.extent(0), dtype_of<T>(), ReduceOp::max);
    cross_entropy_partials<T>(sumexp, tlogit, e.mat(s.logits, Vp_), rmax, targets, vocab_start_, vocab_rows_);
    e.tp_sum(View1<T>(s.stats.data(), static_cast<size_t>(2 * BT)));
    loss = cross_entropy_losses<T>(e.sub(s.losses, 1), sumexp, rmax, tlogit, targets);
  }
  drop(p, for_backward ? fp[static_cast<size_t>(mod)] : std::vector<int>{});
  return loss;
}

template <class T>
void Gpt<T>::backward(UnitProvider<T>& p, T dloss, int stash) {
  Stash& s = stash_.at(static_cast<size_t>(stash));
  if (sched_.has_head && s.targets.extent(0) == 0) throw Error("Gpt::backward: the last forward computed no loss");
  const std::int64_t BT = static_cast<std::int64_t>(s.B) * s.seq, C = C_;
  const BlockEnv<T> e = env(s);
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
    const int uW = layout_.tensors()[static_cast<size_t>(t_head_)].unit, uH = layout_.tensors()[static_cast<size_t>(t_lnf_w_)].unit;
    const T* Wb = held_[static_cast<size_t>(uW)];
    const T* Hb = held_[static_cast<size_t>(uH)];
    T* gW = p.grads(uW);
    T* gH = p.grads(uH);
    View1<const T> rmax(s.row_max.data(), static_cast<size_t>(BT)), sumexp(s.stats.data(), static_cast<size_t>(BT));
    cross_entropy_backward_split<T>(e.mat(s.logits, Vp_), e.mat(s.logits, Vp_), rmax, sumexp, s.targets, vocab_start_,
                                    vocab_rows_, dloss);
    linear_backward<T>(e.mat(dln_, C), unit_matrix(layout_, gW, t_head_), View1<T>(), e.mat(s.logits, Vp_), e.mat(s.lnf, C),
                       unit_matrix(layout_, Wb, t_head_), /*accumulate_dinp=*/false, gemm_);
    e.tp_sum(e.sub(dln_, C));
    fill<T>(e.sub(dres_, C), T(0));
    if (family_.final_norm == NormKind::rmsnorm)
      rmsnorm_backward<T>(e.mat(dres_, C), unit_tensor(layout_, gH, t_lnf_w_), e.mat(dln_, C),
                          e.mat(s.res[static_cast<size_t>(n_local_)], C), unit_tensor(layout_, Hb, t_lnf_w_), s.lnf_rstd);
    else
      layernorm_backward<T>(e.mat(dres_, C), unit_tensor(layout_, gH, t_lnf_w_), unit_tensor(layout_, gH, t_lnf_b_),
                            e.mat(dln_, C), e.mat(s.res[static_cast<size_t>(n_local_)], C), unit_tensor(layout_, Hb, t_lnf_w_),
                            s.lnf_mean, s.lnf_rstd);
    done(mod);
    drop(p, mod > 0 ? bp[static_cast<size_t>(mod - 1)] : std::vector<int>{});
    --mod;
  }
  for (int ll = n_local_ - 1; ll >= 0; --ll, --mod) {
    const auto& need = bp[static_cast<size_t>(mod)];
    hold(p, need);
    const T* w = held_[static_cast<size_t>(need[0])];
    const View1<const T> x(s.res[static_cast<size_t>(ll)].data(), static_cast<size_t>(BT * C));
    // Same kernels, same dropout keys: bitwise the saved values.
    if (recompute_) block_->forward(e, ll, w, acts(s, ll), x, s.res[static_cast<size_t>(ll + 1)]);
    block_->backward(e, ll, w, p.grads(need[0]), acts(s, ll), x);
    done(mod);
    drop(p, mod > 0 ? bp[static_cast<size_t>(mod - 1)] : std::vector<int>{});
    p.progress();
  }
  if (sched_.has_embed) {
    dropout_apply<T>(e.sub(dres_, C), e.key(dropout_site(m_.n_layer, 0)));
    const TensorSpec& wte = layout_.tensors()[static_cast<size_t>(t_wte_)];
    T* gE = p.grads(wte.unit);
    View2<T> dpos;
    if (t_wpe_ >= 0) dpos = unit_matrix(layout_, p.grads(layout_.tensors()[static_cast<size_t>(t_wpe_)].unit), t_wpe_);
    embedding_backward<T>(unit_matrix(layout_, gE, t_wte_), dpos, e.mat(dres_, C), s.tokens, vocab_start_, vocab_rows_,
                          s.B, s.seq);
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
