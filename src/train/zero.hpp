// train/zero.hpp: ZeRO stages 0-3 and FSDP over the dp axis (Rajbhandari et al. 2020, "ZeRO:
// memory optimizations toward training trillion parameter models", sec. 5; Zhao et al. 2023,
// "PyTorch FSDP", sec. 3), with hybrid sharding, mixed precision, prefetch and overlapped
// gradient reduction.
//
// Layer: train. The engine is the Gpt's UnitProvider: it owns the parameters, gradients and
// optimizer state of one rank and does every dp communication of a step.
//
//   stage 0  working params, grads, master weights and moments replicated; grads all-reduced.
//   stage 1  + master weights and moments sharded: grads reduce-scattered after the last
//            micro-batch, each rank updates its piece, working params all-gathered.
//   stage 2  + grads sharded: each unit's gradient is reduce-scattered as soon as its backward
//            is done (bucket = unit), overlapped with earlier units when overlap_reduce is on.
//   stage 3  + working params sharded (FSDP): a unit is all-gathered into a *slot* just before
//            it runs and its slot is returned right after; with prefetch, the next unit's
//            all-gather is started (non-blocking) while the current unit computes.
//
// Pieces: unit u of n_u elements is cut into S = shard_group_size pieces of s_u = ceil(n_u / S)
// (padding only at the end of the unit); shard rank r owns piece r of every unit. Local arrays
// (master, moments, gradient shard, parameter shard) pack the pieces unit after unit, s_u
// elements each; padding is zero and never reaches a norm, the optimizer or a checkpoint.
// Hybrid sharding (HSDP): the dp ranks form dp / S groups of S consecutive ranks; pieces are
// owned within a group (shard_comm) and replicated across groups (replicate_comm), whose
// gradient shards are all-reduced once per step.
//
// Slots (stage 3, and bf16 working params): fixed unsharded buffers, one for the embedding unit,
// one for the head unit, and two alternating for the block units (current + prefetched), so the
// gathered memory is bounded by two blocks plus the embedding and head whatever the depth. A unit
// still present in its slot when needed again within a step (the tied embedding for the head, the
// last block at the start of backward) is not gathered again.
//
// Mixed precision (param_dtype = bf16): working params are stored and all-gathered in bf16 and
// converted to the compute type in the slot; master weights and moments are fp32 (the compute
// type); reduce_dtype = bf16 reduces gradients in bf16 (summed in float, rounded to bf16).
#pragma once

#include "core/config.hpp"
#include "core/memory.hpp"
#include "kernels/convert.hpp"
#include "model/gpt.hpp"
#include "parallel/communicator.hpp"
#include "train/optimizer.hpp"

#include <array>
#include <memory>
#include <vector>

namespace trident {

struct ZeroOptions {
  int stage = 0;
  bool prefetch = true;
  bool overlap_reduce = true;
  bool bf16_params = false;
  bool bf16_reduce = false;
  static ZeroOptions from(const Config& cfg);
};

/// The communicators an engine uses besides its shard group.
struct ZeroComms {
  Communicator* replicate = nullptr;  ///< HSDP replicas of the same pieces (nullptr or size 1: none)
  Communicator* model = nullptr;      ///< tp x pp group of equal dp coordinate: completes the global norm
  Communicator* tied = nullptr;       ///< first and last pipeline stage: sums the tied embedding's gradient
};

/// Bytes per MemCategory (index = static_cast<int>(MemCategory)).
using MemoryBytes = std::array<std::int64_t, static_cast<size_t>(MemCategory::count_)>;

template <class T>
class ZeroEngine final : public UnitProvider<T> {
 public:
  /// Allocates this rank's state. shard_comm: the S ranks that split each unit (dp_comm without
  /// HSDP); comms: the HSDP replicas, the model-parallel group for the norm, and the tied-embedding
  /// pair of pipeline stages (each optional). Local (no communication until initialize()).
  ZeroEngine(const ParamLayout& layout, const GptSchedule& sched, const TrainConfig& train, const ZeroOptions& opt,
             Communicator& shard_comm, const ZeroComms& comms = ZeroComms{});

  /// Bytes by category the constructor allocates on shard rank `shard_rank` of `shard_size`
  /// (the --dry-run prediction; the Gpt's activations are not included). Local, pure.
  static MemoryBytes plan(const ParamLayout& layout, const GptSchedule& sched, const ZeroOptions& opt,
                          int shard_size, int shard_rank);

  /// GPT-2 initialisation of the owned pieces (layout independent), then working params from
  /// them. Collective over shard_comm (stages 1-2 all-gather).
  void initialize(std::uint64_t seed);
  /// Zeroes the gradient. Local.
  void begin_step();
  /// Completes this micro-batch's gradient reductions (stages 2-3). Collective over shard_comm.
  void end_micro_batch();
  /// After the last micro-batch: all-reduce (stage 0) or reduce-scatter (stage 1) the gradient,
  /// all-reduce gradient shards across replicas (HSDP), and sum the tied embedding's gradient over
  /// the first and last pipeline stage (Megatron-LM's embedding group). Collective over those comms.
  void finish_gradients();
  /// Global gradient norm, every element of the model counted once (canonical tensors only: not a
  /// tp replica's copy of a replicated tensor, not the tied copy). Collective over shard_comm and
  /// the model group; the same value on every rank.
  double grad_norm();
  /// AdamW on the owned pieces with learning rate lr and gradient factor grad_scale, then new
  /// working params. Collective over shard_comm (stages 1-2 all-gather).
  void step(double lr, double grad_scale);
  /// Working params from the master weights (after loading a checkpoint). Collective over shard_comm.
  void refresh_params();
  /// Test hook (TRIDENT_POISON=grad, core/fault.hpp): writes a NaN into this rank's reduced
  /// gradient, the first element grad_norm() reads. Local.
  void poison_gradient();

  // UnitProvider
  void begin_pass(Pass pass, const std::vector<int>& order) override;
  const T* acquire(int unit) override;
  void release(int unit) override;
  T* grads(int unit) override;
  void grads_done(int unit) override;
  void progress() override;

  /// The pieces this rank's optimizer owns (local offsets into master()/moments).
  const std::vector<Piece>& owned() const { return owned_; }
  /// The pieces this rank writes to a checkpoint: its dp piece of every unit at stage 0, its
  /// owned pieces at stages 1-3 on the first replica group, nothing on the others. Each element
  /// of the model is written by exactly one rank.
  std::vector<Piece> checkpoint_pieces(int dp_size, int dp_rank) const;
  /// The same for the engine shard rank `shard_rank` of `shard_size` would have, on dp rank
  /// `dp_rank` of `dp_size`, on the first HSDP replica group or not (the --dry-run prediction of
  /// a save's memory). Local, pure.
  static std::vector<Piece> plan_checkpoint_pieces(const ParamLayout& layout, const GptSchedule& sched,
                                                   const ZeroOptions& opt, int shard_size, int shard_rank, int dp_size,
                                                   int dp_rank, bool first_replica);
  T* master() { return master_; }
  const T* master() const { return master_; }
  AdamW<T>& optimizer() { return *adam_; }
  const AdamW<T>& optimizer() const { return *adam_; }
  std::int64_t local_size() const { return local_size_; }
  int stage() const { return opt_.stage; }

 private:
  struct Slot {
    TrackedBuffer<T> compute;      // unsharded unit in the compute type
    TrackedBuffer<bf16_t> staging; // bf16 all-gather target (stage 3 + bf16)
    int unit = -1;
    bool held = false, valid = false, pending = false;
    Request req;
  };
  struct GradSlot {
    TrackedBuffer<T> buf, recv;
    TrackedBuffer<bf16_t> send_h, recv_h;
    int unit = -1;
    bool pending = false;
    Request req;
  };
  void start_gather(Slot& s, int unit);
  void finish_gather(Slot& s);
  void try_prefetch();
  void complete_reduce(GradSlot& g);
  void invalidate_slots();
  std::int64_t padded(int u) const { return s_u_[static_cast<size_t>(u)] * S_; }

  const ParamLayout& layout_;
  GptSchedule sched_;
  ZeroOptions opt_;
  Communicator& shard_;
  ZeroComms comms_;
  int tied_unit_ = -1;
  std::vector<Piece> norm_pieces_;     // owned pieces of canonical tensors (local offsets)
  int S_, r_;
  std::vector<std::int64_t> s_u_, l_u_;
  std::vector<Piece> owned_;
  std::int64_t local_size_ = 0;
  TrackedBuffer<T> params_T_;          // working params in T: full (stages 0-2) or shard (stage 3)
  TrackedBuffer<bf16_t> params_h_;     // working params in bf16: full or shard
  TrackedBuffer<T> master_own_;        // master weights when they are not the working params
  T* master_ = nullptr;
  std::unique_ptr<AdamW<T>> adam_;
  TrackedBuffer<T> grads_full_, grads_shard_;
  TrackedBuffer<T> stage_T_;           // stage 1-2 refresh staging (working params in T)
  TrackedBuffer<bf16_t> stage_h_;      // ... in bf16
  TrackedBuffer<T> grads_stage_;       // stage 1 reduce-scatter staging
  TrackedBuffer<bf16_t> reduce_h_;     // stage 0-1 bf16 gradient reduction
  std::vector<Slot> slots_;
  std::vector<GradSlot> gslots_;
  std::vector<int> slot_of_;           // unit -> slot: one per special unit, then two alternating for blocks
  std::vector<int> gslot_in_use_;      // unit -> grad slot holding it in this micro-batch, or -1
  std::vector<int> order_;
  size_t cursor_ = 0;
};

}  // namespace trident
