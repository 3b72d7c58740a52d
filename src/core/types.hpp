// core/types.hpp: the View aliases every kernel and model class is written against.
//
// Layer: core (std + Kokkos only).
// Invariants: all tensors are row-major (Kokkos::LayoutRight), like PyTorch, so a (B, T, C)
// activation is a (B*T, C) matrix without a copy and GEMMs map onto BLAS/cuBLAS directly.
// Kernels take *unmanaged* views: they never own memory, which is allocated once by the model,
// the parameter store or the optimizer (docs/design.md, Layers: kernels do no long-lived allocation).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace trident {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;

/// Non-owning 1-D view of `n` elements.
template <class T>
using View1 = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace, Unmanaged>;
/// Non-owning row-major 2-D view (rows, cols).
template <class T>
using View2 = Kokkos::View<T**, Kokkos::LayoutRight, MemSpace, Unmanaged>;
/// Owning 1-D allocation (the only kind of long-lived buffer Trident creates).
template <class T>
using Buffer = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace>;

/// Token ids are int32 everywhere in memory (files may hold uint16).
using token_t = std::int32_t;

/// Unmanaged 1-D view of elements [offset, offset + n) of an owning buffer.
template <class T>
View1<T> slice(const Buffer<T>& buf, std::int64_t offset, std::int64_t n) {
  return View1<T>(buf.data() + offset, static_cast<size_t>(n));
}
/// Unmanaged (rows, cols) row-major view over a contiguous range starting at `ptr`.
template <class T>
View2<T> as_matrix(T* ptr, std::int64_t rows, std::int64_t cols) {
  return View2<T>(ptr, static_cast<size_t>(rows), static_cast<size_t>(cols));
}

}  // namespace trident
