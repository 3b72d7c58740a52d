#include "train/checkpoint_model.hpp"

#include "checkpoint/metadata.hpp"
#include "checkpoint/tensor_read.hpp"
#include "checkpoint/verify.hpp"
#include "core/error.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/agree.hpp"
#include "train/model_schema.hpp"

namespace trident {

CheckpointModel load_checkpoint_model(const std::string& path_in, Communicator& comm) {
  std::string path;
  run_agreed(comm, "", [&] { path = resolve_checkpoint_path(path_in); });
  CheckpointReader rd(path, comm);
  require_intact(rd, comm, "run `trident ckpt verify " + path + "`", model_schema());
  CheckpointModel out;
  run_agreed(comm, "cannot load a model from '" + path + "'", [&] {
    const CheckpointMeta meta = CheckpointMeta::read(rd);
    meta.require_complete(path);
    out.path = path;
    out.cfg = meta.deck();
    out.step = meta.run.step;
    out.tokenizer = meta.run.tokenizer;
    out.vocab = meta.run.vocab;
    if (!meta.model_error.empty()) throw CheckpointError(meta.model_error);
    out.tokenizer_model = meta.run.tokenizer_model;
    const ParamLayout layout = ParamLayout::make(out.cfg.model);
    out.store = std::make_unique<ParamStore<float>>(layout);
    auto p_h = Kokkos::create_mirror_view_and_copy(HostSpace(), out.store->params().view());  // zeros where no tensor reads
    // Whole tensors (tp = 1, one stage), reassembled from whatever layout wrote the file.
    for (const TensorSpec& t : layout.tensors())
      read_tp_partition(rd, "param", checkpoint_tensor(t), 1, 0, 0, t.numel, DataType::f32, p_h.data() + t.offset);
    Kokkos::deep_copy(out.store->params().view(), p_h);
  });
  return out;
}

}  // namespace trident
