// train/optimizer.hpp: AdamW over one contiguous range of the flat parameter buffer.
//
// Layer: train. Local (the gradient must already be reduced over dp).
// The owned range is [begin, end) of the flat buffer: the whole buffer when the optimizer state is
// replicated (ZeRO stage 0), this rank's dp shard when it is sharded. Weight decay applies per
// tensor (TensorSpec::decay: 2-D weights and embeddings, never LayerNorm gains or biases, as
// nanoGPT's configure_optimizers), also where a range boundary cuts through a tensor.
// Invariants: exp_avg and exp_avg_sq have end - begin elements, element i belonging to flat
// element begin + i; step_count() is the number of updates applied (PyTorch's state["step"]).
#pragma once

#include "core/config.hpp"
#include "core/memory.hpp"
#include "model/param_layout.hpp"

namespace trident {

template <class T>
class AdamW {
 public:
  AdamW(const ParamLayout& layout, std::int64_t begin, std::int64_t end, const TrainConfig& cfg);

  /// One update of params[begin, end) from grads[begin, end) (flat views of the whole buffer) with
  /// learning rate lr; grads are multiplied by grad_scale first (clipping). Local.
  void step(View1<T> params, View1<const T> grads, double lr, double grad_scale);

  std::int64_t begin() const { return begin_; }
  std::int64_t end() const { return end_; }
  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t s) { step_count_ = s; }
  const TrackedBuffer<T>& exp_avg() const { return exp_avg_; }
  const TrackedBuffer<T>& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  struct Range {
    std::int64_t offset, count;  // flat offset and length
    bool decay;
  };
  std::vector<Range> ranges_;
  std::int64_t begin_, end_;
  double beta1_, beta2_, eps_, weight_decay_;
  std::int64_t step_count_ = 0;
  TrackedBuffer<T> exp_avg_, exp_avg_sq_;
};

}  // namespace trident
