#include "train/model_schema.hpp"

#include "model/family.hpp"
#include "train/model_state.hpp"

#include <memory>

namespace trident {

CkptTensor checkpoint_tensor(const TensorSpec& t) {
  return CkptTensor{t.name, t.global_shape, t.split_dim, t.split_groups};
}

ModelSchema model_schema() {
  ModelSchema s;
  s.tensors = [](const ModelConfig& m) {
    const ParamLayout layout = ParamLayout::make(m);
    std::vector<CkptTensor> out;
    for (const TensorSpec& t : layout.tensors()) out.push_back(checkpoint_tensor(t));
    return out;
  };
  s.hf_name = [](const ModelConfig& m, const std::string& name) { return family_of(m.arch).hf_name(name); };
  s.hf_transposed = [](const ModelConfig& m, const std::string& name) { return family_of(m.arch).hf_transposed(name); };
  s.hf_config_json = [](const CheckpointMeta& meta, const std::string& dtype, const std::string& checkpoint) {
    return family_of(meta.model.arch)
        .hf_config_json(meta.model, meta.run.tokenizer, meta.run.vocab, dtype, meta.run.step, checkpoint);
  };
  return s;
}

CheckpointStateFactory model_state_factory() {
  return [](const Config& stored, const ProcessGrid& grid) -> std::unique_ptr<CheckpointState> {
    // A reshard is one resume plus one save: the state stays in memory, whatever offload the run
    // that wrote the checkpoint used (its offload_path may not exist where the tool runs).
    Config cfg = stored;
    cfg.parallel.offload_optimizer = OffloadKind::none;
    cfg.parallel.offload_params = OffloadKind::none;
    if (cfg.train.dtype == Precision::f64) return std::make_unique<ModelState<double>>(cfg, grid);
    return std::make_unique<ModelState<float>>(cfg, grid);
  };
}

}  // namespace trident
