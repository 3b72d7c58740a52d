// model/gpt.hpp: the transformer executor -- a decoder-only language model of any registered
// family (model/family.hpp: GPT-2, Llama) with a hand-written forward and backward over Kokkos
// kernels, executed one sharding unit at a time. (Gpt: generative pretrained transformer.)
//
// Layer: model. Data-parallel communication happens inside the UnitProvider (ZeRO/FSDP engine);
// tensor-parallel communication (Megatron-LM, Shoeybi et al. 2019, sec. 3) happens here, over the
// tp communicator: one all-reduce after each row-parallel projection in forward (attention and
// MLP outputs), one after each column-parallel input gradient in backward, a sum for the
// vocab-parallel embedding, and the max / sum statistics of the vocab-parallel cross entropy.
// Pipeline parallelism: a Gpt holds one stage (embedding on the first, its blocks, ln_f and the
// tied head on the last); the trainer moves stage inputs/outputs and their gradients between
// stages, and keeps several micro-batches in flight in *stashes* of activations.
// Structure: token embedding (+ a learned position embedding when the family has one), dropout;
// n_layer blocks of the family (model/block.hpp: the seam; model/gpt2/, model/llama/); the final
// norm (LayerNorm or RMSNorm); logits = norm(x) W^T with W the token embedding (tied) or the LM
// head; cross entropy.
//
// Execution: the network is a sequence of *modules* (embedding, block 0 .. block L-1, head).
// Before a module runs, the units holding its parameters are acquired from the provider; after
// it, units the next module does not need are released (ZeRO-3 frees them). In backward, a
// unit's gradient is reported complete (grads_done) after the last module that adds to it, so
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
#include "kernels/gemm.hpp"
#include "model/block.hpp"
#include "model/family.hpp"
#include "model/param_layout.hpp"
#include "parallel/communicator.hpp"

#include <array>
#include <cstdint>
#include <memory>
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
  /// No module of this backward will add to `unit`'s gradient any more.
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

/// Which units each module of this stage needs. Modules: the embedding (first stage only), the
/// stage's blocks, the head (last stage only).
struct GptSchedule {
  bool has_embed = false, has_head = false;
  std::vector<int> layers;                   ///< global index of each block module's block
  std::vector<std::vector<int>> fwd_params;  ///< units whose parameters a module's forward reads
  std::vector<std::vector<int>> bwd_params;  ///< ... its backward reads (the embedding needs none)
  std::vector<std::vector<int>> grads;       ///< units whose gradients its backward writes
  std::vector<int> last_grad_module;        ///< per unit: the backward module that completes its gradient
  std::vector<int> forward_order;            ///< units in the order a forward acquires them
  std::vector<int> backward_order;           ///< ... a backward (after a training forward) acquires them
  std::vector<int> special_units;            ///< units of the embedding and head modules (not blocks)
  /// The schedule of the units of `layout` (this rank's pipeline stage) for model `m`. Local.
  static GptSchedule make(const ParamLayout& layout, const ModelConfig& m);
};

template <class T>
class Gpt {
 public:
  /// Allocates activations for `stashes` micro-batches in flight of up to max_B sequences of up
  /// to max_T tokens, for the part of the model `layout` describes. tp_comm: the tensor-parallel
  /// group (nullptr or size 1: none). recompute: activation checkpointing per block. gemm: how the
  /// GEMMs treat their inputs (set_gemm_inputs()); with GemmInputs::bf16 and T = float, the
  /// activations a block keeps only as GEMM inputs (Block::gemm_only_saved) are stored in bf16,
  /// half the bytes, and the GEMMs read them without rounding them again (bitwise the same results
  /// as fp32 storage with bf16 GEMM inputs).
  Gpt(const ModelConfig& m, const ParamLayout& layout, Communicator* tp_comm, int max_B, int max_T,
      bool recompute = false, int stashes = 1, GemmInputs gemm = GemmInputs::native);
  /// Single-rank convenience (no tensor parallelism, one stash).
  Gpt(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T, bool recompute = false)
      : Gpt(m, layout, nullptr, max_B, max_T, recompute, 1) {}

  /// Forward pass of this stage over one micro-batch, kept in stash `stash`. The first stage reads
  /// tokens (B*T); other stages read stage_input(stash), which the caller fills first. The last
  /// stage computes the loss against targets (B*T; a target < 0 carries no loss, an empty view
  /// skips the loss) and returns the sum of token losses (natural log); other stages return 0 and
  /// leave stage_output(stash). With for_backward, the head's units stay acquired for backward().
  /// Collective over the tp group (when tp > 1). Requires B <= max_B, T <= max_T.
  double forward(UnitProvider<T>& p, View1<const token_t> tokens, View1<const token_t> targets, int B, int seq_len,
                 const ForwardContext& ctx, bool for_backward = true, int stash = 0);

  /// Backward of the forward kept in `stash`: adds d(objective)/d(parameter) to the provider's
  /// gradient buffers, where the objective is dloss * sum of token losses (dloss = 1 / tokens in
  /// the global batch gives the mean). A non-last stage reads the gradient of its output from
  /// output_grad(), which the caller fills first; a non-first stage leaves the gradient of its
  /// input in input_grad(). Collective over the tp group.
  void backward(UnitProvider<T>& p, T dloss, int stash = 0);

  /// (B*T*C) input of a non-first stage for stash s (the previous stage's output).
  View1<T> stage_input(int stash);
  /// (B*T*C) output of a non-last stage for stash s, valid until the stash is reused.
  View1<const T> stage_output(int stash) const;
  /// (B*T*C) gradient of this stage's output, to fill before backward() on a non-last stage.
  View1<T> output_grad();
  /// (B*T*C) gradient of this stage's input after backward() on a non-first stage (until the next backward).
  View1<const T> input_grad() const;
  /// Last stage: this tp rank's logits (B*T, V_part) of the stash's forward (before its backward,
  /// which overwrites them). With tp = 1 these are all logits.
  View2<const T> logits(int stash = 0) const;

  /// How every GEMM of this model (linears, attention, the tied head) treats its inputs: native,
  /// or bf16 inputs with fp32 accumulation ([train] compute_dtype = bf16; kernels/gemm.hpp). The
  /// element-wise kernels, parameters and gradients stay in T, activations too except those a
  /// constructor with GemmInputs::bf16 stores in bf16. Local. Throws Error for native inputs on a
  /// Gpt that stores activations in bf16 (they no longer hold the float values).
  void set_gemm_inputs(GemmInputs inputs);
  GemmInputs gemm_inputs() const { return gemm_; }

  const GptSchedule& schedule() const { return sched_; }
  int stashes() const { return static_cast<int>(stash_.size()); }
  /// Bytes of activations and scratch held by this model.
  std::int64_t activation_bytes() const { return acts_.bytes(); }
  /// Elements of activation and scratch storage the constructor allocates.
  static std::int64_t activation_elements(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T,
                                          bool recompute, int stashes = 1, GemmInputs gemm = GemmInputs::native);
  /// The most elements A and B of one GEMM of this model part hold together (blocks and LM head),
  /// for micro-batches of up to max_B x max_T: the bf16 input scratch of kernels/gemm.hpp holds
  /// that many bf16 values with [train] compute_dtype = bf16. Local.
  static std::int64_t gemm_operand_elements(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T);

 private:
  struct Stash {  // one micro-batch in flight
    std::vector<View1<T>> res;                  // residual stream at the stage's block boundaries, each (B*T, C)
    std::vector<std::vector<View1<T>>> layers;  // per block: what Block::saved_sizes lists (empty with recompute)
    View1<T> lnf, lnf_mean, lnf_rstd, logits, losses, row_max, stats;  // head (last stage)
    int B = 0, seq = 0;  // micro-batch shape
    ForwardContext ctx;
    View1<const token_t> tokens, targets;
  };
  BlockEnv<T> env(const Stash& s) const;
  const std::vector<View1<T>>& acts(const Stash& s, int local_layer) const {
    return recompute_ ? shared_layer_ : s.layers[static_cast<size_t>(local_layer)];
  }
  void hold(UnitProvider<T>& p, const std::vector<int>& need);
  void drop(UnitProvider<T>& p, const std::vector<int>& keep);

  ModelConfig m_;
  const ParamLayout& layout_;
  const ModelFamily& family_;
  GptSchedule sched_;
  std::unique_ptr<Block<T>> block_;
  Communicator* tp_;
  int tp_size_, tp_rank_;
  int C_, Vp_, vocab_start_, vocab_rows_;  // full width, vocab partition
  int n_local_;
  int max_B_, max_T_;
  bool recompute_;
  TrackedBuffer<T> acts_;
  std::vector<Stash> stash_;
  std::vector<View1<T>> shared_layer_;  // with recompute: the one set of block activations, reused
  std::vector<View1<T>> block_scratch_;
  View1<T> dres_, dln_;
  AttentionScratch<T> attn_ws_;
  int t_wte_, t_wpe_, t_lnf_w_, t_lnf_b_, t_head_;
  std::vector<const T*> held_;  // per unit: acquired parameter base, or nullptr
  GemmInputs gemm_ = GemmInputs::native;
  bool saved_bf16_ = false;  // GEMM-only activations stored in bf16 (constructed with GemmInputs::bf16, T = float)
};

}  // namespace trident
