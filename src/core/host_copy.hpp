// core/host_copy.hpp: the explicit transfers between host memory and the device views every
// kernel works on (core/types.hpp).
//
// Layer: core (std + Kokkos only). In a CUDA build MemSpace is device memory, so host code must never
// read or write view.data()[i] or view(i) of a View1/View2/Buffer: it goes through these functions
// (or Kokkos::create_mirror_view + deep_copy). On a host build they are plain copies between host
// buffers, so host results are unchanged.
#pragma once

#include "core/types.hpp"

#include <type_traits>
#include <vector>

namespace trident {

/// Host copy of the elements of a device view. Local; waits for the copy.
template <class T>
std::vector<std::remove_const_t<T>> to_host_vector(const View1<T>& v) {
  std::vector<std::remove_const_t<T>> out(v.extent(0));
  Kokkos::deep_copy(Kokkos::View<std::remove_const_t<T>*, HostSpace, Unmanaged>(out.data(), out.size()), v);
  return out;
}

/// dst[i] = src[i] for the dst.extent(0) host elements at src. Local; waits for the copy.
template <class T>
void copy_to_device(const View1<T>& dst, const T* src) {
  Kokkos::deep_copy(dst, Kokkos::View<const T*, HostSpace, Unmanaged>(src, dst.extent(0)));
}

}  // namespace trident
