// core/memory.hpp: long-lived buffers, tracked by category.
//
// Layer: core (std + Kokkos).
// Every long-lived allocation (parameters, gradients, optimizer moments, activations,
// communication buffers, data) is a TrackedBuffer, so the log can report the per-rank peak by
// category and a dry run can predict it. Kernels never allocate (docs/design.md, Layers).
// Invariants: the ledger's current bytes equal the sum of live TrackedBuffers of each category.
#pragma once

#include "core/types.hpp"

#include <array>
#include <cstdint>
#include <string>

namespace trident {

/// params: the working parameters a rank keeps (all of them, or its shard at ZeRO-3);
/// grads: the gradient a rank keeps (all, or its shard at ZeRO-2/3); optimizer: fp32 master weights
/// and AdamW moments; gathered: unsharded copies of units being computed (ZeRO-3, bf16 casts);
/// activations: saved activations and kernel scratch; comm: communication staging buffers.
enum class MemCategory : int { params = 0, grads, optimizer, gathered, activations, comm, data, other, count_ };

/// Name of a category as it appears in logs and metrics.csv ("params", "grads", ...).
const char* mem_category_name(MemCategory c);

/// Per-process bytes of tracked buffers, current and peak, by category. Local (not thread-safe).
class MemoryLedger {
 public:
  static void add(MemCategory c, std::int64_t bytes);
  static void sub(MemCategory c, std::int64_t bytes);
  static std::int64_t current(MemCategory c);
  static std::int64_t peak(MemCategory c);
  static std::int64_t current_total();
  static std::int64_t peak_total();
};

/// Peak resident set size of this process in bytes (getrusage), 0 where unknown. Local.
std::int64_t peak_rss_bytes();

/// An owning Kokkos buffer whose bytes count against a MemCategory while it lives. Move-only.
template <class T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(const std::string& label, std::int64_t n, MemCategory cat)
      : buf_(Kokkos::view_alloc(label), static_cast<size_t>(n)), cat_(cat) {
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
  void release() {
    if (buf_.data() != nullptr) MemoryLedger::sub(cat_, bytes());
    buf_ = Buffer<T>();
  }
  Buffer<T> buf_;
  MemCategory cat_ = MemCategory::other;
};

}  // namespace trident
