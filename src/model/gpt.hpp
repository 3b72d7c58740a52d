// model/gpt.hpp: the GPT-2 network (Radford et al. 2019; nanoGPT's model.py) with a hand-written
// forward and backward over Kokkos kernels.
//
// Layer: model. Local (tensor/pipeline parallel versions add their collectives here later).
// Structure: token + position embedding, dropout; n_layer pre-LayerNorm blocks
//   x = x + dropout(c_proj(attention(c_attn(ln_1(x)))));  x = x + dropout(mlp.c_proj(gelu(mlp.c_fc(ln_2(x)))))
// final LayerNorm; logits = ln_f(x) wte^T (LM head tied to the token embedding); cross entropy.
//
// Invariants: the model owns only activations and scratch, sized once for (max_B, max_T) at
// construction. Parameters and gradients are passed in as GptWeights views, bound to any flat
// buffer with the ParamLayout's offsets: the parameter store, or a gathered FSDP unit.
#pragma once

#include "core/config.hpp"
#include "core/memory.hpp"
#include "core/types.hpp"
#include "kernels/attention.hpp"
#include "kernels/dropout.hpp"
#include "model/param_layout.hpp"

#include <cstdint>
#include <vector>

namespace trident {

/// Views of one transformer block's tensors. Bias views are empty when the model has no biases.
template <class T>
struct BlockWeights {
  View1<T> ln1_w, ln1_b;
  View2<T> attn_w;  ///< (3C, C)
  View1<T> attn_b;  ///< (3C)
  View2<T> proj_w;  ///< (C, C)
  View1<T> proj_b;
  View1<T> ln2_w, ln2_b;
  View2<T> fc_w;    ///< (4C, C)
  View1<T> fc_b;
  View2<T> fcp_w;   ///< (C, 4C)
  View1<T> fcp_b;
};

/// Views of every tensor of the model.
template <class T>
struct GptWeights {
  View2<T> wte;  ///< (V, C)
  View2<T> wpe;  ///< (block_size, C)
  std::vector<BlockWeights<T>> h;
  View1<T> lnf_w, lnf_b;
};

/// Binds the views of every tensor of `layout` to the flat buffer starting at `base`
/// (parameters or gradients alike). Local.
template <class T>
GptWeights<T> bind_weights(T* base, const ParamLayout& layout, const ModelConfig& m);

/// Per-call randomness and mode of a forward pass.
struct ForwardContext {
  std::uint64_t seed = 0;           ///< run seed (dropout masks)
  std::uint32_t step = 0;           ///< optimizer step (dropout masks change every step)
  std::uint64_t sample_offset = 0;  ///< global index of the micro-batch's first sequence
  bool train = false;               ///< dropout on (when model dropout > 0)
};

template <class T>
class Gpt {
 public:
  /// Allocates activations for micro-batches of up to max_B sequences of up to max_T tokens.
  Gpt(const ModelConfig& m, const ParamLayout& layout, int max_B, int max_T);

  /// Forward pass over tokens (B*T) with targets (B*T; a target < 0 carries no loss, and an empty
  /// targets view skips the loss entirely). Returns the sum of the token losses (natural log).
  /// Saves the activations backward() needs. Local. Requires B <= max_B, T <= max_T.
  double forward(const GptWeights<T>& w, View1<const token_t> tokens, View1<const token_t> targets, int B, int seq_len,
                 const ForwardContext& ctx);

  /// Backward of the last forward(): adds d(objective)/d(parameter) to `g`, where the objective is
  /// dloss * sum of token losses (dloss = 1 / tokens in the global batch gives the mean). Local.
  void backward(const GptWeights<T>& w, const GptWeights<T>& g, T dloss);

  /// Logits (B*T, V) of the last forward() (before backward(), which overwrites them).
  View2<const T> logits() const;

  /// Bytes of activations and scratch held by this model.
  std::int64_t activation_bytes() const { return acts_.bytes(); }

 private:
  struct LayerActs {  // views into acts_ for one block
    View1<T> ln1, ln1_mean, ln1_rstd, qkv, att, atty, res_mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  View2<T> mat(const View1<T>& v, std::int64_t cols, std::int64_t rows) const;
  DropoutKey key(std::uint32_t site) const;

  ModelConfig m_;
  int max_B_, max_T_;
  TrackedBuffer<T> acts_;
  std::vector<View1<T>> res_;  // residual stream x_0 .. x_L, each (B*T, C)
  std::vector<LayerActs> layers_;
  View1<T> lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, proj_;
  View1<T> dres_, dln_, datty_, dqkv_, dfch_, dpre_, dproj_;
  AttentionScratch<T> attn_ws_;
  // state of the last forward
  int B_ = 0, T_ = 0;
  ForwardContext ctx_;
  View1<const token_t> tokens_, targets_;
};

}  // namespace trident
