// model/gpt.hpp: the GPT-2 network (Radford et al. 2019; nanoGPT's model.py) with a hand-written
// forward and backward over Kokkos kernels, executed one sharding unit at a time.
//
// Layer: model. Local: all communication happens inside the UnitProvider (ZeRO/FSDP engine).
// Structure: token + position embedding, dropout; n_layer pre-LayerNorm blocks
//   x = x + dropout(c_proj(attention(c_attn(ln_1(x)))));  x = x + dropout(mlp.c_proj(gelu(mlp.c_fc(ln_2(x)))))
// final LayerNorm; logits = ln_f(x) wte^T (LM head tied to the token embedding); cross entropy.
//
// Execution: the network is a sequence of *segments* (embedding, block 0 .. block L-1, head).
// Before a segment runs, the units holding its parameters are acquired from the provider; after
// it, units the next segment does not need are released (ZeRO-3 frees them). In backward, a
// unit's gradient is reported complete (grads_done) after the last segment that adds to it, so
// the provider can start reducing it while earlier units compute (ZeRO-2/3 overlap).
// The tied embedding makes the "embed" unit needed by the head too: its parameters are acquired
// twice per forward, and its gradient is complete only after the embedding's backward.
//
// Invariants: the model owns only activations and scratch, sized once for (max_B, max_T);
// parameters and gradients are flat unit buffers from the provider, laid out as the ParamLayout
// says (tensor at unit base + tensor.offset - unit.offset). With activation checkpointing on, only
// the input of each block is kept; the block's forward is recomputed during backward, with the
// same kernels and dropout keys, so results are bitwise identical to keeping everything.
#pragma once

#include "core/config.hpp"
#include "core/memory.hpp"
#include "core/types.hpp"
#include "kernels/attention.hpp"
#include "kernels/dropout.hpp"
#include "model/param_layout.hpp"

#include <array>
#include <cstdint>
#include <vector>

namespace trident {

/// The order in which a pass will acquire units (for prefetching).
enum class Pass { forward, backward };

/// Where the model finds each unit's parameters and gradient buffer. Implemented by the flat
/// single-buffer provider below and by the ZeRO engine (train/zero.hpp).
template <class T>
class UnitProvider {
 public:
  virtual ~UnitProvider() = default;
  /// A pass starts; `order` lists the units it will acquire, in order.
  virtual void begin_pass(Pass pass, const std::vector<int>& order) {}
  /// Full (unsharded) parameters of `unit` in the compute type, valid until release(unit).
  virtual const T* acquire(int unit) = 0;
  virtual void release(int unit) = 0;
  /// Gradient buffer of `unit` (its full size); backward adds to it.
  virtual T* grads(int unit) = 0;
  /// No segment of this backward will add to `unit`'s gradient any more.
  virtual void grads_done(int unit) {}
  /// Called between kernels so non-blocking communication can progress.
  virtual void progress() {}
};

/// Provider over one flat parameter buffer and one flat gradient buffer (replicated parameters,
/// tests, sampling). Local.
template <class T>
class FlatProvider final : public UnitProvider<T> {
 public:
  FlatProvider(const ParamLayout& layout, const T* params, T* grads) : layout_(layout), p_(params), g_(grads) {}
  const T* acquire(int unit) override { return p_ + layout_.units()[static_cast<size_t>(unit)].offset; }
  void release(int) override {}
  T* grads(int unit) override { return g_ + layout_.units()[static_cast<size_t>(unit)].offset; }

 private:
  const ParamLayout& layout_;
  const T* p_;
  T* g_;
};

/// Per-call randomness and mode of a forward pass.
struct ForwardContext {
  std::uint64_t seed = 0;           ///< run seed (dropout masks)
  std::uint32_t step = 0;           ///< optimizer step (dropout masks change every step)
  std::uint64_t sample_offset = 0;  ///< global index of the micro-batch's first sequence
  bool train = false;               ///< dropout on (when model dropout > 0)
};

/// Which units each segment needs: segment 0 = embedding, 1..L = blocks, L+1 = head.
struct GptSchedule {
  std::vector<std::vector<int>> fwd_params;  ///< units whose parameters a segment's forward reads
  std::vector<std::vector<int>> bwd_params;  ///< ... its backward reads (the embedding needs none)
  std::vector<std::vector<int>> grads;       ///< units whose gradients its backward writes
  std::vector<int> last_grad_segment;        ///< per unit: the backward segment that completes its gradient
  std::vector<int> forward_order;            ///< units in the order a forward acquires them
  std::vector<int> backward_order;           ///< ... a backward (after a training forward) acquires them
  static GptSchedule make(const ParamLayout& layout, const ModelConfig& m);
};

template <class T>
class Gpt {
 public:
  /// Allocates activations for micro-batches of up to max_B sequences of up to max_T tokens.
  /// recompute: activation checkpointing per block.
  Gpt(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T, bool recompute = false);

  /// Forward pass over tokens (B*T) with targets (B*T; a target < 0 carries no loss, and an empty
  /// targets view skips the loss entirely). Returns the sum of the token losses (natural log).
  /// With for_backward, the head's units stay acquired for backward(). Local (the provider may
  /// communicate). Requires B <= max_B, T <= max_T.
  double forward(UnitProvider<T>& p, View1<const token_t> tokens, View1<const token_t> targets, int B, int seq_len,
                 const ForwardContext& ctx, bool for_backward = true);

  /// Backward of the last forward(for_backward = true): adds d(objective)/d(parameter) to the
  /// provider's gradient buffers, where the objective is dloss * sum of token losses (dloss =
  /// 1 / tokens in the global batch gives the mean). Local (the provider may communicate).
  void backward(UnitProvider<T>& p, T dloss);

  /// Logits (B*T, V) of the last forward() (before backward(), which overwrites them).
  View2<const T> logits() const;

  const GptSchedule& schedule() const { return sched_; }
  /// Bytes of activations and scratch held by this model.
  std::int64_t activation_bytes() const { return acts_.bytes(); }
  /// Elements of activation and scratch storage a Gpt(m, ..., max_B, max_T, recompute) allocates.
  static std::int64_t activation_elements(const ModelConfig& m, int max_B, int max_T, bool recompute);

 private:
  struct LayerActs {  // views into acts_ for one block
    View1<T> ln1, ln1_mean, ln1_rstd, qkv, att, atty, res_mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  struct BlockW {
    View1<T> ln1_w, ln1_b;
    View2<T> attn_w;
    View1<T> attn_b;
    View2<T> proj_w;
    View1<T> proj_b;
    View1<T> ln2_w, ln2_b;
    View2<T> fc_w;
    View1<T> fc_b;
    View2<T> fcp_w;
    View1<T> fcp_b;
  };
  View1<T> vec(const T* unit_base, int tensor) const;
  View2<T> mat2(const T* unit_base, int tensor) const;
  BlockW block_weights(const T* unit_base, int layer) const;
  DropoutKey key(std::uint32_t site) const;
  LayerActs& acts(int layer) { return layers_[recompute_ ? 0 : static_cast<size_t>(layer)]; }
  void block_forward(int l, const BlockW& w);
  void block_backward(int l, const BlockW& w, const BlockW& g);
  /// Acquires what `need` lists and is not held yet.
  void hold(UnitProvider<T>& p, const std::vector<int>& need);
  /// Releases held units not in `keep`.
  void drop(UnitProvider<T>& p, const std::vector<int>& keep);

  ModelConfig m_;
  const ParamLayout& layout_;
  GptSchedule sched_;
  int max_B_, max_T_;
  bool recompute_;
  TrackedBuffer<T> acts_;
  std::vector<View1<T>> res_;  // residual stream x_0 .. x_L, each (B*T, C)
  std::vector<LayerActs> layers_;
  View1<T> lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, proj_;
  View1<T> dres_, dln_, datty_, dqkv_, dfch_, dpre_, dproj_;
  AttentionScratch<T> attn_ws_;
  // tensor indices
  int t_wte_, t_wpe_, t_lnf_w_, t_lnf_b_;
  std::vector<std::array<int, 12>> t_block_;
  // state of the last forward
  int B_ = 0, T_ = 0;
  ForwardContext ctx_;
  View1<const token_t> tokens_, targets_;
  std::vector<const T*> held_;  // per unit: acquired parameter base, or nullptr
};

}  // namespace trident
