#include "io/io_limits.hpp"

#include "core/error.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>

namespace trident {

namespace {

std::atomic<std::size_t> g_limit{0};  // 0: not resolved yet
std::atomic<std::uint64_t> g_calls{0};

std::size_t limit_from_environment() {
  const char* v = std::getenv("TRIDENT_IO_MAX_CALL_BYTES");
  if (v == nullptr || *v == '\0') return kDefaultIoMaxCallBytes;
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n == 0 || v[0] == '-')
    throw IoError("TRIDENT_IO_MAX_CALL_BYTES = '" + std::string(v) + "': expected a positive number of bytes");
  return static_cast<std::size_t>(n);
}

}  // namespace

std::size_t io_max_call_bytes() {
  std::size_t n = g_limit.load(std::memory_order_relaxed);
  if (n != 0) return n;
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  n = g_limit.load();
  if (n == 0) {
    n = limit_from_environment();
    g_limit.store(n);
  }
  return n;
}

void set_io_max_call_bytes(std::size_t bytes) { g_limit.store(bytes < 1 ? 1 : bytes); }

std::uint64_t io_transfer_calls() { return g_calls.load(); }

namespace detail {
/// Counts one transfer call (io/hdf5.cpp). Local.
void count_io_transfer_call() { g_calls.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

}  // namespace trident
