#include "core/memory.hpp"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <mutex>

namespace trident {
namespace {
constexpr int kCats = static_cast<int>(MemCategory::count_);
std::array<std::int64_t, kCats> g_current{};
std::array<std::int64_t, kCats> g_peak{};
std::int64_t g_total = 0;
std::int64_t g_total_peak = 0;
std::mutex g_mutex;  // a background checkpoint writer may release buffers while training allocates
}  // namespace

const char* mem_category_name(MemCategory c) {
  static const char* names[kCats] = {"params", "grads",      "optimizer", "gathered", "activations",
                                     "comm",   "checkpoint", "data",      "other"};
  return names[static_cast<int>(c)];
}

void MemoryLedger::add(MemCategory c, std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto i = static_cast<int>(c);
  g_current[i] += bytes;
  g_peak[i] = std::max(g_peak[i], g_current[i]);
  g_total += bytes;
  g_total_peak = std::max(g_total_peak, g_total);
}
void MemoryLedger::sub(MemCategory c, std::int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_current[static_cast<int>(c)] -= bytes;
  g_total -= bytes;
}
std::int64_t MemoryLedger::current(MemCategory c) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_current[static_cast<int>(c)];
}
std::int64_t MemoryLedger::peak(MemCategory c) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_peak[static_cast<int>(c)];
}
std::int64_t MemoryLedger::current_total() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_total;
}
std::int64_t MemoryLedger::peak_total() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_total_peak;
}
void MemoryLedger::reset_peak(MemCategory c) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_peak[static_cast<int>(c)] = g_current[static_cast<int>(c)];
}
void MemoryLedger::reset_peaks() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_peak = g_current;
  g_total_peak = g_total;
}

void advise_huge_pages(void* p, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  if (p == nullptr || bytes < 2 * kHuge) return;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p, (void)bytes;
#endif
}

std::int64_t peak_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<std::int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace trident
