// apps/commands.hpp: the subcommands of the `trident` executable.
// Each takes the arguments after its name and returns the process exit status; errors are thrown
// as trident::Error and reported by main().
#pragma once

#include "parallel/runtime.hpp"

#include <string>
#include <vector>

namespace trident::app {

int cmd_prep(Runtime& rt, const std::vector<std::string>& args);
int cmd_train(Runtime& rt, const std::vector<std::string>& args);
int cmd_sample(Runtime& rt, const std::vector<std::string>& args);
/// Whether standard output was closed when trident started (`>&-`; apps/trident.cpp holds fd 1
/// with /dev/null then): `sample` refuses to generate into nothing. Local.
bool stdout_closed_at_start();
/// `trident eval`: the loss of a checkpoint on a whole split (train/eval_run.hpp). Collective over world.
int cmd_eval(Runtime& rt, const std::vector<std::string>& args);
int cmd_ckpt(Runtime& rt, const std::vector<std::string>& args);
int cmd_plan(Runtime& rt, const std::vector<std::string>& args);

}  // namespace trident::app
