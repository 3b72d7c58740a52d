// apps/args.hpp: the two argument forms that every subcommand with a deck shares.
#pragma once

#include "core/error.hpp"

#include <string>
#include <vector>

namespace trident::app {

/// True when `a` is option `name` in either form, "--name" or "--name=VALUE".
inline bool is_option(const std::string& a, const std::string& name) {
  return a == name || a.rfind(name + "=", 0) == 0;
}

/// The value of option `name`, which args[i] is: "--name=VALUE", or "--name VALUE" (then `i` moves
/// to VALUE). Throws ConfigError "<name> needs a value" when the second form has nothing after it.
inline std::string option_value(const std::vector<std::string>& args, size_t& i, const std::string& name) {
  const std::string& a = args[i];
  if (a.size() > name.size() && a[name.size()] == '=') return a.substr(name.size() + 1);
  if (i + 1 >= args.size()) throw ConfigError(name + " needs a value");
  return args[++i];
}

/// A deck override "--section.key=VALUE" or "--section.key VALUE" at args[i]: appends it to
/// `overrides` in the first form (moving `i` past VALUE in the second) and returns true; false
/// when args[i] is not one. Throws ConfigError "override <arg> needs a value" when VALUE is missing.
inline bool take_deck_override(const std::vector<std::string>& args, size_t& i, std::vector<std::string>& overrides) {
  const std::string& a = args[i];
  if (a.rfind("--", 0) != 0 || a.find('.') == std::string::npos) return false;
  if (a.find('=') != std::string::npos) overrides.push_back(a);
  else if (i + 1 < args.size()) overrides.push_back(a + "=" + args[++i]);
  else throw ConfigError("override " + a + " needs a value");
  return true;
}

}  // namespace trident::app
