// train/model_schema.hpp: the model as the checkpoint layer sees it -- the ModelSchema of every
// registered family (model/family.hpp) (its tensors by fingerprint, its Hugging Face mapping) and the factory of
// CheckpointStates that `trident ckpt reshard` uses.
//
// Layer: train: the one place that knows both the model (model/param_layout.hpp,
// model/family.hpp, train/model_state.hpp) and the checkpoint layer's narrow interfaces
// (checkpoint/model_schema.hpp), so neither of those has to know the other.
#pragma once

#include "checkpoint/model_schema.hpp"
#include "model/param_layout.hpp"

namespace trident {

/// The index entry of tensor `t`: its name, global shape and tp split. Local.
CkptTensor checkpoint_tensor(const TensorSpec& t);

/// Any family, chosen by the fingerprint's arch: tensors from ParamLayout::make of the
/// fingerprint (one stage, tp = 1), the Hugging Face mapping of the family's record. Local.
ModelSchema model_schema();

/// Builds a ModelState<float> or <double> (as cfg.train.dtype says) for cfg on the grid. The
/// returned factory's calls are collective over the grid.
CheckpointStateFactory model_state_factory();

}  // namespace trident
