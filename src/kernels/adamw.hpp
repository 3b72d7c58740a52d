// kernels/adamw.hpp: the AdamW update of one contiguous range of parameters
// (Loshchilov & Hutter 2019, "Decoupled weight decay regularization", Algorithm 2), in the form
// of PyTorch's torch.optim.AdamW (single-tensor path).
//
// Layer: kernels. Local. Shapes: param, grad, exp_avg, exp_avg_sq all flat with equal extents.
//
// One element's arithmetic (adamw_element) serves two entry points: adamw_update on Kokkos' default
// execution space (the device in a CUDA build) and adamw_update_host on the host, for the optimizer
// step of offload_optimizer = host (ZeRO-Offload, Ren et al. 2021, sec. 4: the update runs on the
// CPU where the state lives). adamw.cpp is compiled without floating-point contraction (no fused
// multiply-add: -ffp-contract=off for the host compiler, --fmad=false for nvcc), so both are plain
// IEEE-754 operations with a correctly rounded sqrt and division, and give the same bits.
#pragma once

#include "core/types.hpp"

namespace trident {

/// Scalars of one AdamW step for one parameter range.
struct AdamWStep {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< 0 for ranges that are not decayed (biases, LayerNorm)
  std::int64_t step = 1;      ///< 1-based step count t (bias correction)
  double grad_scale = 1.0;    ///< multiplies the gradient first (clipping by global norm)
};

/// p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps), with g = grad * grad_scale.
template <class T>
void adamw_update(View1<T> param, View1<const T> grad, View1<T> exp_avg, View1<T> exp_avg_sq, const AdamWStep& s);

/// Non-owning 1-D view of host memory (pageable or pinned), whatever the default memory space.
template <class T>
using HostView1 = Kokkos::View<T*, Kokkos::LayoutRight, HostSpace, Unmanaged>;

/// The same update with every array in host memory, run on Kokkos' default host execution space
/// (in a host build: the same kernel as adamw_update). Bitwise adamw_update's result. Local.
template <class T>
void adamw_update_host(HostView1<T> param, HostView1<const T> grad, HostView1<T> exp_avg, HostView1<T> exp_avg_sq,
                       const AdamWStep& s);

}  // namespace trident
