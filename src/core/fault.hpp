// core/fault.hpp: fault-injection points for the crash-consistency tests.
//
// Layer: core (std + POSIX). A point is a named place in a critical sequence (creating a
// checkpoint file, renaming it, moving `latest`, ...). When the environment variable
// TRIDENT_FAULT names it -- "name" or "name:N" for its N-th visit (1-based) -- and
// TRIDENT_FAULT_RANK is unset or equals this process's world rank, the process kills itself with
// SIGKILL at that point, as a node failure would. Without TRIDENT_FAULT a point costs one load of
// a cached flag. Never set in production; documented in docs/checkpoint-format.md.
//
// Numerical poison (the tests of [train] nonfinite and the spike detector): TRIDENT_POISON holds
// items "KIND:STEPS[:once]" separated by ';', KIND one of loss (this rank's loss becomes NaN after
// the step's reductions, so only this rank sees it), grad (a NaN in this rank's gradient before
// the norm), spike (this rank's loss is reported 1000 times larger; the update is the real one);
// STEPS a comma list of steps N or ranges N-M (1-based optimizer steps). ":once" poisons only the
// first visit of each step in this process (a rollback revisits steps). TRIDENT_POISON_RANK
// limits it to one world rank. Never set in production; documented in docs/numerics.md.
#pragma once

#include <cstdint>

namespace trident {

/// True when TRIDENT_POISON poisons `kind` ("loss", "grad", "spike") at optimizer step `step` on
/// this process (counting this visit). Local.
bool poison_point(const char* kind, std::int64_t step);

/// Kills this process (SIGKILL) if TRIDENT_FAULT selects this visit of point `name`. Local.
void fault_point(const char* name);

}  // namespace trident
