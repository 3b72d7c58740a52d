// model/param_store.hpp: the flat parameter and gradient buffers of one rank, with named views.
//
// Layer: model. Local.
// Invariants: params and grads have layout().numel() elements each and share the layout's
// offsets, so a tensor, a sharding unit or a dp shard is the same range in both. Initialisation
// is a pure function of (seed, tensor name, element index): any rank, at any layout, produces
// the same values (docs/design.md, "Randomness keyed by global indices").
#pragma once

#include "core/memory.hpp"
#include "model/param_layout.hpp"

namespace trident {

template <class T>
class ParamStore {
 public:
  explicit ParamStore(const ParamLayout& layout);

  const ParamLayout& layout() const { return layout_; }
  const TrackedBuffer<T>& params() const { return params_; }
  const TrackedBuffer<T>& grads() const { return grads_; }
  /// View of tensor i's parameters / gradients.
  View1<T> param(int i) const;
  View1<T> grad(int i) const;

  /// GPT-2 initialisation: N(0, init_std) from Philox keyed by (seed, FNV hash of the name) at the
  /// element's index, ones for LayerNorm gains, zeros for biases. Local.
  void initialize(std::uint64_t seed);
  /// grads = 0. Local.
  void zero_grads();

 private:
  ParamLayout layout_;
  TrackedBuffer<T> params_;
  TrackedBuffer<T> grads_;
};

}  // namespace trident
