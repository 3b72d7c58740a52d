// apps/args.hpp: the two argument forms that every subcommand with a deck shares.
#pragma once

#include "core/error.hpp"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
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

/// The largest count an option takes (ranks, nodes, rows): 2^30 - 1, so products of two stay in a long.
constexpr long kMaxCount = (1L << 30) - 1;

/// The integer value `v` of option `opt`, from `lo` to kMaxCount. Throws ConfigError "<opt> <v>:
/// expected an integer from <lo> to 1073741823" for anything else (empty, trailing text, out of range).
inline int count_option(const std::string& opt, const std::string& v, int lo) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > kMaxCount)
    throw ConfigError(opt + " " + v + ": expected an integer from " + std::to_string(lo) + " to " +
                      std::to_string(kMaxCount));
  return static_cast<int>(x);
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

/// The error for an argument `cmd` does not know. A bare path that names a deck (ends in .ini, or
/// is an existing file) is the usual slip of `trident train deck.ini`: the message says to give it
/// with --config. Local; returns the error for the caller to throw (exit 2).
inline ConfigError unknown_argument(const std::string& a, const std::string& cmd) {
  std::error_code ec;
  const bool deck_like = a.rfind("-", 0) != 0 &&
                         ((a.size() > 4 && a.compare(a.size() - 4, 4, ".ini") == 0) ||
                          std::filesystem::is_regular_file(a, ec));
  if (deck_like)
    return ConfigError("unknown argument '" + a + "': give the deck with --config " + a + " (try `trident " + cmd +
                       " --help`)");
  return ConfigError("unknown argument '" + a + "' (try `trident " + cmd + " --help`)");
}

/// Throws ConfigError "cannot open deck file" when `deck` is not there. Deck paths are relative to
/// the current directory, so a user outside the source tree who names an example deck
/// (`--config input/shakespeare_char.ini`, or the bare name) is told where the installed one is:
/// $TRIDENT_ROOT/input/NAME, when the module set TRIDENT_ROOT and that file exists. Local.
inline void require_deck_exists(const std::string& deck) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(deck, ec)) return;  // parse_deck reports a directory or an unreadable file
  std::string hint;
  const char* root = std::getenv("TRIDENT_ROOT");
  if (root != nullptr && *root != '\0') {
    const fs::path example = fs::path(root) / "input" / fs::path(deck).filename();
    if (fs::is_regular_file(example, ec))
      hint = "; the installed example deck is --config " + example.string();
  }
  if (hint.empty() && fs::path(deck).is_relative())
    hint = " (relative to the current directory, " + fs::current_path(ec).string() + ")";
  throw ConfigError("cannot open deck file '" + deck + "'" + hint);
}

}  // namespace trident::app
