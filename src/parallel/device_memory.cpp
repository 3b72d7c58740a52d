// parallel/device_memory.cpp: memory kinds and copies (see device_memory.hpp). The CUDA runtime's
// host API only, no kernels. Kokkos_Macros.hpp says whether Kokkos has the CUDA backend.
#include "parallel/device_memory.hpp"

#include "core/error.hpp"

#include <Kokkos_Macros.hpp>

#include <cstring>
#include <string>

#if TRIDENT_HAVE_NCCL || defined(KOKKOS_ENABLE_CUDA)
#define TRIDENT_CUDA_RUNTIME 1
#include <cuda_runtime.h>
#else
#define TRIDENT_CUDA_RUNTIME 0
#endif

namespace trident {

#if TRIDENT_CUDA_RUNTIME

namespace {
void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw Error(what + " failed: " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
}
}  // namespace

bool device_memory_possible() {
  static const bool possible = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {  // no driver, no device: every buffer is host memory
      (void)cudaGetLastError();
      return false;
    }
    return n > 0;
  }();
  return possible;
}

MemoryKind memory_kind(const void* p, int* device) {
  if (p == nullptr || !device_memory_possible()) return MemoryKind::host;
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e == cudaErrorInvalidValue) {  // CUDA < 11 says this of pageable host memory
    (void)cudaGetLastError();
    return MemoryKind::host;
  }
  check(e, "cudaPointerGetAttributes");
  if (a.type == cudaMemoryTypeManaged) return MemoryKind::managed;
  if (a.type != cudaMemoryTypeDevice) return MemoryKind::host;
  if (device != nullptr) *device = a.device;
  return MemoryKind::device;
}

std::string current_device_bus_id() {
  if (!device_memory_possible()) return "";
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  char bus[64] = {};
  check(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "cudaDeviceGetPCIBusId");
  return bus;
}

void copy_memory(void* dst, const void* src, std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  if (!device_memory_possible()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), std::string("cudaMemcpy (") + what + ")");
}

bool pin_host_memory(void* p, std::size_t bytes) {
  if (p == nullptr || bytes == 0 || !device_memory_possible()) return false;
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    (void)cudaGetLastError();  // pageable memory still works, only slower
    return false;
  }
  return true;
}

void unpin_host_memory(void* p) noexcept {
  if (p != nullptr && cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

#else  // a build without the CUDA runtime: there is no device memory

bool device_memory_possible() { return false; }

MemoryKind memory_kind(const void*, int*) { return MemoryKind::host; }

std::string current_device_bus_id() { return ""; }

void copy_memory(void* dst, const void* src, std::size_t bytes, const char*) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

bool pin_host_memory(void*, std::size_t) { return false; }

void unpin_host_memory(void*) noexcept {}

#endif

}  // namespace trident
