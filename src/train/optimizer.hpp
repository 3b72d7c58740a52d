// train/optimizer.hpp: AdamW over the pieces of the flat parameter buffer a rank owns.
//
// Layer: train. Local (the gradient must already be reduced over dp).
// A piece is `count` consecutive elements of the flat buffer starting at flat_offset, stored at
// local_offset of the caller's *local* arrays (master weights, gradient, and this optimizer's
// moments). Replicated optimizer state (ZeRO-0) uses one piece per unit with local = flat offsets;
// sharded state (ZeRO-1/2/3) uses this rank's piece of every unit, packed with padding. Weight
// decay applies per tensor (TensorSpec::decay: 2-D weights and embeddings, never LayerNorm gains or
// biases, as nanoGPT's configure_optimizers), also where a piece boundary cuts through a tensor.
// Padding elements of the local arrays belong to no piece and are never read or written.
// Invariants: step_count() is the number of updates applied (PyTorch's state["step"]).
#pragma once

#include "core/config.hpp"
#include "core/memory.hpp"
#include "model/param_layout.hpp"

#include <vector>

namespace trident {

struct AdamWStep;  // kernels/adamw.hpp (kept out of this header: it includes Kokkos)

/// `count` elements of the flat buffer from flat_offset, kept at local_offset of local arrays.
struct Piece {
  std::int64_t flat_offset = 0;
  std::int64_t count = 0;
  std::int64_t local_offset = 0;
};

template <class T>
class AdamW {
 public:
  /// Moments for a local array of local_size elements covering `pieces`. With resident = false
  /// the moments are not allocated: they live elsewhere (an offload file, offload/offload_file.hpp)
  /// and every update passes them in (begin_step + update).
  AdamW(const ParamLayout& layout, const std::vector<Piece>& pieces, std::int64_t local_size, const TrainConfig& cfg,
        bool resident = true);

  /// One update of the master weights from the gradient (both local arrays) with learning rate lr;
  /// the gradient is multiplied by grad_scale first (clipping). Local.
  void step(T* master, const T* grads, double lr, double grad_scale);

  /// The streamed form of step() (ZeRO-Infinity, Rajbhandari et al. 2021, sec. 6.2: the update runs
  /// on one unit's state at a time): begin_step() once, then update() for each stretch of local
  /// offsets [local_begin, local_end). master, grads, m, v point at local offset `base` (elements
  /// below it are never touched). The same elementwise arithmetic as step(), so a step done in
  /// stretches is bitwise the step done at once. Local.
  void begin_step() { ++step_count_; }
  void update(std::int64_t local_begin, std::int64_t local_end, std::int64_t base, T* master, const T* grads, T* m,
              T* v, double lr, double grad_scale) const;
  /// update() with every pointer in host memory, run on the host (offload_optimizer = host in a
  /// GPU build: ZeRO-Offload, Ren et al. 2021, sec. 4, the update where the state lives). Bitwise
  /// update()'s result (kernels/adamw.hpp). Local.
  void update_host(std::int64_t local_begin, std::int64_t local_end, std::int64_t base, T* master, const T* grads,
                   T* m, T* v, double lr, double grad_scale) const;

  std::int64_t step_count() const { return step_count_; }
  void set_step_count(std::int64_t s) { step_count_ = s; }
  const TrackedBuffer<T>& exp_avg() const { return exp_avg_; }
  const TrackedBuffer<T>& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  struct Range {
    std::int64_t local_offset, count;
    bool decay;
  };
  /// The step's scalars (weight_decay is set per range). Local.
  AdamWStep step_params(double lr, double grad_scale) const;
  // apply(first local offset, count, step) for each decay range's part of [local_begin, local_end).
  template <class Apply>
  void for_ranges(std::int64_t local_begin, std::int64_t local_end, double lr, double grad_scale,
                  const Apply& apply) const;
  std::vector<Range> ranges_;
  double beta1_, beta2_, eps_, weight_decay_;
  std::int64_t step_count_ = 0;
  TrackedBuffer<T> exp_avg_, exp_avg_sq_;
};

}  // namespace trident
