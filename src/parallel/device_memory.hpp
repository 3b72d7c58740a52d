// parallel/device_memory.hpp: where a buffer handed to a communicator lives, and copies between host
// and CUDA device memory.
//
// Layer: parallel. The one place both communicator backends ask about memory: the NCCL backend
// stages host buffers through the device, the MPI backend stages device buffers through the host
// (docs/design.md, "Collectives"). No CUDA type appears here.
// Invariants: the CUDA runtime is called only when the build links it (TRIDENT_HAVE_NCCL, or a
// Kokkos with the CUDA backend) *and* this process sees a CUDA device; otherwise every buffer is
// host memory, and these functions cost a cached flag test.
#pragma once

#include <cstddef>
#include <string>

namespace trident {

/// Kinds of memory a communicator may be handed. `host` covers pageable, pinned and registered
/// host memory; `managed` is CUDA unified memory (cudaMallocManaged, Kokkos::CudaUVMSpace).
enum class MemoryKind { host, device, managed };

/// True when this build links the CUDA runtime and this process sees at least one CUDA device, i.e.
/// when a buffer can be device memory at all. Asked once per process (cudaGetDeviceCount), then
/// cached. Local.
bool device_memory_possible();

/// Where `p` lives (cudaPointerGetAttributes). Host memory, without a CUDA call, when
/// device_memory_possible() is false or `p` is null. For device memory, `*device` (when given) is
/// the CUDA device that holds it. Throws trident::Error when the CUDA runtime fails to answer. Local.
MemoryKind memory_kind(const void* p, int* device = nullptr);

/// The PCI bus id of this thread's current CUDA device ("0000:3b:00.0"), which names one GPU across
/// processes whatever CUDA_VISIBLE_DEVICES says; empty when device_memory_possible() is false.
/// Throws trident::Error when the CUDA runtime fails to answer. Local.
std::string current_device_bus_id();

/// Copies `bytes` from `src` to `dst`, each host, device or managed memory (cudaMemcpy with
/// cudaMemcpyDefault; memcpy when both are host memory). Returns when `dst` holds the data as far as
/// the host and later work on any blocking CUDA stream are concerned: the copy runs on the legacy
/// default stream, so it starts after the work already enqueued on blocking streams (Kokkos' CUDA
/// instance is one) and later work there starts after it. Throws trident::Error naming `what` when
/// CUDA fails. Local.
void copy_memory(void* dst, const void* src, std::size_t bytes, const char* what);

/// Page-locks `bytes` of host memory at `p` (cudaHostRegister) so that copies between it and the
/// device run at full PCIe/NVLink-C2C rate and may be asynchronous. An optimisation only: returns
/// false, changing nothing, when device_memory_possible() is false or the driver refuses (e.g. the
/// locked-memory limit); true when `p` must later be passed to unpin_host_memory. Local.
bool pin_host_memory(void* p, std::size_t bytes);

/// Undoes a successful pin_host_memory(p) (cudaHostUnregister). Local, no throw.
void unpin_host_memory(void* p) noexcept;

}  // namespace trident
