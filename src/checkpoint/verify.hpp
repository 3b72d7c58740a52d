// checkpoint/verify.hpp: is a checkpoint file whole and consistent? The checks behind `trident
// ckpt verify`, and the gate every reader passes before it turns a checkpoint into something
// else (resume, sample, reshard, export).
//
// Layer: checkpoint. Reads through io's CheckpointReader and checkpoint/metadata.hpp only; what a
// model fingerprint implies comes from a ModelSchema (checkpoint/model_schema.hpp).
// Invariants: every function taking a Communicator is collective over it and returns the same
// result on every rank (problems are gathered, never left rank-local). Problems found *in* a
// file are returned as text; exceptions are thrown only when the request cannot be carried out
// at all (a path that does not exist), always collectively.
#pragma once

#include "checkpoint/model_schema.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/communicator.hpp"

#include <string>
#include <vector>

namespace trident {

/// Index consistency: every segment names an existing tensor and shard, lies within the shard's
/// length and its tensor's tp partition; the segments of every tp partition of every tensor cover
/// it exactly once (no gap, no overlap); no two segments share shard elements; shard coordinates
/// lie within the dp x tp x pp layout. Local (deterministic: every rank finds the same). Returns
/// the problems, empty when consistent.
std::vector<std::string> check_checkpoint_index(const CheckpointReader& rd);

/// Every shard dataset /shards/<kind>/<shard> exists and holds at least the elements its segments
/// need (one element read per dataset; the exact length and contents are what verify's checksums
/// cover). Collective over comm: shard s is checked by rank s % comm.size(). Same list on every rank.
std::vector<std::string> check_checkpoint_datasets(const CheckpointReader& rd, Communicator& comm);

/// Restart metadata: CheckpointMeta::problems, then the model fingerprint against the index (the
/// fingerprint's tensors per `schema` are exactly the indexed names, shapes and tp splits), then
/// CheckpointMeta::deck_problems, then the tokenizer vocabulary (valid for its kind, no larger
/// than the model's). Local (deterministic).
std::vector<std::string> check_checkpoint_metadata(const CheckpointReader& rd, const ModelSchema& schema);

/// check_checkpoint_index, check_checkpoint_metadata, then CheckpointReader::verify (presence,
/// exact length and XXH64 checksum of every shard dataset). Collective over comm; the same list
/// on every rank.
std::vector<std::string> checkpoint_problems(const CheckpointReader& rd, Communicator& comm,
                                             const ModelSchema& schema);

struct VerifyResult {
  std::string file;                   ///< the checkpoint checked (a directory resolved to its latest)
  std::vector<std::string> problems;  ///< empty when the file is intact
};

/// Full check of one checkpoint file (a directory means its latest checkpoint): format and
/// version (opening it), then checkpoint_problems. Collective over comm; the same result on every
/// rank. Throws CheckpointError (collective) only when `path` names no file at all.
VerifyResult verify_checkpoint(const std::string& path, Communicator& comm, const ModelSchema& schema);

/// Runs checkpoint_problems on `rd` and throws CheckpointError on every rank when anything is
/// wrong: "checkpoint 'P' is damaged: <first problem>[; N more problem(s)] (<hint>)". Every
/// reader of parameters (resume, sample, reshard, export) calls it first, so a damaged file is
/// never turned into a new one. Collective over comm.
void require_intact(const CheckpointReader& rd, Communicator& comm, const std::string& hint, const ModelSchema& schema);

/// `path` itself if it is a file, else the latest checkpoint below a run directory (its
/// checkpoints/) or a checkpoint directory; a checkpoint directory's `latest` pointer file means
/// the same as the directory. Local. Throws CheckpointError when there is none.
std::string resolve_checkpoint_path(const std::string& path);

}  // namespace trident
