// parallel/agree.hpp: turning a rank-local failure into the same error on every rank.
//
// Layer: parallel. A file that one rank cannot open, a write that fails on one rank only: if
// that rank simply threw, the others would wait forever in the next collective. run_agreed()
// lets every rank learn of the failure and raise the same error, so the job ends cleanly.
#pragma once

#include "parallel/communicator.hpp"

#include <functional>
#include <string>
#include <vector>

namespace trident {

/// Runs f() on every rank of comm, then agrees on the outcome (one all-reduce; a broadcast only
/// on failure). If f threw on any rank, every rank throws an Error of the same kind (ConfigError,
/// IoError, CheckpointError or Error) marked collective, carrying "<context>: <message>" of the
/// lowest failing rank (with "(rank N)" when the job has several ranks). Collective over comm.
void run_agreed(Communicator& comm, const std::string& context, const std::function<void()>& f);

/// `s` on every rank = `s` on `root` (its length first, then its bytes). Collective over comm.
void broadcast_string(Communicator& comm, std::string& s, int root = 0);

/// Every rank's lines, concatenated in rank order, on every rank (newlines inside a line become
/// spaces). Collective over comm. Used to turn rank-local findings into one agreed list.
std::vector<std::string> gather_strings(Communicator& comm, const std::vector<std::string>& mine);

}  // namespace trident
