#include "train/checkpoint_model.hpp"

#include "core/error.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/agree.hpp"
#include "train/checkpoint_dir.hpp"
#include "train/checkpoint_tools.hpp"
#include "train/checkpoint_reshard.hpp"

#include <filesystem>

namespace trident {

namespace fs = std::filesystem;

std::string resolve_checkpoint_path(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  for (const fs::path& d : {fs::path(path) / "checkpoints", fs::path(path)}) {
    auto latest = CheckpointDir(d.string()).latest();
    if (latest) return *latest;
  }
  throw CheckpointError("no checkpoint found in directory '" + path + "'");
}

void require_intact(const CheckpointReader& rd, Communicator& comm, const std::string& hint) {
  run_agreed(comm, "", [&] {
    const std::vector<std::string> problems = checkpoint_problems(rd, comm);  // what `ckpt verify` checks
    if (problems.empty()) return;
    std::string more;
    if (problems.size() > 1) more = "; " + std::to_string(problems.size() - 1) + " more problem(s)";
    throw CheckpointError("checkpoint '" + rd.path() + "' is damaged: " + problems.front() + more +
                          (hint.empty() ? "" : " (" + hint + ")"));
  });
}

CheckpointModel load_checkpoint_model(const std::string& path_in, Communicator& comm) {
  std::string path;
  run_agreed(comm, "", [&] { path = resolve_checkpoint_path(path_in); });
  CheckpointReader rd(path, comm);
  require_intact(rd, comm, "run `trident ckpt verify " + path + "`");
  CheckpointModel out;
  run_agreed(comm, "cannot load a model from '" + path + "'", [&] {
    out.cfg = parse_deck_text(rd.text("config"), rd.attr_string("deck_name"));
    out.cfg.model.vocab_size = static_cast<int>(rd.attr_int("model_vocab_size"));
    out.step = rd.attr_int("step");
    out.tokenizer = rd.attr_string("tokenizer");
    if (out.tokenizer != "gpt2") out.vocab = rd.int_array("tokenizer/vocab");
    const ParamLayout layout = ParamLayout::gpt(out.cfg.model);
    out.store = std::make_unique<ParamStore<float>>(layout);
    auto p_h = Kokkos::create_mirror_view(out.store->params().view());
    // Whole tensors (tp = 1, one stage), reassembled from whatever layout wrote the file.
    for (const TensorSpec& t : layout.tensors())
      read_tensor_piece(rd, "param", t, 1, 0, 0, t.numel, DataType::f32, p_h.data() + t.offset);
    Kokkos::deep_copy(out.store->params().view(), p_h);
  });
  return out;
}

}  // namespace trident
