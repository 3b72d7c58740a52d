// core/config.hpp: the input deck (an INI file with sections [model] [parallel] [train] [data]
// [checkpoint]) as one plain struct, its parser and its validation.
//
// Layer: core. The parser uses Boost.Program_options inside config.cpp; no Boost type appears here.
// Invariants: a Config that left validate() is consistent with the number of ranks: dp is resolved
// (never "auto"), micro_batch_size is resolved, and every divisibility rule holds. Every rejected
// value raises ConfigError naming the section, key and value.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace trident {

// ---- options that select behaviour: enums, parsed once here (a deck holds their names) ----------

/// Pipeline schedule over pp stages: 1F1B (PipeDream-Flush, Narayanan et al. 2021, sec. 2.2; at
/// most pp - stage micro-batches in flight) or GPipe (Huang et al. 2019: all forwards, then all
/// backwards).
enum class PipelineScheduleKind { one_f_one_b, gpipe };
/// Floating-point type of a buffer class: compute/master weights (f32 | f64), working parameters
/// and gradient reduction (f32 | bf16 | fp16). fp16 is IEEE binary16 (5 exponent bits, range
/// +-65504); bf16 is brain floating point (float's 8 exponent bits, 8 bits of precision).
enum class Precision { f32, f64, bf16, fp16 };
/// True for the 16-bit types (bf16, fp16): 2 bytes per element.
constexpr bool is_half(Precision p) { return p == Precision::bf16 || p == Precision::fp16; }
/// Activation checkpointing: keep everything, or only each block's input and recompute its forward
/// in backward (Chen et al. 2016).
enum class Recompute { none, block };
/// What a failed checkpoint save does to the run: stop (exit 1) or keep training.
enum class OnSaveError { stop, keep_training };
/// Whether a run must own its out_dir (an exclusive lock, checkpoint/run_lock.hpp) before it
/// starts: required (refused when another job holds it or the file system grants no lock) or off
/// (no lock taken; the user answers for one job per directory).
enum class RunLockMode { required, off };
/// Library of the grid's axis collectives (dp, tp, pp, mp): NCCL when the build has it, Kokkos
/// computes on a CUDA GPU and every rank has its own GPU (automatic), or MPI / NCCL as asked
/// (parallel/comm_backend.hpp decides; the world communicator is always MPI).
enum class CommBackend { automatic, mpi, nccl };
/// What a step with a non-finite loss or gradient norm (on any rank) does: stop the run (exit 1)
/// or skip the update and go on (Megatron-LM's and DeepSpeed's skipped iterations).
enum class NonfiniteAction { stop, skip };
/// Step-time breakdown timers (train/step_timers.hpp, docs/scaling.md "Step-time breakdown"): off
/// (no timer, the breakdown columns of metrics.csv are empty), coarse (steady_clock around each
/// part and in the collectives; on a GPU a part that only enqueues kernels is charged to whatever
/// waits for them next) or fine (coarse plus a Kokkos::fence() at both ends of every part, so device
/// work is charged to the part that enqueued it, at the cost of the overlap that fences remove).
enum class TimerMode { off, coarse, fine };

/// Where state that does not fit the accelerator goes (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity,
/// Rajbhandari et al. 2021): nowhere (none), host memory (host: a GPU build's optimizer step on the
/// CPU), or a per-rank scratch file on a local disk, streamed unit by unit (nvme; offload/).
enum class OffloadKind { none, host, nvme };

/// Model family (model/family.hpp registers each): GPT-2 (Radford et al. 2019: learned positions,
/// LayerNorm, GELU MLP, tied head) or Llama-style (Touvron et al. 2023: RMSNorm, rotary positions,
/// SwiGLU MLP, grouped-query attention, no biases).
enum class ModelArch { gpt2, llama };

/// How attention runs (kernels/attention.hpp): gemm keeps the (T, T) probabilities of every head
/// (batched GEMMs, saved for backward); fused never stores them (one query row at a time, the
/// log-sum-exp saved instead, as FlashAttention; Dao et al. 2022).
enum class AttentionKernel { gemm, fused };

/// The library of fp32 GEMMs in a host build ([train] host_gemm; kernels/gemm.hpp HostGemm): auto
/// picks the faster of the two by a probe recorded per CPU (train/peak.hpp); shape picks it for
/// each GEMM shape of the run, by a probe of that shape recorded per CPU.
enum class HostGemmChoice { auto_, openblas, onednn, shape };

/// The deck name of each value ("1f1b", "float", "double", "bf16", "block", "continue", ...).
const char* name_of(PipelineScheduleKind v);
const char* name_of(Precision v);
const char* name_of(Recompute v);
const char* name_of(OnSaveError v);
const char* name_of(RunLockMode v);
const char* name_of(CommBackend v);
const char* name_of(NonfiniteAction v);
const char* name_of(TimerMode v);
const char* name_of(OffloadKind v);
const char* name_of(ModelArch v);
const char* name_of(AttentionKernel v);
const char* name_of(HostGemmChoice v);
/// Every ModelArch value, in declaration order (the deck's choices, the checkpoint attribute's).
const std::vector<ModelArch>& all_model_archs();

/// Model shape: GPT-2's (Radford et al. 2019; nanoGPT's GPTConfig) plus the Llama family's keys
/// (HF transformers' LlamaConfig names in brackets).
struct ModelConfig {
  ModelArch arch = ModelArch::gpt2;
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int block_size = 64;   ///< maximum context length T
  int vocab_size = 0;    ///< 0: taken from the token file
  bool bias = false;     ///< biases in Linear and LayerNorm (nanoGPT default False)
  double dropout = 0.0;  ///< embedding, attention-probability and residual dropout
  // Llama family (refused or ignored by gpt2, as validate() says):
  int n_kv_head = 0;          ///< key/value heads [num_key_value_heads]; 0 = n_head (no grouping)
  int ffn_hidden = 0;         ///< SwiGLU width F [intermediate_size]; 0 = Llama's rounding of 8C/3
  int ffn_multiple_of = 256;  ///< the rounding of ffn_hidden = 0: F is a multiple of this
  double norm_eps = 1e-5;     ///< RMSNorm epsilon [rms_norm_eps]
  double rope_theta = 10000.0;  ///< rotary base [rope_theta]
  bool tie_embeddings = true;   ///< LM head = token embedding [tie_word_embeddings]; gpt2 always ties
  AttentionKernel attention = AttentionKernel::gemm;  ///< the attention kernel (not the model's math)

  /// Key/value heads after the default (n_head when n_kv_head = 0).
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  /// SwiGLU width after the default: ffn_multiple_of * ceil((2 * 4C / 3) / ffn_multiple_of), as
  /// Meta's llama/model.py FeedForward (ffn_dim_multiplier 1).
  int ffn_width() const {
    if (ffn_hidden > 0) return ffn_hidden;
    // In 64 bits: a huge ffn_multiple_of must not wrap to a small width (validate() bounds both).
    const std::int64_t h = 2 * (4 * static_cast<std::int64_t>(n_embd)) / 3, q = ffn_multiple_of > 0 ? ffn_multiple_of : 1;
    const std::int64_t w = q * ((h + q - 1) / q);
    return w > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max() : static_cast<int>(w);
  }
};

/// Process-grid shape. dp = 0 means "auto": world_size / (tp * pp), as in Megatron-LM.
struct ParallelConfig {
  int dp = 0;
  int tp = 1;
  int pp = 1;
  int zero_stage = 0;        ///< 0 replicated, 1 + optimizer state sharded, 2 + gradients, 3 + parameters (FSDP)
  int shard_group_size = 0;  ///< HSDP: shard within groups of this many dp ranks, replicate across; 0 = dp
  int unit_blocks = 1;       ///< transformer blocks per sharding unit; 0 = the whole model is one unit
  bool prefetch = true;      ///< stage 3: all-gather the next unit while this one computes
  bool overlap_reduce = true;  ///< stages 2-3: reduce-scatter a unit's gradient while earlier units compute
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::one_f_one_b;  ///< 1f1b | gpipe
  CommBackend comm_backend = CommBackend::automatic;  ///< auto | mpi | nccl: library of the axis collectives
  std::string pp_layers;             ///< blocks per stage, e.g. "3,3,2,2"; empty = balanced
  OffloadKind offload_optimizer = OffloadKind::none;  ///< fp32 master weights + Adam moments: none | host | nvme
  OffloadKind offload_params = OffloadKind::none;     ///< ZeRO-3 parameter shards: none | nvme (needs offload_optimizer = nvme)
  std::string offload_path;  ///< directory of the per-rank offload files (scratch); required with nvme
};

/// Blocks of each pipeline stage: `p.pp_layers` parsed, or n_layer split as evenly as possible
/// (earlier stages take the remainder). Throws ConfigError naming [parallel] pp_layers when it
/// does not list pp positive counts summing to n_layer.
std::vector<int> stage_layers(const ModelConfig& m, const ParallelConfig& p);

struct TrainConfig {
  std::int64_t global_batch_size = 12;  ///< sequences per optimizer step, over all dp ranks
  std::int64_t micro_batch_size = 0;    ///< sequences per forward/backward; 0: global / dp
  std::int64_t max_steps = 2000;        ///< length of the run and of the LR schedule
  std::int64_t stop_at_step = 0;        ///< 0: none; else stop (with a checkpoint) after this step
  double time_limit_min = 0.0;          ///< 0: none; else stop (with a checkpoint) before this wall time
  double lr = 1e-3;
  double min_lr = 1e-4;
  std::int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double eps = 1e-8;
  double grad_clip = 1.0;        ///< max global gradient norm; 0 disables clipping
  std::int64_t eval_interval = 250;  ///< 0: evaluate only at the end
  std::int64_t eval_iters = 0;       ///< 0: the whole validation split; else this many batches
  std::int64_t seed = 1337;
  std::int64_t log_interval = 1;
  std::string out_dir;          ///< empty: runs/<deck name>
  Precision dtype = Precision::f32;         ///< float | double: compute and master-weight type
  Precision param_dtype = Precision::f32;   ///< float | bf16 | fp16: storage/communication type of the working parameters
  Precision reduce_dtype = Precision::f32;  ///< float | bf16 | fp16: type in which gradients are reduced over dp
  Precision compute_dtype = Precision::f32; ///< float | bf16: GEMM inputs (bf16: fp32 accumulation; CUDA, or oneDNN on the host)
  HostGemmChoice host_gemm = HostGemmChoice::auto_;  ///< fp32 GEMM library of a host build
  Recompute activation_checkpointing = Recompute::none;  ///< none | block: recompute each block's forward in backward
  double peak_tflops = 0.0;     ///< per-rank peak for MFU; 0: measure with a GEMM probe
  std::string init_from;        ///< a checkpoint whose weights start a new run (fresh optimizer and schedule)
  std::string allow_changed;    ///< deck keys a resume may change against the checkpoint's deck (allowed_changes())
  NonfiniteAction nonfinite = NonfiniteAction::stop;  ///< stop | skip: a step with a non-finite loss or gradient norm
  std::int64_t max_consecutive_skips = 5;  ///< nonfinite = skip: stop (exit 1) at this many skipped steps in a row
  std::int64_t spike_window = 128;  ///< losses the spike detector's z-score is taken against; 0: no detector
  double spike_zscore = 6.0;        ///< a loss this many standard deviations above the window's mean is a spike
  bool spike_rollback = false;      ///< on a spike, reload the last checkpoint and skip the batches since
  std::int64_t spike_max_rollbacks = 3;  ///< rollbacks to the same checkpoint before the run stops (exit 1)
  // Dynamic loss scaling (train/numerics.hpp LossScaler), active when param_dtype or reduce_dtype
  // is fp16; PyTorch's torch.cuda.amp.GradScaler defaults, Megatron-LM's minimum.
  double loss_scale_init = 65536.0;              ///< scale of the first step (2^16)
  std::int64_t loss_scale_growth_interval = 2000; ///< consecutive good steps after which the scale grows
  double loss_scale_growth = 2.0;                ///< growth factor (> 1)
  double loss_scale_backoff = 0.5;               ///< factor on an overflow (in (0, 1))
  double loss_scale_min = 1.0;                   ///< the scale never goes below; an overflow at it stops the run
  TimerMode timers = TimerMode::coarse;  ///< off | coarse | fine: the step-time breakdown in metrics.csv
};

/// Whether a run of `t` uses dynamic loss scaling: fp16 working parameters or fp16 gradient
/// reduction (fp16's range, 6e-8 .. 65504, needs it; bf16 has float's range and does not).
constexpr bool uses_loss_scaling(const TrainConfig& t) {
  return t.param_dtype == Precision::fp16 || t.reduce_dtype == Precision::fp16;
}

struct DataConfig {
  std::string path;              ///< HDF5 token file written by `trident prep`
  double cache_max_mb = 1024.0;  ///< splits up to this size are read into memory, larger ones on demand
  bool sample_log = false;       ///< write <out_dir>/samples.csv: every training sample's index and window offset
};

struct CheckpointConfig {
  std::int64_t interval = 0;  ///< 0: only at the end of the run (and on early stop)
  std::int64_t keep = 3;      ///< how many committed checkpoints to keep
  std::int64_t keep_best = 0; ///< also keep this many older ones with the lowest validation loss
  bool save_final = true;     ///< write a checkpoint at the end of the run and on an early stop
  bool async = false;         ///< write checkpoints in a background thread while training goes on
  OnSaveError on_error = OnSaveError::stop;  ///< a failed save: stop (exit 1) or continue training
  bool file_locking = true;   ///< HDF5 file locking and MPI-IO data sieving while writing (false: file systems without locks)
  RunLockMode run_lock = RunLockMode::required;  ///< own out_dir exclusively (required) or take no lock (off)
  bool verify_on_resume = true;  ///< check checksums before resuming; fall back to an older checkpoint
};

/// The whole input deck.
struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  std::string deck_name;  ///< file name of the deck without directory and extension

  /// The deck as INI text with every key (resolved values included); parse_deck_text() reads it back.
  std::string to_ini() const;
};

/// Reads the deck at `path`, then applies `overrides` ("--section.key=value" or "section.key=value",
/// which take precedence over the file). Local. Throws ConfigError for a missing file, an unknown
/// key, a value of the wrong type or a syntax error, naming the key.
Config parse_deck(const std::string& path, const std::vector<std::string>& overrides = {});

/// Same as parse_deck() for deck text held in memory (e.g. from a checkpoint). Local.
Config parse_deck_text(const std::string& text, const std::string& deck_name,
                       const std::vector<std::string>& overrides = {});

/// The build a deck is validated for (validate()).
enum class BuildTarget { this_build, cuda };

/// Checks every value and resolves dp (auto) and micro_batch_size (0) for `world_size` ranks.
/// Besides each key's own range, a value must be representable where the run uses it: with
/// [train] dtype = float, lr, min_lr and eps 0 or within float's normal range, beta1 and beta2
/// below 1 after rounding to float, lr / (1 - beta1) (AdamW's first step size) and
/// lr * weight_decay (its decay term) finite in float; max_steps <= 2^32 - 1; max_steps *
/// global_batch_size * block_size tokens within int64; [train] allow_changed naming deck keys.
/// Local but deterministic: every rank reaches the same verdict. Throws ConfigError naming the key.
/// `target` says which build the deck is checked for: this_build (what this executable can run) or
/// cuda (a CUDA build of Trident, as `trident plan` assumes for a GPU machine file, so that bf16
/// GEMMs are accepted on a host build that only plans the run).
void validate(Config& cfg, int world_size, BuildTarget target = BuildTarget::this_build);

/// A deck key whose value differs between two decks.
struct DeckDifference {
  std::string section, key;   ///< e.g. "train", "lr"
  std::string before, after;  ///< the values as Config::to_ini writes them
  /// "section.key".
  std::string name() const { return section + "." + key; }
};

/// Every key whose value differs between `before` and `after`, in deck order (as `trident train
/// --help` lists them). Values are compared as the resolved deck writes them (numbers as their
/// shortest round-trip text), so compare two validated decks for resolved values (dp, out_dir,
/// micro_batch_size). Local, pure.
std::vector<DeckDifference> deck_differences(const Config& before, const Config& after);

/// "section.key" for a deck key given as "section.key", or as a bare key that one section alone
/// has ("seed" -> "train.seed"). Local. Throws ConfigError naming `name` when no key matches (with
/// the nearest key) or several sections have it.
std::string resolve_deck_key(const std::string& name);

/// The keys [train] allow_changed names (comma separated), resolved by resolve_deck_key, in the
/// order given; empty items are skipped. Local. Throws ConfigError naming allow_changed and the
/// item that is not a deck key.
std::vector<std::string> allowed_changes(const TrainConfig& t);

/// Human-readable list of every deck key with its default and meaning, for `trident train --help`.
std::string deck_help();

}  // namespace trident
