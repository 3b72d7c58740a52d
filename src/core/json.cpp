#include "core/json.hpp"

#include "core/log.hpp"

#include <cstdlib>

namespace trident {

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) o += log::format("\\u%04x", c);
        else o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

std::string json_num(double v) {
  for (int prec = 6; prec <= 17; ++prec) {
    std::string s = log::format("%.*g", prec, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return log::format("%.17g", v);
}

}  // namespace trident
