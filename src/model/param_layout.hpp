// model/param_layout.hpp: which parameter tensors this rank holds, their shapes, and where each
// lives in the rank's flat parameter buffer. The tensors themselves are a model family's choice
// (model/family.hpp: model/gpt2/, model/llama/); this is the bookkeeping they share.
//
// Layer: model. Local (pure bookkeeping, no allocation).
// A rank holds the tensors of its pipeline stage (embedding on the first stage, its blocks, the
// final LayerNorm and a copy of the tied embedding on the last), each cut to its tensor-parallel
// partition (Megatron-LM, Shoeybi et al. 2019, sec. 3): split_dim 0 = column-parallel rows (QKV and
// MLP-up, whose heads/columns are divided over tp) or vocab-parallel rows (wte); split_dim 1 =
// row-parallel columns (attention and MLP output projections); -1 = replicated over tp (LayerNorms,
// row-parallel biases, wpe). split_groups = 3 for c_attn: its dim 0 holds [q | k | v], each block
// split over tp separately, so a tp rank gets whole heads of q, k and v.
//
// The tensors are one flat buffer; each tensor is a contiguous range, and consecutive tensors form
// *sharding units* (what ZeRO slices and gathers). Tensor names and global shapes follow nanoGPT's
// model.py, so a checkpoint maps onto a PyTorch GPT without renaming.
//
// Invariants: all split dimensions divide by tp except the vocabulary, whose partitions are
// ceil(V / tp) rows with the padding at the end of the last partitions (zero, never trained, never
// checkpointed); initial values are a pure function of (seed, name, global element index), so any
// layout initialises the same model.
#pragma once

#include "core/config.hpp"
#include "core/tp_partition.hpp"
#include "core/types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

enum class InitKind { normal, zeros, ones };

/// This rank's part of the model: its tensor-parallel partition and its pipeline stage's blocks.
struct ModelPart {
  int tp_size = 1, tp_rank = 0;
  int pp_size = 1, pp_rank = 0;
  int first_layer = 0;  ///< first block of this stage
  int n_layers = -1;    ///< blocks of this stage (-1: all)
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
  /// The part of rank (tp_rank, pp_rank): blocks split over stages as `pp_layers` says (comma
  /// separated counts), or as evenly as possible with the earlier stages taking the remainder.
  /// Throws ConfigError if pp_layers does not list pp positive counts summing to n_layer.
  static ModelPart make(const ModelConfig& m, const ParallelConfig& p, int tp_rank, int pp_rank);
};

struct TensorSpec {
  std::string name;                       ///< the family's name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<std::int64_t> global_shape; ///< shape of the whole tensor (PyTorch order, row-major)
  std::vector<std::int64_t> shape;        ///< shape of this rank's tp partition (vocab partitions padded)
  std::int64_t offset = 0;                ///< first element in the flat buffer
  std::int64_t numel = 0;                 ///< elements of the local partition (padding included)
  std::int64_t valid = 0;                 ///< leading elements of the partition that are real (numel but for vocab padding)
  int unit = 0;                           ///< index of its sharding unit
  bool decay = false;                     ///< AdamW weight decay applies (2-D weights and embeddings)
  InitKind init = InitKind::zeros;
  double init_std = 0.0;                  ///< for InitKind::normal
  int split_dim = -1;                     ///< tensor-parallel split dimension, -1 = replicated
  int split_groups = 1;                   ///< blocks of split_dim that are split separately (3 for qkv)
  bool tied_copy = false;                 ///< the last stage's copy of wte (pp > 1)
  bool canonical = true;                  ///< this rank's copy counts: written to checkpoints and to the norm
};

struct UnitSpec {
  std::string name;        ///< "embed", "h.0", ..., "head" ("wte", "wpe" with pp > 1)
  std::int64_t offset = 0; ///< first element in the flat buffer
  std::int64_t numel = 0;
  int first_tensor = 0;    ///< tensors [first_tensor, first_tensor + n_tensors) belong to it
  int n_tensors = 0;
};

class ParamLayout {
 public:
  /// Layout of this rank's part of the model `m` (vocab_size resolved, > 0) of any family
  /// ([model] arch): the family's build_layout (model/family.hpp). Throws Error for an unresolved
  /// vocabulary.
  static ParamLayout make(const ModelConfig& m, int unit_blocks = 1, const ModelPart& part = ModelPart{});

  /// The gpt2 family's layout (model/gpt2/gpt2.cpp builds it). Tensor
  /// order: wte, wpe (first stage); per block ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
  /// mlp.c_proj (biases only when m.bias); ln_f, and the tied wte copy (last stage, pp > 1).
  /// Units: "embed" (wte, wpe) -- or "wte" and "wpe" with pp > 1, so the tied copies have equal
  /// units on both stages --, groups of `unit_blocks` blocks ("h.0", "h.2-3", ...), "head" (ln_f)
  /// and "wte" (the copy); unit_blocks = 0 puts everything but separate wte units in one unit.
  /// Init as GPT-2: N(0, 0.02), the residual projections c_proj N(0, 0.02 / sqrt(2 n_layer))
  /// (Radford et al. 2019, sec. 2.3).


  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const std::vector<UnitSpec>& units() const { return units_; }
  std::int64_t numel() const { return numel_; }
  const ModelPart& part() const { return part_; }
  /// Index of the tensor called `name`, or -1. (The tied copy shares its name; find() returns the
  /// first, i.e. the first stage's on a single-stage layout.)
  int find(const std::string& name) const;
  /// Index of `name`; throws trident::Error if absent.
  int at(const std::string& name) const;
  /// Unit holding tensor `name` (which must exist).
  int unit_of(const std::string& name) const { return tensors_[static_cast<size_t>(at(name))].unit; }
  /// Unit holding the tied token embedding on this stage (its first stage's original or its last
  /// stage's copy) when the embedding is tied across pipeline stages (pp > 1), else -1.
  int tied_unit() const;
  /// Index of the first tensor of local block `local_layer`.
  int block_tensor(int local_layer) const { return block_first_.at(static_cast<size_t>(local_layer)); }

  // ---- for the families' layout builders (model/family.hpp) ------------------------------------
  /// Starts a sharding unit; the tensors added next belong to it. `alone`: no block or head joins
  /// it when they group into one "model" unit (unit_blocks = 0): an embedding with its tied copy on
  /// another stage, whose units must have equal pieces.
  void begin_unit(const std::string& name, bool alone = false);
  /// Appends a tensor of global `shape` to the current unit, cut to this rank's tp partition.
  void add(const std::string& name, std::vector<std::int64_t> shape, bool decay, InitKind init, double std_,
           int split_dim, int split_groups = 1, bool tied_copy = false);
  /// The next tensors are those of global block `layer` (call before its first add). Starts the
  /// block's sharding unit as [parallel] unit_blocks groups them: every unit_blocks blocks of the
  /// stage a unit named unit_prefix + "i" (or "i-j"); with 0 one unit "model", which the block joins
  /// unless there is none yet or the current one stays alone.
  void begin_block(int layer, int unit_blocks, const std::string& unit_prefix);
  /// Starts the head's unit ("head"), or with unit_blocks = 0 joins "model" as a block would.
  void begin_head(int unit_blocks);
  /// Names the token embedding tied across stages (its last-stage copy added with tied_copy).
  void set_tied_embedding(const std::string& name) { tied_name_ = name; }

 private:

  std::vector<TensorSpec> tensors_;
  std::vector<UnitSpec> units_;
  std::int64_t numel_ = 0;
  ModelPart part_;
  std::vector<int> block_first_;
  bool current_alone_ = false;  // the current unit was begun alone (begin_unit)
  std::string tied_name_;
};

/// Tensor `tensor` as a flat view inside the buffer of its unit that starts at `unit_base`
/// (an acquired unit or its gradient); empty for tensor < 0 (an absent bias). Local.
template <class T>
View1<T> unit_tensor(const ParamLayout& L, const T* unit_base, int tensor) {
  if (tensor < 0) return View1<T>();
  const TensorSpec& t = L.tensors()[static_cast<size_t>(tensor)];
  T* base = const_cast<T*>(unit_base) + (t.offset - L.units()[static_cast<size_t>(t.unit)].offset);
  return View1<T>(base, static_cast<size_t>(t.numel));
}
/// The same for a 2-D tensor, as its (rows, cols) local partition.
template <class T>
View2<T> unit_matrix(const ParamLayout& L, const T* unit_base, int tensor) {
  const TensorSpec& t = L.tensors()[static_cast<size_t>(tensor)];
  T* base = const_cast<T*>(unit_base) + (t.offset - L.units()[static_cast<size_t>(t.unit)].offset);
  return as_matrix(base, t.shape[0], t.shape[1]);
}
/// `rows` x `cols` rows starting at tensor `tensor`: several row-split tensors that follow one
/// another in a unit (llama's q/k/v or gate/up projections) read as one matrix. Local.
template <class T>
View2<T> unit_rows(const ParamLayout& L, const T* unit_base, int tensor, std::int64_t rows, std::int64_t cols) {
  const TensorSpec& t = L.tensors()[static_cast<size_t>(tensor)];
  T* base = const_cast<T*>(unit_base) + (t.offset - L.units()[static_cast<size_t>(t.unit)].offset);
  return as_matrix(base, rows, cols);
}

/// Writes the initial value of tensor t's local tp partition into dst (t.numel elements): real
/// elements from their global indices, padding zero. Local.
template <class T>
void init_tensor(View1<T> dst, const TensorSpec& t, int tp_size, int tp_rank, std::uint64_t seed);

/// Writes elements [begin, begin + dst.extent(0)) of tensor t's local partition (any sub-range: a ZeRO
/// shard never materialises the whole tensor). Local.
template <class T>
void init_tensor_range(View1<T> dst, const TensorSpec& t, std::int64_t begin, int tp_size, int tp_rank,
                       std::uint64_t seed);


}  // namespace trident
