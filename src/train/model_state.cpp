#include "train/model_state.hpp"

#include "checkpoint/metadata.hpp"
#include "checkpoint/tensor_read.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "parallel/agree.hpp"
#include "train/model_schema.hpp"
#include "train/resume_check.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

namespace trident {

template <class T>
ModelState<T>::ModelState(const Config& cfg, const ProcessGrid& grid)
    : cfg_(cfg),
      grid_(grid),
      layout_(ParamLayout::gpt(cfg.model, cfg.parallel.unit_blocks,
                               ModelPart::make(cfg.model, cfg.parallel, grid.tp_rank(), grid.pp_rank()))) {
  // HSDP: groups of S consecutive dp ranks share the pieces of a unit (shard_comm); the ranks at
  // the same position of every group hold the same pieces (replicate_comm).
  const int S = cfg.parallel.shard_group_size > 0 ? cfg.parallel.shard_group_size : grid.dp_size();
  const int d = grid.dp_rank();
  shard_comm_ = grid.dp_comm().split(d / S, d, "dp_shard");
  replicate_comm_ = grid.dp_comm().split(d % S, d, "dp_replicate");
  // The tied embedding lives on the first and the last pipeline stage.
  const bool ends = grid.pp_rank() == 0 || grid.pp_rank() == grid.pp_size() - 1;
  tied_comm_ = grid.pp_comm().split(ends ? 0 : 1 + grid.pp_rank(), grid.pp_rank(), "pp_tied");
  ZeroComms comms;
  comms.replicate = replicate_comm_.get();
  comms.model = &grid.mp_comm();
  comms.tied = ends ? tied_comm_.get() : nullptr;
  engine_ = std::make_unique<ZeroEngine<T>>(layout_, GptSchedule::make(layout_, cfg.model), cfg.train,
                                            ZeroOptions::from(cfg), *shard_comm_, comms);
  engine_->initialize(static_cast<std::uint64_t>(cfg.train.seed));
}

template <class T>
std::int64_t ModelState<T>::comm_bytes() const {
  return grid_.dp_comm().stats().total_bytes() + shard_comm_->stats().total_bytes() +
         replicate_comm_->stats().total_bytes() + grid_.tp_comm().stats().total_bytes() +
         grid_.pp_comm().stats().total_bytes() + tied_comm_->stats().total_bytes() +
         grid_.mp_comm().stats().total_bytes();
}

template <class T>
CheckpointSnapshot ModelState<T>::snapshot(const RunState& run) const {
  const ZeroEngine<T>& zero = *engine_;
  CheckpointSnapshot snap;
  CheckpointWrite& w = snap.write;
  // The index lists the whole model's tensors (global shapes), identically on every rank.
  const ParamLayout full = ParamLayout::gpt(cfg_.model, cfg_.parallel.unit_blocks);
  for (const TensorSpec& t : full.tensors()) w.tensors.push_back(checkpoint_tensor(t));
  w.kinds = checkpoint_kinds();
  w.dtype = dtype_of<T>();
  CheckpointMeta::of_run(cfg_, run, zero.optimizer().step_count(), grid_.dp_size(), grid_.tp_size(), grid_.pp_size(),
                         shard_comm_->size())
      .write_to(w);

  // This rank's shard: the pieces it writes (each element of the model by exactly one rank), of
  // the fp32 master weights and both moments alike.
  w.shard.world_rank = grid_.world_rank();
  w.shard.pp = grid_.pp_rank();
  w.shard.dp = grid_.dp_rank();
  w.shard.tp = grid_.tp_rank();
  const std::vector<Piece> pieces = zero.checkpoint_pieces(grid_.dp_size(), grid_.dp_rank());
  std::int64_t len = 0;
  // Only canonical elements are written: not a tp replica's copy of a replicated tensor, not the
  // tied copy, not vocabulary padding. Each element of the model is written by exactly one rank.
  std::vector<Piece> runs;  // what this shard holds, in shard order (local offsets into master)
  for (const Piece& p : pieces)
    for (const TensorSpec& t : layout_.tensors()) {
      if (!t.canonical) continue;
      const std::int64_t a = std::max(p.flat_offset, t.offset), b = std::min(p.flat_offset + p.count, t.offset + t.valid);
      if (a >= b) continue;
      const int gi = full.find(t.name);
      w.segments.push_back(CkptSegment{static_cast<std::int32_t>(gi), t.split_dim < 0 ? 0 : grid_.tp_rank(), 0,
                                       a - t.offset, len, b - a});
      runs.push_back(Piece{a, b - a, p.local_offset + (a - p.flat_offset)});
      len += b - a;
    }
  w.shard.length = len;
  // Host copies the snapshot owns: the live buffers keep changing while a background thread writes.
  const size_t nbytes = static_cast<size_t>(len) * sizeof(T);
  if (spare_.size() == 3 && spare_[0].size() == nbytes) snap.storage = std::move(spare_);
  else snap.storage.assign(3, HostBytes(nbytes));
  spare_.clear();
  T* param = reinterpret_cast<T*>(snap.storage[0].data());
  T* m1 = reinterpret_cast<T*>(snap.storage[1].data());
  T* m2 = reinterpret_cast<T*>(snap.storage[2].data());
  auto p_h = Kokkos::create_mirror_view_and_copy(HostSpace(), View1<const T>(zero.master(), static_cast<size_t>(zero.local_size())));
  auto m_h = Kokkos::create_mirror_view_and_copy(HostSpace(), zero.optimizer().exp_avg().view());
  auto v_h = Kokkos::create_mirror_view_and_copy(HostSpace(), zero.optimizer().exp_avg_sq().view());
  std::int64_t pos = 0;
  for (const Piece& p : runs) {
    std::copy(p_h.data() + p.local_offset, p_h.data() + p.local_offset + p.count, param + pos);
    std::copy(m_h.data() + p.local_offset, m_h.data() + p.local_offset + p.count, m1 + pos);
    std::copy(v_h.data() + p.local_offset, v_h.data() + p.local_offset + p.count, m2 + pos);
    pos += p.count;
  }
  w.arrays = {param, m1, m2};
  return snap;
}

template <class T>
void ModelState<T>::recycle(CheckpointSnapshot&& done) const {
  spare_ = std::move(done.storage);
  done.write.arrays.clear();
}

template <class T>
RunState ModelState<T>::load(const std::string& path) {
  CheckpointReader rd(path, grid_.world_comm());
  const ModelConfig& m = cfg_.model;
  ZeroEngine<T>& zero = *engine_;
  CheckpointMeta meta;
  run_agreed(grid_.world_comm(), "cannot resume from '" + path + "'", [&] {
    meta = CheckpointMeta::read(rd);
    meta.require_complete(path);
    const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> model_keys[] = {
        {"n_layer", {meta.model.n_layer, m.n_layer}},       {"n_head", {meta.model.n_head, m.n_head}},
        {"n_embd", {meta.model.n_embd, m.n_embd}},          {"block_size", {meta.model.block_size, m.block_size}},
        {"vocab_size", {meta.model.vocab_size, m.vocab_size}}, {"bias", {meta.model.bias ? 1 : 0, m.bias ? 1 : 0}}};
    // A checkpoint of another model is a usage error (exit 2: the deck does not match the file),
    // not a damaged file; an older checkpoint of the same run would not help either.
    for (const auto& [key, v] : model_keys) {
      const auto [have, want] = v;
      if (have != want)
        throw ConfigError("it holds another model: [model] " + std::string(key) + " = " + std::to_string(have) +
                          " in the checkpoint, " + std::to_string(want) + " in this run (resume with the deck the "
                          "checkpoint was written with; its /config holds it)");
    }
    for (const TensorSpec& t : layout_.tensors()) {
      const int k = rd.find_tensor(t.name);
      if (k < 0) throw ConfigError("it has no tensor '" + t.name + "': it holds another model");
      if (rd.tensors()[k].shape != t.global_shape)
        throw ConfigError("tensor '" + t.name + "' has another shape: it holds another model");
    }
    for (const std::string& kind : checkpoint_kinds())
      if (std::find(rd.kinds().begin(), rd.kinds().end(), kind) == rd.kinds().end())
        throw CheckpointError("it holds no '" + kind + "' arrays");
    // Every other key of the deck: listed when it differs, refused when it would change what the
    // step or the data position mean (train/resume_check.hpp). Every rank compares the same texts.
    std::optional<Config> stored;
    try {
      stored = meta.deck();
    } catch (const ConfigError& e) {
      log::warn("checkpoint '%s': its deck cannot be compared with this run's (%s)", path.c_str(), e.what());
    }
    if (stored) {
      const ResumeChanges changes = compare_resume_decks(*stored, cfg_, meta.run.step, meta.run.consumed_samples);
      changes.require_allowed();
      changes.log();
    } else if (rd.dtype() != dtype_of<T>()) {
      log::warn("checkpoint '%s' holds %s values; converting to this run's [train] dtype = %s (resume is not bitwise)",
                path.c_str(), rd.dtype() == DataType::f64 ? "float64" : "float32", name_of(cfg_.train.dtype));
    }
  });
  run_agreed(grid_.world_comm(), "cannot read '" + path + "'", [&] {
    // Each rank reads the elements of the pieces its optimizer owns, wherever the writing layout
    // put them (the index maps tensors to shards; read_tp_partition maps tp partitions), so any
    // dp x tp x pp layout and ZeRO stage can resume any other.
    // Mirrors that start as copies of the live arrays: the elements no piece covers (a unit's
    // padding) go back unchanged, as on a host build where the mirror is the array itself.
    auto p_h = Kokkos::create_mirror_view_and_copy(HostSpace(), View1<T>(zero.master(), static_cast<size_t>(zero.local_size())));
    auto m_h = Kokkos::create_mirror_view_and_copy(HostSpace(), zero.optimizer().exp_avg().view());
    auto v_h = Kokkos::create_mirror_view_and_copy(HostSpace(), zero.optimizer().exp_avg_sq().view());
    for (const Piece& p : zero.owned())
      for (const TensorSpec& t : layout_.tensors()) {
        const std::int64_t a = std::max(p.flat_offset, t.offset), b = std::min(p.flat_offset + p.count, t.offset + t.numel);
        if (a >= b) continue;
        const std::int64_t dst = p.local_offset + (a - p.flat_offset);
        const int P = grid_.tp_size(), r = grid_.tp_rank();
        const CkptTensor ct = checkpoint_tensor(t);
        read_tp_partition(rd, "param", ct, P, r, a - t.offset, b - a, dtype_of<T>(), p_h.data() + dst);
        read_tp_partition(rd, "exp_avg", ct, P, r, a - t.offset, b - a, dtype_of<T>(), m_h.data() + dst);
        read_tp_partition(rd, "exp_avg_sq", ct, P, r, a - t.offset, b - a, dtype_of<T>(), v_h.data() + dst);
      }
    Kokkos::deep_copy(View1<T>(zero.master(), static_cast<size_t>(zero.local_size())), p_h);
    Kokkos::deep_copy(zero.optimizer().exp_avg().view(), m_h);
    Kokkos::deep_copy(zero.optimizer().exp_avg_sq().view(), v_h);
    zero.optimizer().set_step_count(meta.adam_step);
  });
  zero.refresh_params();
  return meta.run;
}

template class ModelState<float>;
template class ModelState<double>;

}  // namespace trident
