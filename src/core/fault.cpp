#include "core/fault.hpp"

#include "core/log.hpp"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

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

namespace trident {

namespace {
struct PoisonItem {
  std::string kind;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;  // inclusive step ranges
  bool once = false;
};
struct PoisonSpec {
  std::vector<PoisonItem> items;
  long rank = -1;
};
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string::size_type a = 0;
  while (a <= s.size()) {
    const auto b = s.find(sep, a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}
const PoisonSpec& poison_spec() {
  static PoisonSpec s = [] {
    PoisonSpec p;
    const char* v = std::getenv("TRIDENT_POISON");
    if (v == nullptr || *v == '\0') return p;
    for (const std::string& item : split(v, ';')) {
      const std::vector<std::string> f = split(item, ':');
      if (f.size() < 2) continue;
      PoisonItem it;
      it.kind = f[0];
      it.once = f.size() > 2 && f[2] == "once";
      for (const std::string& r : split(f[1], ',')) {
        const auto dash = r.find('-');
        const std::int64_t lo = std::strtoll(r.c_str(), nullptr, 10);
        const std::int64_t hi = dash == std::string::npos ? lo : std::strtoll(r.c_str() + dash + 1, nullptr, 10);
        it.ranges.emplace_back(lo, hi);
      }
      p.items.push_back(std::move(it));
    }
    if (const char* r = std::getenv("TRIDENT_POISON_RANK")) p.rank = std::strtol(r, nullptr, 10);
    return p;
  }();
  return s;
}
}  // namespace

bool poison_point(const char* kind, std::int64_t step) {
  const PoisonSpec& p = poison_spec();
  if (p.items.empty()) return false;
  if (p.rank >= 0 && p.rank != log::world_rank()) return false;
  static std::mutex mu;
  static std::map<std::pair<std::string, std::int64_t>, long> visits;
  std::lock_guard<std::mutex> lock(mu);
  for (const PoisonItem& it : p.items) {
    if (it.kind != kind) continue;
    for (const auto& [lo, hi] : it.ranges)
      if (step >= lo && step <= hi) {
        const long n = ++visits[{it.kind, step}];
        if (it.once && n > 1) return false;
        log::warn("numerical poison (TRIDENT_POISON): %s at step %lld", kind, static_cast<long long>(step));
        return true;
      }
  }
  return false;
}

}  // namespace trident
