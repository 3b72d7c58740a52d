// model/param_layout.hpp: where every parameter tensor lives in the flat parameter buffer.
//
// Layer: model. Local (pure bookkeeping, no allocation).
// The parameters of a model are one flat buffer; each tensor is a contiguous range of it, and
// consecutive tensors are grouped into *sharding units* (the embedding, each transformer block,
// the final LayerNorm), each a contiguous range too. This is what FSDP-style sharding slices
// (a dp shard is a slice of a unit) and what a checkpoint indexes (DESIGN-NOTES.md).
//
// Tensor names, shapes and the [q|k|v] order of c_attn follow nanoGPT's model.py, so a checkpoint
// maps onto a PyTorch GPT without renaming. Each tensor records how tensor parallelism would
// split it (Megatron-LM, Shoeybi et al. 2019, sec. 3): split_dim -1 = replicated over tp, 0 =
// column-parallel rows / vocab-parallel, 1 = row-parallel columns; split_groups = 3 for c_attn,
// whose dim 0 holds three blocks (q, k, v) that are each split over tp.
#pragma once

#include "core/config.hpp"
#include "core/types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

enum class InitKind { normal, zeros, ones };

struct TensorSpec {
  std::string name;                  ///< nanoGPT name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<std::int64_t> shape;   ///< global shape (PyTorch order, row-major)
  std::int64_t offset = 0;           ///< first element in the flat buffer
  std::int64_t numel = 0;
  int unit = 0;                      ///< index of its sharding unit
  bool decay = false;                ///< AdamW weight decay applies (2-D weights and embeddings)
  InitKind init = InitKind::zeros;
  double init_std = 0.0;             ///< for InitKind::normal
  int split_dim = -1;                ///< tensor-parallel split dimension, -1 = replicated
  int split_groups = 1;              ///< blocks of split_dim that are split separately (3 for qkv)
};

struct UnitSpec {
  std::string name;        ///< "embed", "h.0", ..., "head"
  std::int64_t offset = 0; ///< first element in the flat buffer
  std::int64_t numel = 0;
  int first_tensor = 0;    ///< tensors [first_tensor, first_tensor + n_tensors) belong to it
  int n_tensors = 0;
};

class ParamLayout {
 public:
  /// Layout of the full GPT-2 model for `m` (vocab_size must be resolved, > 0).
  /// Tensor order: wte, wpe; per block ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj
  /// (biases only when m.bias); ln_f. Units: "embed" (wte, wpe), then groups of `unit_blocks`
  /// blocks ("h.0" for one block, "h.0-1" for two, ...), then "head" (ln_f); unit_blocks = 0 makes
  /// the whole model one unit "model". Tensor offsets do not depend on unit_blocks.
  /// Init as GPT-2: N(0, 0.02), the residual projections c_proj N(0, 0.02 / sqrt(2 n_layer))
  /// (Radford et al. 2019, sec. 2.3).
  static ParamLayout gpt(const ModelConfig& m, int unit_blocks = 1);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const std::vector<UnitSpec>& units() const { return units_; }
  std::int64_t numel() const { return numel_; }
  /// Index of the tensor called `name`, or -1.
  int find(const std::string& name) const;
  /// Unit holding tensor `name` (which must exist).
  int unit_of(const std::string& name) const { return tensors_[static_cast<size_t>(at(name))].unit; }
  /// Index of `name`; throws trident::Error if absent.
  int at(const std::string& name) const;

 private:
  void begin_unit(const std::string& name);
  void add(const std::string& name, std::vector<std::int64_t> shape, bool decay, InitKind init, double std_,
           int split_dim, int split_groups = 1);

  std::vector<TensorSpec> tensors_;
  std::vector<UnitSpec> units_;
  std::int64_t numel_ = 0;
};

/// Writes elements [begin, begin + dst.extent(0)) of tensor t's initial value into dst: a pure
/// function of (seed, t.name, element index), so any piece of a tensor can be initialised alone
/// (a ZeRO-3 shard never materialises the whole tensor). Local.
template <class T>
void init_tensor_range(View1<T> dst, const TensorSpec& t, std::int64_t begin, std::uint64_t seed);

/// Model FLOPs per token for one forward + backward, for MFU: 6 N + 12 L C T, where N counts
/// every parameter except the position embedding (Chowdhery et al. 2022, "PaLM", appendix B;
/// the estimate nanoGPT's estimate_mfu uses).
double flops_per_token(const ModelConfig& m);

}  // namespace trident
