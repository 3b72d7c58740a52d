// train/resume.hpp: which checkpoint `trident train --resume [PATH]` continues from.
//
// Layer: train. Choices, in order:
//  - no --resume: none (the run starts at step 0);
//  - --resume PATH: PATH itself when it is a file; the newest checkpoint of a run directory or a
//    checkpoint directory when it is one; for a `latest` pointer file, that of its directory
//    (resolve_checkpoint_path, checkpoint/verify.hpp). The file is verified ([checkpoint] verify_on_resume): a damaged
//    one is an error, not skipped, because the user named it;
//  - --resume alone: the newest committed checkpoint of the run's checkpoint directory that opens
//    and (with verify) passes its checksums (CheckpointDir::newest_complete, which reports every
//    newer file it skips), else none.
// Invariants: every rank gets the same answer (rank 0's listing decides, failures are agreed).
#pragma once

#include "checkpoint/model_schema.hpp"
#include "parallel/communicator.hpp"

#include <string>

namespace trident {

class CheckpointDir;

/// The checkpoint to resume from by the rules of the header, "" to start from step 0. `resume`:
/// --resume was given; `resume_path`: its PATH ("" for none); `ckdir`: the run's checkpoints;
/// `verify`: [checkpoint] verify_on_resume (index, metadata against `schema` and the checksum of
/// every shard dataset: require_intact). Logs the choice (and the verification time) on rank 0.
/// Collective over world. Throws CheckpointError (collective) when PATH holds no checkpoint or
/// the chosen file is damaged.
std::string choose_resume_checkpoint(Communicator& world, const CheckpointDir& ckdir, bool resume,
                                     const std::string& resume_path, bool verify, const ModelSchema& schema);

}  // namespace trident
