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
// Mixed precision (param_dtype = bf16 | fp16): working params are stored and all-gathered in 16
// bits and converted to the compute type in the slot; master weights and moments are fp32 (the
// compute type); reduce_dtype = bf16 | fp16 reduces gradients in 16 bits (summed in float,
// rounded to the format: an fp16 partial sum beyond 65504 becomes inf, which the loss scaler of
// train/numerics.hpp reads as an overflow).
//
// Optimizer-state offload (offload_optimizer = nvme; ZeRO-Infinity, Rajbhandari et al. 2021, sec.
// 5.1 and 6.2): the rank's fp32 master weights (where they are a separate copy: bf16 working params
// or stages 1-2) and both Adam moments live in a per-rank scratch file. Each unit's local stretch
// is cut into chunks of at most offload_chunk_bytes (16 MiB) of state, one record per chunk
// ([master | exp_avg | exp_avg_sq] or [exp_avg | exp_avg_sq], count elements each). step() streams
// the chunks through two staging buffers: the read of chunk i+1 and the write of chunk i-1 run on
// the file's I/O thread while chunk i is updated and its working params refreshed (at stages 1-2 a
// unit's all-gather follows its last chunk). Resident optimizer memory is two records instead of
// the whole shard, whatever a unit's size. The arithmetic is the resident step's,
// unit by unit, so results are bitwise equal. An I/O failure is kept, the step's collectives still
// run on every rank, and check_offload() raises it (callers agree on it over world).
//
// Host offload (offload_optimizer = host, a GPU build; ZeRO-Offload, Ren et al. 2021, sec. 4): the
// same state, in the same chunk records, lives in one block of host memory (page-locked where the
// driver allows) instead of a file, and step() runs the AdamW update on the host where the state
// is: per chunk, the gradient chunk is copied device -> host, updated on the host (bitwise the
// device kernel: kernels/adamw.hpp), and the updated fp32 master chunk copied host -> device to
// refresh the working params. Device memory holds one chunk of state staging instead of the shard's
// 8 or 12 bytes per parameter; the bus carries 4 + 4 bytes per parameter per step (the gradient
// down, the master up). Initialisation, refresh and snapshots use the chunk records as the nvme
// mode does. In a host build the mode is refused by the deck (the state is in host memory
// already) but the engine runs it, with no copies, for its tests.
#pragma once

#include "core/config.hpp"
#include "core/memory.hpp"
#include "kernels/convert.hpp"
#include "model/gpt.hpp"
#include "offload/offload_file.hpp"
#include "parallel/communicator.hpp"
#include "train/optimizer.hpp"

#include <array>
#include <functional>
#include <string>
#include <memory>
#include <vector>

namespace trident {

/// What the engine shards and in which types. Working parameters and the gradient reduction may
/// each be 16-bit (bf16 or fp16, HalfFormat); master weights, moments and accumulated gradients
/// stay in the compute type.
struct ZeroOptions {
  int stage = 0;
  bool prefetch = true;
  bool overlap_reduce = true;
  bool half_params = false;   ///< working params stored and all-gathered in param_format
  bool half_reduce = false;   ///< gradients summed over dp in reduce_format
  HalfFormat param_format = HalfFormat::bf16;
  HalfFormat reduce_format = HalfFormat::bf16;
  bool offload_nvme = false;  ///< master weights (when a separate copy) and moments in offload_file
  /// Master weights (when a separate copy) and moments in host memory, the AdamW step on the host
  /// (offload_optimizer = host). Excludes offload_nvme.
  bool offload_host = false;
  /// Stage 3 with offload_nvme: the working parameter shard also lives in offload_file, one record
  /// per unit, read just before the unit's all-gather and written when the step refreshes it; the
  /// fp32 master weights are then always a copy of their own (in the chunk records).
  bool offload_params = false;
  std::string offload_file;   ///< this rank's offload file (ModelState names it: offload_file_name)
  /// Largest record of the offload file (bytes of state, all kinds): a unit's stretch is cut into
  /// chunks of at most this, so resident optimizer memory is two chunks whatever a unit's size.
  /// Environment TRIDENT_OFFLOAD_CHUNK_BYTES overrides it (tests).
  std::int64_t offload_chunk_bytes = std::int64_t{16} << 20;
  /// [parallel] zero_stage, prefetch, overlap_reduce; [train] param_dtype, reduce_dtype. Local.
  static ZeroOptions from(const Config& cfg);
};

/// `<dir>/trident-offload.<world_rank>.bin`: the file of one rank under [parallel] offload_path.
std::string offload_file_name(const std::string& dir, int world_rank);

/// One record of an offload file: elements [begin, begin + count) of unit `unit`'s local stretch
/// (at local offset `local`); `last`: the unit's final chunk.
struct OffloadChunk {
  int unit = 0;
  std::int64_t begin = 0, count = 0, local = 0;
  bool last = false;
};

/// Offload traffic and the time the training thread waited for it, cumulative. Local.
struct OffloadCounters {
  std::int64_t bytes_read = 0, bytes_written = 0;
  double wait_seconds = 0.0;
};

/// The communicators an engine uses besides its shard group.
struct ZeroComms {
  Communicator* replicate = nullptr;  ///< HSDP replicas of the same pieces (nullptr or size 1: none)
  Communicator* model = nullptr;      ///< tp x pp group of equal dp coordinate: completes the global norm
  Communicator* tied = nullptr;       ///< first and last pipeline stage: sums the tied embedding's gradient
};

/// offload_optimizer = host's buffers of one rank by where they live (ZeroEngine::plan_offload_host_split).
struct HostOffloadBytes {
  std::int64_t host = 0, device = 0;
};

/// The records of one rank's offload file as the engine transfers them (ZeroEngine::plan_offload_records).
struct OffloadRecordBytes {
  std::int64_t chunks = 0;                  ///< the optimizer chunk records together, bytes
  std::vector<std::int64_t> param_records;  ///< per unit, its parameter record's bytes (offload_params)
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
  /// Bytes of the offload file of shard rank `shard_rank` (0 without offload): per chunk
  /// aligned(kinds * count * sizeof(T)), kinds = 3 where the master weights are a separate copy,
  /// else 2 (the fp32 working params are the master and stay); with offload_params, per unit
  /// aligned(s_u * bytes of a working param) more. Local, pure.
  static std::int64_t plan_offload_bytes(const ParamLayout& layout, const GptSchedule& sched, const ZeroOptions& opt,
                                         int shard_size, int shard_rank);
  /// The records of shard rank `shard_rank`'s offload file as the engine transfers them (bytes,
  /// each aligned as OffloadFile stores it): `chunks`, the optimizer chunk records together (a
  /// step reads and writes each once); `param_records`, per unit, its parameter record
  /// (offload_params: written once per step, read at each gather of the unit; empty otherwise).
  /// Both zero without offload to nvme. Local, pure.
  static OffloadRecordBytes plan_offload_records(const ParamLayout& layout, const GptSchedule& sched,
                                                 const ZeroOptions& opt, int shard_size, int shard_rank);
  /// Host bytes of the offload staging: two buffers of the largest record (counted as optimizer in
  /// plan()), and with offload_params three of the largest parameter record (one read, two
  /// written behind; counted as params).
  /// Local, pure.
  static std::int64_t plan_offload_staging_bytes(const ParamLayout& layout, const GptSchedule& sched,
                                                 const ZeroOptions& opt, int shard_size, int shard_rank);
  /// offload_host's buffers split by where they live, for a build whose state is on a GPU (`gpu`,
  /// whatever this build is: `trident plan` sizes a CUDA machine from a host build): host, the
  /// block of chunk records (as plan_offload_bytes would size them in a file; and with `gpu` the
  /// gradient chunk's staging); device, with `gpu` one chunk of three kinds of staging. Zeros without offload_host. plan() adds both to optimizer. Local, pure.
  static HostOffloadBytes plan_offload_host_split(const ParamLayout& layout, const GptSchedule& sched,
                                                  const ZeroOptions& opt, int shard_size, int shard_rank, bool gpu);

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

  // ---- offload ----
  /// True when the optimizer state lives in the offload file or host block (offload_nvme, offload_host).
  bool offloaded() const { return off_ != nullptr || opt_.offload_host; }
  /// True when state kind k (0 master, 1 exp_avg, 2 exp_avg_sq) lives in the offload file or host block.
  bool kind_offloaded(int k) const { return offloaded() && (k > 0 || off_kinds_ == 3); }
  /// Copies local elements [local_offset, +count) of state kind k to host memory `dst`, from the
  /// live arrays, the host block or the offload file (between steps). Local. Throws IoError naming the file.
  void read_state(int k, std::int64_t local_offset, std::int64_t count, T* dst) const;
  /// Rewrites every unit's offloaded state chunk by chunk: fill(u, begin, count, master, exp_avg,
  /// exp_avg_sq) gets zeroed host buffers for elements [begin, begin + count) of unit u's local
  /// stretch (master nullptr where the master is resident) to fill, e.g. from a checkpoint;
  /// padding stays zero. Written behind while the next chunk is filled. Local; I/O failures are
  /// kept for check_offload().
  void write_units_host(const std::function<void(int, std::int64_t, std::int64_t, T*, T*, T*)>& fill);
  /// Raises the first offload I/O failure of this rank (IoError naming the file). Local: callers
  /// wrap it in run_agreed over world so every rank stops alike.
  void check_offload() const;
  /// Offload traffic so far (zeros without offload). Local.
  OffloadCounters offload_counters() const;
  /// Test hook (TRIDENT_POISON=offload_truncate): truncates this rank's offload file. Local.
  void truncate_offload_for_test();
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
    TrackedBuffer<std::uint16_t> staging; // 16-bit all-gather target (stage 3 + half params)
    int unit = -1;
    bool held = false, valid = false, pending = false;
    Request req;
  };
  struct GradSlot {
    TrackedBuffer<T> buf, recv;
    TrackedBuffer<std::uint16_t> send_h, recv_h;
    int unit = -1;
    bool pending = false;
    Request req;
  };
  void start_gather(Slot& s, int unit);
  void finish_gather(Slot& s);
  void try_prefetch();
  void complete_reduce(GradSlot& g);
  void invalidate_slots();
  void refresh_unit(int u, const T* master_u);
  // Working params from elements [begin, begin + count) of unit u's master weights; at stages 1-2
  // the unit's all-gather follows in finish_refresh_unit (collective over shard_comm).
  void refresh_chunk(int u, std::int64_t begin, std::int64_t count, const T* master_chunk);
  void finish_refresh_unit(int u);
  // Streams every chunk through the two staging buffers: reads it (read) or zeroes it, calls
  // f(chunk, master, m, v, ok) with MemSpace pointers (host pointers when on_host), writes it
  // back (write). f runs for every chunk on every rank, ok = false after an I/O failure.
  void stream(bool read, bool write, bool on_host, const std::function<void(const OffloadChunk&, T*, T*, T*, bool)>& f);
  // offload_params: reads unit u's parameter record into pread_ and waits; a failure is kept in
  // off_error_ (the caller's collectives still run).
  void param_record_read(int u);
  // offload_host: the step, chunk by chunk, with the AdamW update on the host.
  void step_host(const T* g, double lr, double grad_scale);
  // Waits for a queued offload request, keeping a failure in off_error_.
  void wait_kept(OffloadFile::Ticket t);
  // offload_params read-ahead: queue the record of the next unit of the pass after `u` into pread_
  // (free once u's piece is in its slot), and drop a pending one (waited for; after a step its
  // data would be stale).
  void read_ahead_after(int u);
  void drop_read_ahead();
  bool params_offloaded() const { return opt_.offload_params && off_ != nullptr; }
  std::int64_t padded(int u) const { return s_u_[static_cast<size_t>(u)] * S_; }
  DataType param_dt() const { return opt_.param_format == HalfFormat::fp16 ? DataType::f16 : DataType::bf16; }
  DataType reduce_dt() const { return opt_.reduce_format == HalfFormat::fp16 ? DataType::f16 : DataType::bf16; }

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
  TrackedBuffer<std::uint16_t> params_h_;  // working params in 16 bits: full or shard
  TrackedBuffer<T> master_own_;        // master weights when they are not the working params
  T* master_ = nullptr;
  std::unique_ptr<AdamW<T>> adam_;
  TrackedBuffer<T> grads_full_, grads_shard_;
  TrackedBuffer<T> stage_T_;           // stage 1-2 refresh staging (working params in T)
  TrackedBuffer<std::uint16_t> stage_h_;   // ... in 16 bits
  TrackedBuffer<T> grads_stage_;       // stage 1 reduce-scatter staging
  TrackedBuffer<std::uint16_t> reduce_h_;  // stage 0-1 16-bit gradient reduction
  std::vector<Slot> slots_;
  std::vector<GradSlot> gslots_;
  std::vector<int> slot_of_;           // unit -> slot: one per special unit, then two alternating for blocks
  std::vector<int> gslot_in_use_;      // unit -> grad slot holding it in this micro-batch, or -1
  std::vector<int> order_;
  size_t cursor_ = 0;
  // offload (the parameter records' buffers first: destroyed after off_, whose destructor waits
  // for a read still queued into them)
  AlignedHostBuffer pread_;            // offload_params: one unit's parameter record, read
  std::array<AlignedHostBuffer, 2> pwrite_;  // ... written behind, alternating per unit
  std::array<OffloadFile::Ticket, 2> pw_ticket_{0, 0};
  int pw_idx_ = 0;
  int ahead_unit_ = -1;                // offload_params: the unit whose record is being read ahead into pread_
  OffloadFile::Ticket ahead_ticket_ = 0;
  std::unique_ptr<OffloadFile> off_;
  int off_kinds_ = 0;                  // 3: master + moments in the file; 2: moments only
  std::vector<OffloadChunk> chunks_;   // the file's records, in local order
  std::array<AlignedHostBuffer, 2> obuf_;
  std::array<TrackedBuffer<T>, 2> odev_;  // device copies of the staging buffers (GPU builds)
  TrackedBuffer<std::uint16_t> pdev_h_;  // ... its 16-bit conversion on the device (GPU builds)
  mutable std::string off_error_;
  double off_wait_s_ = 0.0;
  // offload_host: the chunk records in one host block, record i at element hrec_[i]; page-locked
  // (hpin_ unpins before the block is freed); the host staging of one gradient chunk (GPU builds).
  struct HostPin {
    void* p = nullptr;
    HostPin() = default;
    HostPin(const HostPin&) = delete;
    HostPin& operator=(const HostPin&) = delete;
    ~HostPin();
  };
  AlignedHostBuffer hstate_, hgrad_;
  HostPin hpin_, hgrad_pin_;
  std::vector<std::int64_t> hrec_;
  std::int64_t host_read_ = 0, host_written_ = 0;  // bytes host -> device and device -> host (GPU builds)
};

}  // namespace trident
