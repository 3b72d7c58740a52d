// apps/options.hpp: Boost.Program_options parsing shared by the subcommands (prep, sample, eval,
// ckpt): one message form for a bad option, --help printed on rank 0.
#pragma once

#include "apps/commands.hpp"
#include "core/error.hpp"

#include <boost/program_options.hpp>

#include <iostream>
#include <string>
#include <vector>

namespace trident::app {

/// Parses `args` against `desc` into `vm`; the remaining words go to option `positional` (at most
/// `max_positional` of them, -1: any number; "" for none). Returns false when --help was asked
/// for, after printing `desc` on world rank 0. Throws ConfigError "<what> (try `trident <command>
/// --help`)" for an unknown option or a bad value. Local (the same on every rank).
inline bool parse_options(Runtime& rt, const std::vector<std::string>& args,
                          boost::program_options::options_description& desc, const std::string& positional,
                          int max_positional, boost::program_options::variables_map& vm, const std::string& command) {
  namespace po = boost::program_options;
  po::positional_options_description pos;
  if (!positional.empty()) pos.add(positional.c_str(), max_positional);
  try {
    po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(std::string(e.what()) + " (try `trident " + command + " --help`)");
  }
  if (vm.count("help")) {
    if (rt.world_rank() == 0) std::cout << desc << "\n";
    return false;
  }
  return true;
}

}  // namespace trident::app
