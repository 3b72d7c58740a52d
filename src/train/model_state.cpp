#include "train/model_state.hpp"

#include "checkpoint/verify.hpp"

#include "kernels/elementwise.hpp"

#include "checkpoint/metadata.hpp"
#include "checkpoint/tensor_read.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "parallel/agree.hpp"
#include "train/model_schema.hpp"
#include "train/resume_check.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>

namespace trident {

template <class T>
ModelState<T>::ModelState(const Config& cfg, const ProcessGrid& grid)
    : cfg_(cfg),
      grid_(grid),
      layout_(ParamLayout::make(cfg.model, cfg.parallel.unit_blocks,
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
  ZeroOptions zopt = ZeroOptions::from(cfg);
  if (zopt.offload_nvme) zopt.offload_file = offload_file_name(cfg.parallel.offload_path, grid.world_rank());
  // Creating the offload file can fail on some ranks only (a full or missing device), and so can
  // an allocation (a rank whose shard does not fit): agreed, so every rank stops with the message
  // naming the file or the buffer.
  const std::string what = zopt.offload_nvme
                               ? "cannot start the optimizer-state offload ([parallel] offload_path) or allocate the "
                                 "model state (trident train --dry-run N shows the memory a rank needs)"
                           : zopt.offload_host
                               ? "cannot allocate the model state or, in host memory, the optimizer state of "
                                 "offload_optimizer = host (trident train --dry-run N shows both; the host block "
                                 "takes 12 bytes per parameter of the rank's shard, times the ranks of a node)"
                               : "cannot allocate the model state: parameters, gradients and optimizer state (trident "
                                 "train --dry-run N shows the memory a rank needs; a higher zero_stage, more ranks or "
                                 "offload_optimizer = nvme need less; on a GPU, offload_optimizer = host moves the optimizer "
                                 "state to host memory)";
  run_agreed(grid.world_comm(), what, [&] {
    engine_ = std::make_unique<ZeroEngine<T>>(layout_, GptSchedule::make(layout_, cfg.model), cfg.train, zopt,
                                              *shard_comm_, comms);
  });
  engine_->initialize(static_cast<std::uint64_t>(cfg.train.seed));
  if (zopt.offload_host) {
    log::info("optimizer state (fp32 master weights, both AdamW moments) in host memory, the AdamW step on the host "
              "(offload_optimizer = host)");
  } else if (engine_->offloaded()) {
    run_agreed(grid.world_comm(), "optimizer-state offload failed", [&] { engine_->check_offload(); });
    log::info("optimizer state%s offloaded to %s (one file per rank, %s)",
              zopt.offload_params ? " and parameter shard" : "", cfg.parallel.offload_path.c_str(),
              "scratch: rebuilt from the checkpoint at every start");
  }
}

template <class T>
std::int64_t ModelState<T>::comm_bytes() const {
  return grid_.dp_comm().stats().total_bytes() + shard_comm_->stats().total_bytes() +
         replicate_comm_->stats().total_bytes() + grid_.tp_comm().stats().total_bytes() +
         grid_.pp_comm().stats().total_bytes() + tied_comm_->stats().total_bytes() +
         grid_.mp_comm().stats().total_bytes();
}

namespace {

/// True when the live state (MemSpace) can be read by the host in place (CPU builds).
constexpr bool kStateOnHost = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
/// True when a save can write the live state in place: host memory and nothing offloaded (an
/// offloaded shard is read from its file through the staging buffer, like device memory).
bool state_in_place(bool offloaded) { return kStateOnHost && !offloaded; }

/// One canonical run of a shard: elements [flat_offset, +count) of tensor `tensor` (an index of
/// the rank's layout), at local_offset in the engine's arrays.
struct ShardRun {
  Piece piece;
  int tensor = 0;
};

/// The runs of canonical elements within `pieces`, in shard order: not a tp replica's copy of a
/// replicated tensor, not the tied copy, not vocabulary padding, not unit padding, so that each
/// element of the model is written by exactly one rank.
std::vector<ShardRun> canonical_runs(const ParamLayout& layout, const std::vector<Piece>& pieces) {
  std::vector<ShardRun> runs;
  for (const Piece& p : pieces)
    for (size_t i = 0; i < layout.tensors().size(); ++i) {
      const TensorSpec& t = layout.tensors()[i];
      if (!t.canonical) continue;
      const std::int64_t a = std::max(p.flat_offset, t.offset), b = std::min(p.flat_offset + p.count, t.offset + t.valid);
      if (a >= b) continue;
      runs.push_back(ShardRun{Piece{a, b - a, p.local_offset + (a - p.flat_offset)}, static_cast<int>(i)});
    }
  return runs;
}

std::vector<Piece> pieces_of(const std::vector<ShardRun>& runs) {
  std::vector<Piece> out;
  for (const ShardRun& r : runs) out.push_back(r.piece);
  return out;
}

std::int64_t shard_length(const std::vector<Piece>& runs) {
  std::int64_t n = 0;
  for (const Piece& r : runs) n += r.count;
  return n;
}

/// Elements of a live view's staging buffer. Host state: runs of at least `in_place` elements
/// are written in place, so the buffer only has to hold the longest stretch of consecutive
/// shorter runs (norm weights, biases), at most `limit` elements; none when there is no such run.
/// Device state: everything goes through it, min(shard, limit) elements.
std::int64_t staging_elements(const std::vector<Piece>& runs, std::int64_t in_place, std::int64_t limit,
                              bool offloaded) {
  std::int64_t need = 0;
  if (!state_in_place(offloaded)) {
    need = shard_length(runs);
  } else {
    std::int64_t stretch = 0;
    for (const Piece& r : runs) {
      stretch = r.count < in_place ? stretch + r.count : 0;
      need = std::max(need, stretch);
    }
  }
  return need == 0 ? 0 : std::max<std::int64_t>(1, std::min(need, limit));
}

/// Reads a shard of the live master weights and moments (MemSpace) by shard position.
template <class T>
struct LiveShard {
  const ZeroEngine<T>* zero = nullptr;
  std::array<const T*, 3> base{};   // master, exp_avg, exp_avg_sq (nullptr: in the offload file)
  std::vector<Piece> runs;          // shard order, local offsets
  std::vector<std::int64_t> start;  // shard position of each run, then the shard length
  bool in_place = kStateOnHost;     // runs can be written from the live arrays

  LiveShard(const ZeroEngine<T>& z, const std::vector<Piece>& shard_runs)
      : zero(&z),
        base{z.master(), z.optimizer().exp_avg().data(), z.optimizer().exp_avg_sq().data()},
        runs(shard_runs),
        in_place(state_in_place(z.offloaded())) {
    start.push_back(0);
    for (const Piece& r : runs) start.push_back(start.back() + r.count);
  }
  std::int64_t length() const { return start.back(); }
  /// The run holding shard position `pos` (< length()).
  size_t run_at(std::int64_t pos) const {
    return static_cast<size_t>(std::upper_bound(start.begin(), start.end(), pos) - start.begin()) - 1;
  }
  /// Live address of shard position `pos` of kind k (within run `r`).
  const T* at(size_t k, size_t r, std::int64_t pos) const { return base[k] + runs[r].local_offset + (pos - start[r]); }
  /// Copies shard elements [first, first + n) of kind k to host memory `dst`, run by run.
  void copy(size_t k, std::int64_t first, std::int64_t n, T* dst) const {
    for (std::int64_t pos = first; pos < first + n;) {
      const size_t r = run_at(pos);
      const std::int64_t c = std::min(start[r + 1], first + n) - pos;
      if (zero->offloaded()) {
        zero->read_state(static_cast<int>(k), runs[r].local_offset + (pos - start[r]), c, dst + (pos - first));
      } else if constexpr (kStateOnHost) {
        std::memcpy(dst + (pos - first), at(k, r, pos), static_cast<size_t>(c) * sizeof(T));
      } else {
        Kokkos::deep_copy(Kokkos::View<T*, HostSpace, Unmanaged>(dst + (pos - first), static_cast<size_t>(c)),
                          View1<const T>(at(k, r, pos), static_cast<size_t>(c)));
      }
      pos += c;
    }
  }
};

/// CheckpointWrite::read_block of a live view: a run of at least `in_place` elements in place
/// (host state), else as many elements as fit gathered into `staging`, stopping before a run
/// that can go in place.
template <class T>
struct LiveBlockReader {
  std::shared_ptr<const LiveShard<T>> shard;
  T* staging = nullptr;
  std::int64_t staging_elems = 0, in_place = 0;

  std::int64_t operator()(std::size_t k, std::int64_t first, std::int64_t max_count, const void** data) const {
    const LiveShard<T>& s = *shard;
    const size_t r = s.run_at(first);
    const bool whole_run_in_place = s.in_place && s.runs[r].count >= in_place;
    if (whole_run_in_place || staging_elems == 0) {
      *data = s.at(k, r, first);
      return std::min(max_count, s.start[r + 1] - first);
    }
    std::int64_t n = 0;
    const std::int64_t limit = std::min(max_count, staging_elems);
    while (n < limit) {
      const size_t q = s.run_at(first + n);
      if (s.in_place && q != r && s.runs[q].count >= in_place) break;
      const std::int64_t c = std::min(s.start[q + 1] - (first + n), limit - n);
      s.copy(k, first + n, c, staging + n);
      n += c;
    }
    *data = staging;
    return n;
  }
};

}  // namespace

template <class T>
CheckpointWrite ModelState<T>::describe(const RunState& run, std::vector<Piece>& runs) const {
  const ZeroEngine<T>& zero = *engine_;
  CheckpointWrite w;
  // The index lists the whole model's tensors (global shapes), identically on every rank.
  const ParamLayout full = ParamLayout::make(cfg_.model, cfg_.parallel.unit_blocks);
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
  std::int64_t len = 0;
  runs.clear();
  for (const ShardRun& r : canonical_runs(layout_, zero.checkpoint_pieces(grid_.dp_size(), grid_.dp_rank()))) {
    const TensorSpec& t = layout_.tensors()[static_cast<size_t>(r.tensor)];
    w.segments.push_back(CkptSegment{static_cast<std::int32_t>(full.find(t.name)), t.split_dim < 0 ? 0 : grid_.tp_rank(),
                                     0, r.piece.flat_offset - t.offset, len, r.piece.count});
    runs.push_back(r.piece);
    len += r.piece.count;
  }
  w.shard.length = len;
  return w;
}

template <class T>
CheckpointSnapshot ModelState<T>::snapshot(const RunState& run) const {
  CheckpointSnapshot snap;
  std::vector<Piece> runs;
  snap.write = describe(run, runs);
  // Host copies the snapshot owns: the live buffers keep changing while a background thread writes.
  const std::int64_t len = snap.write.shard.length;
  const size_t nbytes = static_cast<size_t>(len) * sizeof(T);
  if (spare_.size() != 3 || spare_[0].size() != nbytes) spare_.clear();  // never two copies at once
  if (!spare_.empty()) snap.storage = std::move(spare_);
  else
    for (int k = 0; k < 3; ++k) snap.storage.emplace_back(nbytes);  // not assign(3, copy): one buffer at a time
  spare_.clear();
  const LiveShard<T> shard(*engine_, runs);
  for (size_t k = 0; k < 3; ++k) {
    T* dst = reinterpret_cast<T*>(snap.storage[k].data());
    shard.copy(k, 0, len, dst);
    snap.write.arrays.push_back(dst);
  }
  return snap;
}

template <class T>
CheckpointSnapshot ModelState<T>::live_view(const RunState& run) const {
  spare_.clear();  // a synchronous save needs no copy: do not keep one beside it
  CheckpointSnapshot snap;
  std::vector<Piece> runs;
  snap.write = describe(run, runs);
  snap.live = true;
  const auto t = static_cast<std::int64_t>(sizeof(T));
  LiveBlockReader<T> reader;
  reader.shard = std::make_shared<const LiveShard<T>>(*engine_, runs);
  reader.in_place = kInPlaceBytes / t;
  reader.staging_elems =
      staging_elements(runs, reader.in_place, std::max<std::int64_t>(1, staging_bytes_ / t), engine_->offloaded());
  if (reader.staging_elems > 0) {
    snap.storage.emplace_back(static_cast<size_t>(reader.staging_elems) * sizeof(T));
    reader.staging = reinterpret_cast<T*>(snap.storage[0].data());
  }
  snap.write.read_block = reader;
  return snap;
}

template <class T>
void ModelState<T>::recycle(CheckpointSnapshot&& done) const {
  if (done.live) return;  // a live view's staging buffer is not a snapshot
  spare_ = std::move(done.storage);
  done.write.arrays.clear();
}

template <class T>
std::int64_t ModelState<T>::plan_save_bytes(const Config& cfg, const ParamLayout& layout, const GptSchedule& sched) {
  const int S = cfg.parallel.shard_group_size > 0 ? cfg.parallel.shard_group_size : cfg.parallel.dp;
  const std::vector<Piece> runs = pieces_of(canonical_runs(
      layout, ZeroEngine<T>::plan_checkpoint_pieces(layout, sched, ZeroOptions::from(cfg), S, 0, cfg.parallel.dp, 0, true)));
  const auto t = static_cast<std::int64_t>(sizeof(T));
  if (cfg.checkpoint.async) return 3 * shard_length(runs) * t;
  return staging_elements(runs, kInPlaceBytes / t, std::max<std::int64_t>(1, kSaveStagingBytes / t),
                          cfg.parallel.offload_optimizer == OffloadKind::nvme) *
         t;
}

template <class T>
void ModelState<T>::require_same_model(const CheckpointReader& rd, const CheckpointMeta& meta,
                                       const std::string& hint_text, bool weights_only) const {
  const ModelConfig& m = cfg_.model;
  // A checkpoint of another model is a usage error (exit 2: the deck does not match the file),
  // not a damaged file; an older checkpoint of the same run would not help either.
  const std::string hint = " (" + hint_text + ")";
  if (meta.model.arch != m.arch)
    throw ConfigError(std::string("it holds another model: [model] arch = ") + name_of(meta.model.arch) +
                      " in the checkpoint, " + name_of(m.arch) + " in this run" + hint);
  const bool llama = m.arch == ModelArch::llama;  // ffn_hidden is a llama key
  // Weights alone do not depend on block_size when no tensor does (no learned position embedding).
  const bool any_context = weights_only && family_of(m.arch).position_embedding == nullptr;
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> model_keys[] = {
      {"n_layer", {meta.model.n_layer, m.n_layer}},
      {"n_head", {meta.model.n_head, m.n_head}},
      {"n_embd", {meta.model.n_embd, m.n_embd}},
      {"block_size", {any_context ? 0 : meta.model.block_size, any_context ? 0 : m.block_size}},
      {"vocab_size", {meta.model.vocab_size, m.vocab_size}},
      {"bias", {meta.model.bias ? 1 : 0, m.bias ? 1 : 0}},
      {"n_kv_head", {meta.model.kv_heads(), m.kv_heads()}},
      {"ffn_hidden", {llama ? meta.model.ffn_width() : 0, llama ? m.ffn_width() : 0}},
      {"tie_embeddings", {meta.model.tie_embeddings ? 1 : 0, m.tie_embeddings ? 1 : 0}}};
  for (const auto& [key, v] : model_keys) {
    const auto [have, want] = v;
    if (have != want)
      throw ConfigError("it holds another model: [model] " + std::string(key) + " = " + std::to_string(have) +
                        " in the checkpoint, " + std::to_string(want) + " in this run" + hint);
  }
  for (const TensorSpec& t : layout_.tensors()) {
    const int k = rd.find_tensor(t.name);
    if (k < 0) throw ConfigError("it has no tensor '" + t.name + "': it holds another model" + hint);
    if (rd.tensors()[k].shape != t.global_shape)
      throw ConfigError("tensor '" + t.name + "' has another shape: it holds another model" + hint);
  }
}

template <class T>
void ModelState<T>::set_weights(const WeightSource& src) {
  ZeroEngine<T>& zero = *engine_;
  const int P = grid_.tp_size(), r = grid_.tp_rank();
  // The elements of tensor t in [a, b) of the flat buffer, into dst.
  auto take = [&](const TensorSpec& t, std::int64_t a, std::int64_t b, T* dst) {
    src(checkpoint_tensor(t), P, r, a - t.offset, b - a, dst);
  };
  if (zero.offloaded()) {
    const bool master_resident = !zero.kind_offloaded(0);
    Kokkos::View<T*, HostSpace> p_h;
    if (master_resident)
      p_h = Kokkos::create_mirror_view_and_copy(HostSpace(), View1<T>(zero.master(), static_cast<size_t>(zero.local_size())));
    zero.write_units_host([&](int u, std::int64_t first, std::int64_t count, T* mu, T* m, T* v) {
      const Piece& p = zero.owned()[static_cast<size_t>(u)];
      const std::int64_t lo = p.flat_offset + first, hi = std::min(p.flat_offset + p.count, lo + count);
      std::fill(m, m + count, T(0));
      std::fill(v, v + count, T(0));
      for (const TensorSpec& t : layout_.tensors()) {
        const std::int64_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.numel);
        if (a < b) take(t, a, b, master_resident ? p_h.data() + p.local_offset + first + (a - lo) : mu + (a - lo));
      }
    });
    if (master_resident) Kokkos::deep_copy(View1<T>(zero.master(), static_cast<size_t>(zero.local_size())), p_h);
  } else {
    auto p_h = Kokkos::create_mirror_view_and_copy(HostSpace(), View1<T>(zero.master(), static_cast<size_t>(zero.local_size())));
    for (const Piece& p : zero.owned())
      for (const TensorSpec& t : layout_.tensors()) {
        const std::int64_t a = std::max(p.flat_offset, t.offset), b = std::min(p.flat_offset + p.count, t.offset + t.numel);
        if (a < b) take(t, a, b, p_h.data() + p.local_offset + (a - p.flat_offset));
      }
    Kokkos::deep_copy(View1<T>(zero.master(), static_cast<size_t>(zero.local_size())), p_h);
    fill<T>(zero.optimizer().exp_avg().view(), T(0));
    fill<T>(zero.optimizer().exp_avg_sq().view(), T(0));
  }
  zero.optimizer().set_step_count(0);
  zero.refresh_params();
  if (zero.offloaded())
    run_agreed(grid_.world_comm(), "optimizer-state offload failed", [&] { zero.check_offload(); });
}

template <class T>
CheckpointMeta ModelState<T>::load_weights(const std::string& path,
                                           const std::function<void(const CheckpointMeta&)>& check) {
  CheckpointReader rd(path, grid_.world_comm());
  CheckpointMeta meta;
  run_agreed(grid_.world_comm(), "cannot take the weights of '" + path + "'", [&] {
    meta = CheckpointMeta::read(rd);
    meta.require_complete(path);
    if (check) check(meta);
  });
  require_intact(rd, grid_.world_comm(), "run `trident ckpt verify " + path + "`", model_schema());
  run_agreed(grid_.world_comm(), "cannot take the weights of '" + path + "'", [&] {
    require_same_model(rd, meta,
                       "[train] init_from needs a checkpoint of this deck's [model]; `trident ckpt show` lists the "
                       "checkpoint's",
                       /*weights_only=*/true);
    const ModelConfig& m = cfg_.model;
    if (meta.model.rope_theta != m.rope_theta || meta.model.norm_eps != m.norm_eps)
      log::warn("[train] init_from: the checkpoint's model has rope_theta %g and norm_eps %g, this deck %g and %g: "
                "the weights are used with the deck's values",
                meta.model.rope_theta, meta.model.norm_eps, m.rope_theta, m.norm_eps);
  });
  run_agreed(grid_.world_comm(), "cannot read '" + path + "'", [&] {
    set_weights([&](const CkptTensor& t, int P, int r, std::int64_t first, std::int64_t count, T* dst) {
      read_tp_partition(rd, "param", t, P, r, first, count, dtype_of<T>(), dst);
    });
  });
  return meta;
}

template <class T>
RunState ModelState<T>::load(const std::string& path) {
  CheckpointReader rd(path, grid_.world_comm());
  ZeroEngine<T>& zero = *engine_;
  CheckpointMeta meta;
  run_agreed(grid_.world_comm(), "cannot resume from '" + path + "'", [&] {
    meta = CheckpointMeta::read(rd);
    meta.require_complete(path);
    require_same_model(rd, meta, "resume with the deck the checkpoint was written with; its /config holds it");
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
    if (stored && resume_deck_check_) {
      const bool same_data = same_training_data(meta.run, data_);
      const ResumeChanges changes =
          compare_resume_decks(*stored, cfg_, meta.run.step, meta.run.consumed_samples, same_data);
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
    if (zero.offloaded()) {
      load_offloaded(rd, meta.adam_step);
      return;
    }
    // Mirrors that start as copies of the live arrays: the elements no piece covers (a unit's
    // padding) go back unchanged, as on a host build where the mirror is the array itself.
    auto p_h = Kokkos::create_mirror_view_and_copy(HostSpace(), View1<T>(zero.master(), static_cast<size_t>(zero.local_size())));
    auto m_h = Kokkos::create_mirror_view_and_copy(HostSpace(), zero.optimizer().exp_avg().view());
    auto v_h = Kokkos::create_mirror_view_and_copy(HostSpace(), zero.optimizer().exp_avg_sq().view());
    // Progress of world rank 0's part (parameters and both moments); the other ranks read theirs meanwhile.
    std::int64_t my_elements = 0;
    for (const Piece& p : zero.owned()) my_elements += p.count;
    Progress progress("checkpoint load", 3 * my_elements * static_cast<std::int64_t>(sizeof(T)), ProgressUnit::bytes);
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
        progress.add(3 * (b - a) * static_cast<std::int64_t>(sizeof(T)));
      }
    progress.finish();
    Kokkos::deep_copy(View1<T>(zero.master(), static_cast<size_t>(zero.local_size())), p_h);
    Kokkos::deep_copy(zero.optimizer().exp_avg().view(), m_h);
    Kokkos::deep_copy(zero.optimizer().exp_avg_sq().view(), v_h);
    zero.optimizer().set_step_count(meta.adam_step);
  });
  zero.refresh_params();
  if (zero.offloaded())
    run_agreed(grid_.world_comm(), "optimizer-state offload failed", [&] { zero.check_offload(); });
  return meta.run;
}

template <class T>
void ModelState<T>::load_offloaded(CheckpointReader& rd, std::int64_t adam_step) {
  // Streamed into the offload file unit by unit (the whole shard is never in memory); the
  // master weights go to the live array where they are resident (fp32 stages 0 and 3).
  ZeroEngine<T>& zero = *engine_;
  const bool master_resident = !zero.kind_offloaded(0);
  Kokkos::View<T*, HostSpace> p_h;
  if (master_resident)
    p_h = Kokkos::create_mirror_view_and_copy(HostSpace(), View1<T>(zero.master(), static_cast<size_t>(zero.local_size())));
  const int P = grid_.tp_size(), r = grid_.tp_rank();
  zero.write_units_host([&](int u, std::int64_t first, std::int64_t count, T* mu, T* m, T* v) {
    // Elements [first, first + count) of the unit's local stretch, which the owned piece starts.
    const Piece& p = zero.owned()[static_cast<size_t>(u)];
    const std::int64_t lo = p.flat_offset + first, hi = std::min(p.flat_offset + p.count, lo + count);
    for (const TensorSpec& t : layout_.tensors()) {
      const std::int64_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.numel);
      if (a >= b) continue;
      const std::int64_t in_chunk = a - lo;
      const CkptTensor ct = checkpoint_tensor(t);
      read_tp_partition(rd, "param", ct, P, r, a - t.offset, b - a, dtype_of<T>(),
                        master_resident ? p_h.data() + p.local_offset + first + in_chunk : mu + in_chunk);
      read_tp_partition(rd, "exp_avg", ct, P, r, a - t.offset, b - a, dtype_of<T>(), m + in_chunk);
      read_tp_partition(rd, "exp_avg_sq", ct, P, r, a - t.offset, b - a, dtype_of<T>(), v + in_chunk);
    }
  });
  if (master_resident) Kokkos::deep_copy(View1<T>(zero.master(), static_cast<size_t>(zero.local_size())), p_h);
  zero.optimizer().set_step_count(adam_step);
  // An offload failure is not the checkpoint's: load() reports it in its own agreement after the
  // refresh ("optimizer-state offload failed"), not as "cannot read" the checkpoint.
}

template class ModelState<float>;
template class ModelState<double>;

}  // namespace trident
