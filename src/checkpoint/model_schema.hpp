// checkpoint/model_schema.hpp: what the checkpoint layer needs to know about a model family --
// and nothing more.
//
// Layer: checkpoint. The layer stores named, sharded arrays and never includes the model or the
// ZeRO engine (docs/design.md, Layers). Two narrow interfaces carry what it needs from them:
//  - ModelSchema: the tensors a model fingerprint implies (to check an index against its
//    fingerprint) and the Hugging Face mapping for export; one per model family, built by the
//    train layer from the model's parameter layout (train/model_schema.hpp) and passed in by the
//    caller (torchtitan's state-dict adapter, Megatron-LM's sharded_state_dict, in spirit);
//  - CheckpointState: one rank's live model state as a resume and a save see it (snapshot and
//    load), implemented by train's ModelState; `trident ckpt reshard` builds one through a
//    CheckpointStateFactory for the target layout and runs exactly a resume plus a save.
#pragma once

#include "checkpoint/metadata.hpp"
#include "checkpoint/snapshot.hpp"
#include "core/config.hpp"
#include "io/checkpoint_file.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class ProcessGrid;

struct ModelSchema {
  /// The global tensors (name, global shape, tp split dimension and groups) of the model that
  /// fingerprint `m` (vocab_size resolved; its arch selects the family) describes, in parameter
  /// order. Local. Throws Error for an impossible fingerprint.
  std::function<std::vector<CkptTensor>(const ModelConfig& m)> tensors;
  /// Hugging Face name of tensor `name` of model `m`. Local.
  std::function<std::string(const ModelConfig& m, const std::string& name)> hf_name;
  /// True for 2-D weights Hugging Face stores transposed ((in, out) instead of (out, in)). Local.
  std::function<bool(const ModelConfig& m, const std::string& name)> hf_transposed;
  /// config.json of the exported model (`dtype` "float32" | "bfloat16", `checkpoint` the source
  /// file's name). Local.
  std::function<std::string(const CheckpointMeta& meta, const std::string& dtype, const std::string& checkpoint)>
      hf_config_json;
};

/// One rank's model state as a checkpoint sees it.
class CheckpointState {
 public:
  virtual ~CheckpointState() = default;
  /// A host copy of this rank's part of a checkpoint at `run`, for a background writer. Local.
  virtual CheckpointSnapshot snapshot(const RunState& run) const = 0;
  /// The same as a live view (checkpoint/snapshot.hpp): no copy, bounded extra memory, valid until
  /// the state changes; for a synchronous save. Local.
  virtual CheckpointSnapshot live_view(const RunState& run) const = 0;
  /// Restores the state from `path` (any layout) and returns what the file records. Collective
  /// over the grid the state was built on. Throws CheckpointError (collective).
  virtual RunState load(const std::string& path) = 0;
};

/// Builds the state of `cfg` (validated for grid's ranks, vocab resolved) on `grid`. Collective.
using CheckpointStateFactory =
    std::function<std::unique_ptr<CheckpointState>(const Config& cfg, const ProcessGrid& grid)>;

}  // namespace trident
