// core/log.hpp: rank-aware logging.
//
// Layer: core (std only).
// Invariants: info() prints on world rank 0 only, so a 1,000-rank job logs one line per event;
// error() prints on every rank that calls it, prefixed with the rank, because errors are often
// rank-local. set_rank() is called once by the runtime before anything is logged.
#pragma once

#include <cstdarg>
#include <string>

namespace trident::log {

/// Records this process's world rank and size (call once, from the runtime).
void set_rank(int world_rank, int world_size);
/// World rank recorded by set_rank() (0 before it is called).
int world_rank();
/// printf-style line to stdout on world rank 0. Local.
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// printf-style line to stderr on world rank 0, prefixed "warning: ". Local.
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// printf-style line to stderr on the calling rank, prefixed "[rank N] " when there are several. Local.
void error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace trident::log
