// model/block.hpp: the seam between the transformer executor (model/gpt.hpp) and a model family's
// block -- what one transformer block computes, forward and backward, and which activations it
// keeps. The executor owns everything else: the units and their acquisition (ZeRO), stashes,
// pipeline stage boundaries, activation checkpointing, the embedding and the head.
//
// Layer: model. A family (model/family.hpp) implements Block<T> in its own folder
// (model/gpt2/, model/llama/); the executor calls it through this interface only.
// Invariants: forward and backward are functions of (parameters, input, env) only -- the executor
// recomputes a block's forward during backward with activation checkpointing and relies on
// bitwise the same saved values; dropout masks are keyed by global indices (env.key()).
#pragma once

#include "core/config.hpp"
#include "core/types.hpp"
#include "kernels/attention.hpp"
#include "kernels/convert.hpp"
#include "kernels/dropout.hpp"
#include "kernels/gemm.hpp"
#include "kernels/linear.hpp"
#include "model/param_layout.hpp"
#include "parallel/communicator.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

namespace trident {

/// Per-call randomness and mode of a forward pass.
struct ForwardContext {
  std::uint64_t seed = 0;           ///< run seed (dropout masks)
  std::uint32_t step = 0;           ///< optimizer step (dropout masks change every step)
  std::uint64_t sample_offset = 0;  ///< global index of the micro-batch's first sequence
  bool train = false;               ///< dropout on (when model dropout > 0)
};

/// Dropout sites: 8 per block (keyed by the global block index); the embedding's is site(n_layer, 0).
constexpr std::uint32_t kSiteAttn = 0, kSiteAttnResid = 1, kSiteMlpResid = 2;
inline std::uint32_t dropout_site(int layer, std::uint32_t kind) { return static_cast<std::uint32_t>(layer) * 8u + kind; }

/// What a block may use from the executor for one micro-batch. dres and dln are (B*T, C) buffers
/// of the executor: on entry to backward dres holds the gradient of the block's output, and the
/// block must leave the gradient of its input there; dln is free scratch.
template <class T>
struct BlockEnv {
  const ModelConfig* m = nullptr;
  Communicator* tp = nullptr;  ///< tensor-parallel group (nullptr or size 1: none)
  int tp_size = 1, tp_rank = 0;
  GemmInputs gemm = GemmInputs::native;
  /// The activations Block::gemm_only_saved lists are stored in bf16 (gemm is then bf16 and T
  /// float): the block writes and reads them through mat16()/sub16().
  bool saved_bf16 = false;
  int B = 0, seq = 0;          ///< micro-batch shape
  ForwardContext ctx;
  AttentionScratch<T> attn;
  const std::vector<View1<T>>* scratch = nullptr;  ///< the block's scratch (Block::scratch_sizes order)
  View1<T> dres, dln;

  std::int64_t rows() const { return static_cast<std::int64_t>(B) * seq; }
  /// Sum over the tp group in place (Megatron's g operator); no-op without tp. Collective over tp.
  void tp_sum(View1<T> x) const {
    if (tp_size > 1) tp->all_reduce(x.data(), x.extent(0));
  }
  /// The dropout key of a site, element index ((sample_offset + b) * T + t) * C + c: layout-free.
  DropoutKey key(std::uint32_t site) const {
    DropoutKey k;
    k.seed = ctx.seed;
    k.site = site;
    k.step = ctx.step;
    k.p = (ctx.train && m->dropout > 0.0) ? m->dropout : 0.0;
    k.offset = ctx.sample_offset * static_cast<std::uint64_t>(seq) * static_cast<std::uint64_t>(m->n_embd);
    return k;
  }
  /// The attention-dropout key of global block `layer` for this rank's NHl query heads.
  AttentionDropout attention_dropout(int layer, int local_heads) const {
    AttentionDropout a;
    a.sample_offset = ctx.sample_offset;
    a.n_head_total = m->n_head;
    a.head_offset = tp_rank * local_heads;
    a.key = key(dropout_site(layer, kSiteAttn));
    return a;
  }
  /// Attention forward with the deck's kernel ([model] attention, kernels/attention.hpp): `att`
  /// receives the probabilities (gemm, B*NHl*T*T) or each row's log-sum-exp (fused, B*NHl*T).
  /// out (rows, NHl*HS), qkv this rank's packed [q | k | v]. Local.
  void attention_fwd(View2<T> out, View1<T> att, View2<const T> qkv, int NHl, const AttentionDropout& drop,
                     int NKVl = 0) const {
    if (m->attention == AttentionKernel::fused)
      attention_forward_fused<T>(out, att, qkv, B, seq, NHl, drop, attn, gemm, NKVl);
    else
      attention_forward<T>(out, att, qkv, B, seq, NHl, drop, attn, gemm, NKVl);
  }
  /// Its backward: dpre is the GEMM kernel's (T, T) scratch (unused by the fused one). Local.
  void attention_bwd(View2<T> dqkv, View1<T> dpre, View2<const T> dout, View2<const T> qkv, View1<const T> att,
                     int NHl, const AttentionDropout& drop, int NKVl = 0) const {
    if (m->attention == AttentionKernel::fused)
      attention_backward_fused<T>(dqkv, dout, qkv, att, B, seq, NHl, drop, attn, gemm, NKVl);
    else
      attention_backward<T>(dqkv, dpre, dout, qkv, att, B, seq, NHl, drop, attn, gemm, NKVl);
  }
  /// (rows, cols) matrix over the first rows * cols elements of v.
  View2<T> mat(const View1<T>& v, std::int64_t cols) const { return as_matrix(v.data(), rows(), cols); }
  /// The first rows * width elements of v.
  View1<T> sub(const View1<T>& v, std::int64_t width) const { return View1<T>(v.data(), static_cast<size_t>(rows() * width)); }
  /// A saved activation stored in bf16 (saved_bf16): its first rows * cols bf16 values as a
  /// (rows, cols) matrix, and flat.
  View2<bf16_t> mat16(const View1<T>& v, std::int64_t cols) const {
    return as_matrix(reinterpret_cast<bf16_t*>(v.data()), rows(), cols);
  }
  View1<bf16_t> sub16(const View1<T>& v, std::int64_t width) const {
    return View1<bf16_t>(reinterpret_cast<bf16_t*>(v.data()), static_cast<size_t>(rows() * width));
  }
  /// Whether the Block::gemm_only_saved activations are stored in bf16 here (float only).
  bool stored_bf16() const { return std::is_same_v<T, float> && saved_bf16; }
  /// Where the producer of gemm-only saved activation `saved` writes: `scratch` (a free float
  /// buffer of the same width) when it is stored in bf16, then keep_rounded() rounds it into
  /// `saved`; else `saved` itself, and keep_rounded() does nothing. Local.
  View1<T> produce_into(const View1<T>& saved, const View1<T>& scratch) const {
    return stored_bf16() ? scratch : saved;
  }
  /// After the producer wrote `scratch` (produce_into): rounds its first rows * width values into
  /// `saved`'s bf16 storage when stored_bf16(); else nothing (the producer wrote `saved`). Local.
  void keep_rounded(const View1<T>& saved, const View1<T>& scratch, std::int64_t width) const {
    if (stored_bf16()) convert_to_bf16<T>(sub16(saved, width), View1<const T>(scratch.data(), rows() * width));
  }
  /// A linear layer (kernels/linear.hpp) whose input is the saved activation `in` of `cols`
  /// features, float or (stored_bf16()) bf16; GEMM inputs as `gemm`. Local.
  void linear_forward_saved(View2<T> out, const View1<T>& in, std::int64_t cols, View2<const T> w,
                            View1<const T> b) const {
    if constexpr (std::is_same_v<T, float>)
      if (saved_bf16) return linear_forward_bf16(out, mat16(in, cols), w, b);
    linear_forward<T>(out, mat(in, cols), w, b, gemm);
  }
  /// Its backward: dinp = dout W (overwritten; empty to skip), dw += dout^T in, db += column sums. Local.
  void linear_backward_saved(View2<T> dinp, View2<T> dw, View1<T> db, View2<const T> dout, const View1<T>& in,
                             std::int64_t cols, View2<const T> w) const {
    if constexpr (std::is_same_v<T, float>)
      if (saved_bf16) return linear_backward_bf16(dinp, dw, db, dout, mat16(in, cols), w, /*accumulate_dinp=*/false);
    linear_backward<T>(dinp, dw, db, dout, mat(in, cols), w, /*accumulate_dinp=*/false, gemm);
  }
};

/// Elements of A and B together in the largest GEMM of a linear layer (kernels/linear.hpp) over
/// BT rows, `in` -> `out` features: forward (inp, W), dinp (dout, W) or dW (dout^T, inp). Local.
inline std::int64_t linear_gemm_operands(std::int64_t BT, std::int64_t in, std::int64_t out) {
  return std::max(out * in + BT * std::max(in, out), BT * (in + out));
}

/// The same for attention (kernels/attention.hpp) with `att` probabilities: with bf16 inputs its
/// GEMMs take every operand in bf16 as written by its producer (q, k, v and dY packed into the
/// attention scratch) and stage nothing, but the probabilities and dS are written into a
/// GemmBf16Room of `att` elements lent from the same scratch; 0 for the fused kernel (no GEMM).
/// Local.
inline std::int64_t attention_gemm_operands(const ModelConfig& m, std::int64_t att) {
  if (m.attention == AttentionKernel::fused) return 0;
  return att;
}

/// One family's transformer block on one rank (its tp partition): the kernels of forward and
/// backward and the sizes of what they keep. One object serves every block of a stage.
template <class T>
class Block {
 public:
  virtual ~Block() = default;
  /// Elements of each activation one block keeps for backward, for `BT` rows and `att` attention
  /// probabilities (B * NHl * T * T). Local.
  virtual std::vector<std::int64_t> saved_sizes(std::int64_t BT, std::int64_t att) const = 0;
  /// Per entry of saved_sizes(): true where the block reads that activation only as the input of
  /// linear layers (forward and the weight gradient), never in float arithmetic. With bf16 GEMM
  /// inputs the executor stores those in bf16 (half the elements of T, rounded up) and sets
  /// BlockEnv::saved_bf16; the block then writes them rounded (kernels/layernorm.hpp,
  /// kernels/gelu.hpp, or BlockEnv::produce_into/keep_rounded) and reads them through
  /// BlockEnv::linear_forward_saved/linear_backward_saved, whose GEMMs take them as they are: the
  /// same bits the GEMMs would otherwise round from float, with half the memory and no rounding
  /// pass in backward. Empty: none. Local.
  virtual std::vector<bool> gemm_only_saved() const { return {}; }
  /// Elements of each scratch buffer the blocks share (BlockEnv::scratch), same arguments. Local.
  virtual std::vector<std::int64_t> scratch_sizes(std::int64_t BT, std::int64_t att) const = 0;
  /// The most elements that A and B of one GEMM of a block hold together (forward or backward),
  /// same arguments: what the bf16 input scratch of kernels/gemm.hpp grows to (GemmInputs::bf16).
  /// Local.
  virtual std::int64_t gemm_operand_elements(std::int64_t BT, std::int64_t att) const = 0;
  /// Forward of local block `local_layer`: y = block(x), both (B*T, C); keeps its activations in
  /// `saved`. `params`: base of the block's unit (tensors at their layout offsets minus the unit's).
  /// Collective over env.tp.
  virtual void forward(const BlockEnv<T>& env, int local_layer, const T* params, const std::vector<View1<T>>& saved,
                       View1<const T> x, View1<T> y) = 0;
  /// Backward: env.dres holds dL/dy on entry and dL/dx on exit; adds parameter gradients to the
  /// unit at `grads`. Reads `saved` as forward left it. Collective over env.tp.
  virtual void backward(const BlockEnv<T>& env, int local_layer, const T* params, T* grads,
                        const std::vector<View1<T>>& saved, View1<const T> x) = 0;
};

}  // namespace trident
