// core/memory.hpp: long-lived buffers, tracked by category.
//
// Layer: core (std + Kokkos).
// Every long-lived allocation (parameters, gradients, optimizer moments, activations,
// communication buffers, checkpoint host buffers, data) is a TrackedBuffer or a
// TrackedHostAllocator's, so the log can report the per-rank peak by category and a dry run can
// predict it. Kernels never allocate (docs/design.md, Layers).
// Invariants: the ledger's current bytes equal the sum of live tracked allocations of each
// category. The ledger is thread-safe (a background checkpoint writer may release its buffers).
#pragma once

#include "core/types.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace trident {

/// params: the working parameters a rank keeps (all of them, or its shard at ZeRO-3);
/// grads: the gradient a rank keeps (all, or its shard at ZeRO-2/3); optimizer: fp32 master weights
/// and AdamW moments; gathered: unsharded copies of units being computed (ZeRO-3, bf16 casts);
/// activations: saved activations and kernel scratch; comm: communication staging buffers;
/// checkpoint: host memory of saves (an asynchronous save's snapshot, a synchronous save's
/// bounded staging buffer); data: token buffers. The categories before `data` are the ones
/// `trident train --dry-run` predicts.
enum class MemCategory : int {
  params = 0, grads, optimizer, gathered, activations, comm, checkpoint, data, other, count_
};

/// Name of a category as it appears in logs and metrics.csv ("params", "grads", ...).
const char* mem_category_name(MemCategory c);

/// Per-process bytes of tracked buffers, current and peak, by category. Local, thread-safe.
class MemoryLedger {
 public:
  /// Counts `bytes` more in category c, raising c's peak and the total's peak if passed. Local.
  static void add(MemCategory c, std::int64_t bytes);
  /// Counts `bytes` fewer in category c and in the total (unchecked: no error below zero). Local.
  static void sub(MemCategory c, std::int64_t bytes);
  /// Bytes now counted in category c. Local.
  static std::int64_t current(MemCategory c);
  /// Highest current(c) since start-up or the last reset_peaks()/reset_peak(c). Local.
  static std::int64_t peak(MemCategory c);
  /// Bytes now counted over all categories. Local.
  static std::int64_t current_total();
  /// Highest current_total() since start-up or the last reset_peaks() (the peak of the sum, not the
  /// sum of the categories' peaks; reset_peak(c) leaves it). Local.
  static std::int64_t peak_total();
  /// Lowers every peak to the current bytes, so that the next peaks measure one phase (e.g. the
  /// extra memory of one save). Local.
  static void reset_peaks();
  /// Lowers the peak of category c to its current bytes: after a one-off buffer that is not part
  /// of the run (the bf16 GEMM probe's scratch), so the logged peak stays what --dry-run
  /// predicts. Local.
  static void reset_peak(MemCategory c);
};

/// Asks the kernel to back the 2 MiB-aligned interior of host memory [p, p + bytes) with
/// transparent huge pages (madvise MADV_HUGEPAGE; Linux, where THP is in "madvise" mode as on
/// Debian 12), for buffers of at least 4 MiB. First touching a large buffer then takes one page
/// fault per 2 MiB instead of per 4 KiB. With the vectorised fill_normal, the start-up of an
/// 85M-parameter model fell from 13.7 s to 1.7-2.0 s on the project's VM (docs/performance.md). Only a hint: refused or unsupported, the
/// memory stays as it was. Local.
void advise_huge_pages(void* p, std::size_t bytes);

/// A std::allocator that counts what it allocates against category Cat and leaves new elements
/// uninitialised (host buffers that are overwritten right away: zeroing them first would cost as
/// much as the copy). Local.
template <class T, MemCategory Cat>
struct TrackedHostAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = TrackedHostAllocator<U, Cat>;
  };
  TrackedHostAllocator() = default;
  template <class U>
  TrackedHostAllocator(const TrackedHostAllocator<U, Cat>&) {}
  T* allocate(std::size_t n) {
    T* p = std::allocator<T>::allocate(n);
    MemoryLedger::add(Cat, static_cast<std::int64_t>(n * sizeof(T)));
    advise_huge_pages(p, n * sizeof(T));
    return p;
  }
  void deallocate(T* p, std::size_t n) {
    MemoryLedger::sub(Cat, static_cast<std::int64_t>(n * sizeof(T)));
    std::allocator<T>::deallocate(p, n);
  }
  template <class U>
  void construct(U*) noexcept {}  // default-initialisation: nothing for arithmetic types
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const TrackedHostAllocator<U, Cat>&) const { return true; }
  template <class U>
  bool operator!=(const TrackedHostAllocator<U, Cat>&) const { return false; }
};

/// Peak resident set size of this process in bytes (getrusage), 0 where unknown. Local.
std::int64_t peak_rss_bytes();

/// An owning Kokkos buffer whose bytes count against a MemCategory while it lives. Move-only.
template <class T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  /// n elements, zeroed (as a Kokkos View), counted against `cat`. Host memory is advised to huge
  /// pages (advise_huge_pages) before the zeroing touches it.
  TrackedBuffer(const std::string& label, std::int64_t n, MemCategory cat) : buf_(allocate(label, n)), cat_(cat) {
    MemoryLedger::add(cat_, bytes());
  }
  ~TrackedBuffer() { release(); }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  TrackedBuffer(TrackedBuffer&& o) noexcept : buf_(o.buf_), cat_(o.cat_) { o.buf_ = Buffer<T>(); }
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      buf_ = o.buf_;
      cat_ = o.cat_;
      o.buf_ = Buffer<T>();
    }
    return *this;
  }

  std::int64_t size() const { return static_cast<std::int64_t>(buf_.extent(0)); }
  std::int64_t bytes() const { return size() * static_cast<std::int64_t>(sizeof(T)); }
  T* data() const { return buf_.data(); }
  const Buffer<T>& view() const { return buf_; }
  /// Unmanaged view of the whole buffer.
  View1<T> all() const { return View1<T>(buf_.data(), buf_.extent(0)); }
  /// Unmanaged view of [offset, offset + n).
  View1<T> slice(std::int64_t offset, std::int64_t n) const { return trident::slice(buf_, offset, n); }

 private:
  static Buffer<T> allocate(const std::string& label, std::int64_t n) {
    if constexpr (std::is_same_v<typename Buffer<T>::memory_space, Kokkos::HostSpace> &&
                  std::is_trivially_copyable_v<T>) {
      Buffer<T> b(Kokkos::view_alloc(label, Kokkos::WithoutInitializing), static_cast<size_t>(n));
      const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
      advise_huge_pages(b.data(), bytes);
      if (bytes > 0) std::memset(static_cast<void*>(b.data()), 0, bytes);  // a View's zero initialisation
      return b;
    } else {
      return Buffer<T>(Kokkos::view_alloc(label), static_cast<size_t>(n));
    }
  }
  void release() {
    if (buf_.data() != nullptr) MemoryLedger::sub(cat_, bytes());
    buf_ = Buffer<T>();
  }
  Buffer<T> buf_;
  MemCategory cat_ = MemCategory::other;
};

}  // namespace trident
