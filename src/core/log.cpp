#include "core/log.hpp"

#include <cstdio>
#include <vector>

namespace trident::log {
namespace {
int g_rank = 0;
int g_size = 1;

std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  std::vector<char> buf(static_cast<size_t>(n > 0 ? n : 0) + 1);
  std::vsnprintf(buf.data(), buf.size(), fmt, ap);
  return std::string(buf.data(), static_cast<size_t>(n > 0 ? n : 0));
}
}  // namespace

void set_rank(int world_rank_, int world_size) {
  g_rank = world_rank_;
  g_size = world_size;
}
int world_rank() { return g_rank; }

void info(const char* fmt, ...) {
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  std::fprintf(stdout, "%s\n", s.c_str());
  std::fflush(stdout);
}

void warn(const char* fmt, ...) {
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "warning: %s\n", s.c_str());
  std::fflush(stderr);
}

void error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  if (g_size > 1)
    std::fprintf(stderr, "[rank %d] %s\n", g_rank, s.c_str());
  else
    std::fprintf(stderr, "%s\n", s.c_str());
  std::fflush(stderr);
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

}  // namespace trident::log
