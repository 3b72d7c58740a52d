// core/fault.hpp: fault-injection points for the crash-consistency tests.
//
// Layer: core (std + POSIX). A point is a named place in a critical sequence (creating a
// checkpoint file, renaming it, moving `latest`, ...). When the environment variable
// TRIDENT_FAULT names it -- "name" or "name:N" for its N-th visit (1-based) -- and
// TRIDENT_FAULT_RANK is unset or equals this process's world rank, the process kills itself with
// SIGKILL at that point, as a node failure would. Without TRIDENT_FAULT a point costs one load of
// a cached flag. Never set in production; documented in docs/checkpoint-format.md.
#pragma once

namespace trident {

/// Kills this process (SIGKILL) if TRIDENT_FAULT selects this visit of point `name`. Local.
void fault_point(const char* name);

}  // namespace trident
