#include "train/model_schema.hpp"

#include "model/hf_gpt2.hpp"
#include "train/model_state.hpp"

#include <memory>

namespace trident {

CkptTensor checkpoint_tensor(const TensorSpec& t) {
  return CkptTensor{t.name, t.global_shape, t.split_dim, t.split_groups};
}

ModelSchema gpt_model_schema() {
  ModelSchema s;
  s.family = "gpt2";
  s.tensors = [](const ModelConfig& m) {
    const ParamLayout layout = ParamLayout::gpt(m);
    std::vector<CkptTensor> out;
    for (const TensorSpec& t : layout.tensors()) out.push_back(checkpoint_tensor(t));
    return out;
  };
  s.hf_name = hf_gpt2_name;
  s.hf_transposed = hf_gpt2_transposed;
  s.hf_config_json = [](const CheckpointMeta& meta, const std::string& dtype, const std::string& checkpoint) {
    return hf_gpt2_config_json(meta.model, meta.run.tokenizer, meta.run.vocab, dtype, meta.run.step, checkpoint);
  };
  return s;
}

CheckpointStateFactory model_state_factory() {
  return [](const Config& stored, const ProcessGrid& grid) -> std::unique_ptr<CheckpointState> {
    // A reshard is one resume plus one save: the state stays in memory, whatever offload the run
    // that wrote the checkpoint used (its offload_path may not exist where the tool runs).
    Config cfg = stored;
    cfg.parallel.offload_optimizer = OffloadKind::none;
    if (cfg.train.dtype == Precision::f64) return std::make_unique<ModelState<double>>(cfg, grid);
    return std::make_unique<ModelState<float>>(cfg, grid);
  };
}

}  // namespace trident
