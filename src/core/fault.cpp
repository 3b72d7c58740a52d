#include "core/fault.hpp"

#include "core/log.hpp"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace trident {

namespace {
struct FaultSpec {
  bool active = false;
  std::string name;
  long visit = 1;
  long rank = -1;
};
const FaultSpec& spec() {
  static FaultSpec s = [] {
    FaultSpec f;
    const char* v = std::getenv("TRIDENT_FAULT");
    if (v == nullptr || *v == '\0') return f;
    f.active = true;
    std::string t = v;
    const auto colon = t.find(':');
    f.name = t.substr(0, colon);
    if (colon != std::string::npos) f.visit = std::strtol(t.c_str() + colon + 1, nullptr, 10);
    if (const char* r = std::getenv("TRIDENT_FAULT_RANK")) f.rank = std::strtol(r, nullptr, 10);
    return f;
  }();
  return s;
}
}  // namespace

void fault_point(const char* name) {
  const FaultSpec& f = spec();
  if (!f.active || f.name != name) return;
  if (f.rank >= 0 && f.rank != log::world_rank()) return;
  static std::mutex mu;
  static std::map<std::string, long> visits;
  std::lock_guard<std::mutex> lock(mu);
  if (++visits[name] != f.visit) return;
  log::error("fault injection: killing this process at '%s' (visit %ld)", name, f.visit);
  std::raise(SIGKILL);
}

}  // namespace trident
