// core/error.hpp: the exception types every layer raises for user-facing problems.
//
// Layer: core (std only).
// Invariants: an Error's message names the problem and the key/file/tensor involved, in words a
// user can act on; it never carries a stack trace. `collective()` is true when every rank is known
// to raise the same error at the same point (e.g. deck validation, or a failure that was agreed
// with an all-reduce), so the driver may finalise MPI cleanly instead of aborting the job.
#pragma once

#include <stdexcept>
#include <string>

namespace trident {

/// Base class of every error Trident reports to the user.
/// `exit_code` is the process exit status the driver uses (2: usage/config, 1: runtime).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, bool collective = false, int exit_code = 1)
      : std::runtime_error(what), collective_(collective), exit_code_(exit_code) {}
  bool collective() const { return collective_; }
  int exit_code() const { return exit_code_; }

 private:
  bool collective_;
  int exit_code_;
};

/// A wrong input deck or command line: unknown key, wrong type, impossible value.
/// Always collective (every rank parses the same deck) and exits with status 2.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& what) : Error(what, /*collective=*/true, 2) {}
};

/// A file that is missing, unreadable, truncated or not what it claims to be.
class IoError : public Error {
 public:
  explicit IoError(const std::string& what, bool collective = false) : Error(what, collective, 1) {}
};

/// A checkpoint that cannot be written or cannot be used to resume this run.
class CheckpointError : public Error {
 public:
  explicit CheckpointError(const std::string& what, bool collective = false)
      : Error(what, collective, 1) {}
};

/// Throws ConfigError(msg) unless `cond`.
inline void require_config(bool cond, const std::string& msg) {
  if (!cond) throw ConfigError(msg);
}

}  // namespace trident
