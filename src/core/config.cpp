// core/config.cpp: deck parsing with Boost.Program_options, validation and INI echo.
#include "core/config.hpp"

#include "core/error.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <deque>
#include <iterator>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

namespace trident {
namespace po = boost::program_options;

const char* name_of(PipelineScheduleKind v) { return v == PipelineScheduleKind::gpipe ? "gpipe" : "1f1b"; }
const char* name_of(Precision v) {
  switch (v) {
    case Precision::f64: return "double";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    default: return "float";
  }
}
const char* name_of(Recompute v) { return v == Recompute::block ? "block" : "none"; }
const char* name_of(OnSaveError v) { return v == OnSaveError::keep_training ? "continue" : "stop"; }
const char* name_of(RunLockMode v) { return v == RunLockMode::off ? "off" : "required"; }
const char* name_of(NonfiniteAction v) { return v == NonfiniteAction::skip ? "skip" : "stop"; }
const char* name_of(TimerMode v) {
  switch (v) {
    case TimerMode::off: return "off";
    case TimerMode::fine: return "fine";
    default: return "coarse";
  }
}

const char* name_of(OffloadKind v) {
  return v == OffloadKind::host ? "host" : v == OffloadKind::nvme ? "nvme" : "none";
}
const char* name_of(ModelArch v) { return v == ModelArch::llama ? "llama" : "gpt2"; }
const char* name_of(AttentionKernel v) { return v == AttentionKernel::fused ? "fused" : "gemm"; }
const char* name_of(HostGemmChoice v) {
  return v == HostGemmChoice::openblas ? "openblas"
         : v == HostGemmChoice::onednn ? "onednn"
         : v == HostGemmChoice::shape  ? "shape"
                                       : "auto";
}
const std::vector<ModelArch>& all_model_archs() {
  static const std::vector<ModelArch> all = {ModelArch::gpt2, ModelArch::llama};
  return all;
}
const char* name_of(CommBackend v) {
  switch (v) {
    case CommBackend::mpi: return "mpi";
    case CommBackend::nccl: return "nccl";
    default: return "auto";
  }
}

namespace {

std::string format_value(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that round-trips
  return std::string(buf, res.ptr);
}
std::string format_value(std::int64_t v) { return std::to_string(v); }
std::string format_value(int v) { return std::to_string(v); }
std::string format_value(bool v) { return v ? "true" : "false"; }
std::string format_value(const std::string& v) { return v; }

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean (true/false)";
  if constexpr (std::is_integral_v<T>) return "an integer";
  if constexpr (std::is_floating_point_v<T>) return "a number";
  return "a string";
}

struct Key {
  std::string section, key, help, type;
  std::function<std::string()> print;
};

/// A boolean deck value. Program_options' own bool parser takes an empty value for true, so
/// "bias =" in a deck or --model.bias= on the command line would turn biases on; this one accepts
/// the same words (true/false, yes/no, on/off, 1/0, any case) and refuses anything else, the empty
/// value included.
struct DeckBool {
  bool value = false;
};

/// Program_options' hook for DeckBool (found by argument-dependent lookup). Throws
/// invalid_option_value for an empty or unknown word.
void validate(boost::any& v, const std::vector<std::string>& xs, DeckBool*, int) {
  po::validators::check_first_occurrence(v);
  std::string s = po::validators::get_single_string(xs, /*allow_empty=*/true);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "true" || s == "yes" || s == "on" || s == "1") {
    v = DeckBool{true};
  } else if (s == "false" || s == "no" || s == "off" || s == "0") {
    v = DeckBool{false};
  } else {
    throw po::invalid_option_value(s);
  }
}

/// "a or b", "a, b or c".
template <class E>
std::string choices_text(const std::vector<E>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i)
    s += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + std::string(name_of(values[i]));
  return s;
}

/// Every deck key, bound to a field of one Config. The single place keys are declared.
class Schema {
 public:
  explicit Schema(Config& c) : desc_("deck keys") {
    ModelConfig& m = c.model;
    add_choice("model", "arch", &m.arch, all_model_archs(),
               "model family: gpt2 (learned positions, LayerNorm, GELU, tied head) or llama (RMSNorm, rotary "
               "positions, SwiGLU, grouped-query attention, no biases)");
    add("model", "n_layer", &m.n_layer, "number of transformer blocks");
    add("model", "n_head", &m.n_head, "attention heads per block (NH)");
    add("model", "n_embd", &m.n_embd, "embedding width C; divisible by n_head");
    add("model", "block_size", &m.block_size, "context length T (tokens per sequence)");
    add("model", "vocab_size", &m.vocab_size, "vocabulary size V; 0 = take it from the token file");
    add("model", "bias", &m.bias, "biases in Linear and LayerNorm layers");
    add("model", "dropout", &m.dropout, "dropout probability (embedding, attention, residual)");
    add("model", "n_kv_head", &m.n_kv_head,
        "llama: key/value heads (grouped-query attention), dividing n_head; 0 = n_head");
    add("model", "ffn_hidden", &m.ffn_hidden, "llama: SwiGLU hidden width; 0 = 8 n_embd / 3 rounded up to ffn_multiple_of");
    add("model", "ffn_multiple_of", &m.ffn_multiple_of, "llama: the rounding of ffn_hidden = 0");
    add("model", "norm_eps", &m.norm_eps, "llama: RMSNorm epsilon");
    add("model", "rope_theta", &m.rope_theta, "llama: rotary position embedding base");
    add("model", "tie_embeddings", &m.tie_embeddings,
        "llama: the LM head is the token embedding (true) or its own tensor lm_head (false); gpt2 always ties");
    add_choice("model", "attention", &m.attention, {AttentionKernel::gemm, AttentionKernel::fused},
               "attention kernel: gemm (batched GEMMs; keeps every head's (T, T) probabilities for backward) or "
               "fused (one query row at a time, FlashAttention-style: keeps only a log-sum-exp per row, "
               "recomputes the scores in backward; less memory, the same math up to summation order)");
    add("parallel", "dp", &dp_text_, "data-parallel size, or auto (also 0) = ranks / (tp * pp)");
    add("parallel", "tp", &c.parallel.tp, "tensor-parallel size");
    add("parallel", "pp", &c.parallel.pp, "pipeline-parallel size");
    add("parallel", "zero_stage", &c.parallel.zero_stage,
        "ZeRO stage over dp: 0 replicated, 1 + optimizer state sharded, 2 + gradients sharded, 3 + parameters "
        "sharded (FSDP)");
    add("parallel", "shard_group_size", &c.parallel.shard_group_size,
        "HSDP: shard over groups of this many dp ranks and replicate across groups; 0 = all of dp");
    add("parallel", "unit_blocks", &c.parallel.unit_blocks,
        "transformer blocks per sharding unit (gathered/reduced together); 0 = the whole model is one unit");
    add("parallel", "prefetch", &c.parallel.prefetch, "stage 3: all-gather the next unit while this one computes");
    add("parallel", "overlap_reduce", &c.parallel.overlap_reduce,
        "stages 2-3: reduce-scatter each unit's gradient while the backward of earlier units runs");
    add_choice("parallel", "pp_schedule", &c.parallel.pp_schedule,
               {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::gpipe},
               "pipeline schedule: 1f1b (at most pp micro-batches in flight) or gpipe (all forwards, then all "
               "backwards)");
    add("parallel", "pp_layers", &c.parallel.pp_layers,
        "blocks per pipeline stage, comma separated (e.g. 3,3,2,2); empty = as even as possible");
    add_choice("parallel", "comm_backend", &c.parallel.comm_backend,
               {CommBackend::automatic, CommBackend::mpi, CommBackend::nccl},
               "library of the dp, tp, pp collectives: auto (nccl in a GPU build with NCCL where every rank has its "
               "own GPU, else mpi), mpi (also on GPU buffers, staged through host memory unless MPI is CUDA-aware) or "
               "nccl (one GPU per rank). Checkpoint I/O always uses MPI");
    add_choice("parallel", "offload_optimizer", &c.parallel.offload_optimizer,
               {OffloadKind::none, OffloadKind::host, OffloadKind::nvme},
               "where the fp32 master weights and both AdamW moments live: none (with the model), host (host memory "
               "with the AdamW step on the CPU, page-locked; GPU builds only: ZeRO-Offload) or nvme (a per-rank scratch file under "
               "offload_path, streamed unit by unit; docs/offload.md)");
    add_choice("parallel", "offload_params", &c.parallel.offload_params, {OffloadKind::none, OffloadKind::nvme},
               "ZeRO-3 parameter shards on a local disk: none or nvme (with zero_stage = 3 and offload_optimizer = "
               "nvme: each unit's piece is read from the offload file ahead of its all-gather and written back by "
               "the step; docs/offload.md)");
    add("parallel", "offload_path", &c.parallel.offload_path,
        "directory of the offload files (one per rank, scratch: rebuilt from the checkpoint at every start); "
        "required with offload_optimizer = nvme");
    TrainConfig& t = c.train;
    add("train", "global_batch_size", &t.global_batch_size, "sequences per optimizer step, over all dp ranks");
    add("train", "micro_batch_size", &t.micro_batch_size,
        "sequences per forward/backward on one rank; 0 = global_batch_size / dp (no accumulation)");
    add("train", "max_steps", &t.max_steps, "optimizer steps of the whole run (also the LR schedule length)");
    add("train", "stop_at_step", &t.stop_at_step, "0 = off; else stop after this step with a checkpoint");
    add("train", "time_limit_min", &t.time_limit_min,
        "0 = off; else stop with a checkpoint before this many minutes of wall time");
    add("train", "lr", &t.lr, "peak learning rate");
    add("train", "min_lr", &t.min_lr, "learning rate at the end of the cosine decay");
    add("train", "warmup_steps", &t.warmup_steps, "steps of linear warm-up");
    add("train", "weight_decay", &t.weight_decay, "AdamW decoupled weight decay (2-D weights only)");
    add("train", "beta1", &t.beta1, "AdamW beta1");
    add("train", "beta2", &t.beta2, "AdamW beta2");
    add("train", "eps", &t.eps, "AdamW epsilon");
    add("train", "grad_clip", &t.grad_clip, "clip the global gradient norm to this value; 0 = off");
    add("train", "eval_interval", &t.eval_interval, "validate every this many steps; 0 = only at the end");
    add("train", "eval_iters", &t.eval_iters, "validation batches of random windows; 0 (or more than the split holds) = the whole validation split");
    add("train", "seed", &t.seed, "seed of initialisation, data order and dropout (>= 0)");
    add("train", "log_interval", &t.log_interval, "print a log line every this many steps");
    add("train", "out_dir", &t.out_dir, "run directory; empty = runs/<deck name>");
    add("train", "init_from", &t.init_from,
        "checkpoint (file or run directory) whose weights start this run, with a fresh optimizer, step 0 and "
        "the deck's schedule (fine-tuning; `trident ckpt import` makes one from a Hugging Face model); ignored "
        "when the run resumes from its own checkpoint");
    add_choice("train", "dtype", &t.dtype, {Precision::f32, Precision::f64},
               "compute and master-weight type: float or double");
    add_choice("train", "param_dtype", &t.param_dtype, {Precision::f32, Precision::bf16, Precision::fp16},
               "storage and communication type of the working parameters: float, bf16 or fp16 (mixed precision: "
               "fp32 master weights and moments, kernels still compute in float; fp16 turns on dynamic loss "
               "scaling, the loss_scale_* keys)",
               {{"float16", "write fp16"}, {"half", "write fp16"}, {"bfloat16", "write bf16"}});
    add_choice("train", "reduce_dtype", &t.reduce_dtype, {Precision::f32, Precision::bf16, Precision::fp16},
               "type in which gradients are summed over dp: float, bf16 or fp16 (fp16 turns on dynamic loss "
               "scaling: the scaled gradients are rounded to fp16, an overflow skips the step)",
               {{"float16", "write fp16"}, {"half", "write fp16"}, {"bfloat16", "write bf16"}});
    add_choice("train", "compute_dtype", &t.compute_dtype, {Precision::f32, Precision::bf16},
               "input type of every GEMM: float, or bf16 (inputs rounded to bf16, fp32 accumulation and output, "
               "tensor cores on a GPU, oneDNN's AVX512-BF16 kernels on a CPU; needs dtype = float, and a CUDA build or a host "
               "build with oneDNN on a CPU with AVX512-BF16)");
    add_choice("train", "host_gemm", &t.host_gemm,
               {HostGemmChoice::auto_, HostGemmChoice::openblas, HostGemmChoice::onednn, HostGemmChoice::shape},
               "library of the fp32 GEMMs in a host build: openblas (its sgemm), onednn (oneDNN's fp32 "
               "matmul; needs a build with oneDNN), auto: the faster of the two by a GEMM probe of this CPU, "
               "measured once and recorded in the peak cache (so a resume on the same machine takes the same one), "
               "or shape: the faster of the two for each GEMM shape of the run, each shape probed at its first use "
               "and recorded in the peak cache likewise. double GEMMs and CUDA builds ignore it");
    add_choice("train", "activation_checkpointing", &t.activation_checkpointing, {Recompute::none, Recompute::block},
               "none, or block: keep only each block's input and recompute its forward during backward");
    add("train", "peak_tflops", &t.peak_tflops,
        "peak TFLOP/s per rank for MFU; 0 = measure with a GEMM probe at start-up");
    add("train", "allow_changed", &t.allow_changed,
        "keys (comma separated, section.key or a key only one section has, e.g. max_steps,data.path) that "
        "--resume may change although they differ from the checkpoint's deck and would be refused (the LR "
        "schedule, the seed, the data path); empty = none. Never the model's shape");
    add_choice("train", "nonfinite", &t.nonfinite, {NonfiniteAction::stop, NonfiniteAction::skip},
               "a step whose loss or gradient norm is not finite on any rank: stop (exit 1, no update, no save) "
               "or skip (no update; step, learning-rate schedule and data position advance; counted in metrics.csv)");
    add("train", "max_consecutive_skips", &t.max_consecutive_skips,
        "nonfinite = skip: stop (exit 1) when this many steps in a row were skipped; the last checkpoint holds "
        "the last good state");
    add("train", "spike_window", &t.spike_window,
        "loss-spike detector: z-score of each loss against the previous this many losses (metrics.csv loss_z); "
        "0 = off");
    add("train", "spike_zscore", &t.spike_zscore,
        "a loss this many standard deviations above the window's mean is a spike: a warning, or a rollback");
    add("train", "spike_rollback", &t.spike_rollback,
        "on a spike, reload the last checkpoint and skip the batches from it up to the spike (needs "
        "[checkpoint] interval > 0)");
    add("train", "spike_max_rollbacks", &t.spike_max_rollbacks,
        "spike_rollback: stop (exit 1) when the spikes need more rollbacks than this to the same checkpoint");
    add("train", "loss_scale_init", &t.loss_scale_init,
        "fp16 (param_dtype or reduce_dtype): dynamic loss scaling's first scale; the loss's gradient is "
        "multiplied by it, the gradients divided by it before clipping and the update");
    add("train", "loss_scale_growth_interval", &t.loss_scale_growth_interval,
        "fp16: the scale is multiplied by loss_scale_growth after this many steps in a row without overflow");
    add("train", "loss_scale_growth", &t.loss_scale_growth, "fp16: factor of the scale's growth (> 1)");
    add("train", "loss_scale_backoff", &t.loss_scale_backoff,
        "fp16: a step whose gradients overflow (inf or nan on any rank) is skipped and the scale multiplied "
        "by this (between 0 and 1)");
    add("train", "loss_scale_min", &t.loss_scale_min,
        "fp16: the scale never goes below this; an overflow at this scale stops the run (exit 1)");
    add_choice("train", "timers", &t.timers, {TimerMode::off, TimerMode::coarse, TimerMode::fine},
               "step-time breakdown (metrics.csv t_* columns, a summary at the end): off; coarse (clock reads "
               "around each part and in the collectives, no synchronisation; on a GPU, kernel time lands in the "
               "part that waits for it); or fine (also a device synchronisation at each part's ends: device time in the "
               "part that launched it, overlap between parts lost)");
    add("data", "path", &c.data.path, "HDF5 token file written by `trident prep`");
    add("data", "cache_max_mb", &c.data.cache_max_mb,
        "splits up to this many MiB are held in memory; larger ones are read on demand");
    add("data", "sample_log", &c.data.sample_log,
        "write <out_dir>/samples.csv (step,sample,offset): the global index and token offset of every "
        "training window, as the ranks loaded it (for auditing the data order across resumes and layouts)");
    add("checkpoint", "interval", &c.checkpoint.interval,
        "write a checkpoint every this many steps; 0 = only at the end");
    add("checkpoint", "keep", &c.checkpoint.keep, "number of committed checkpoints to keep");
    add("checkpoint", "keep_best", &c.checkpoint.keep_best,
        "also keep this many older checkpoints with the lowest validation loss (the loss of the last "
        "evaluation before each save; `trident ckpt ls` shows it); 0 = off");
    add("checkpoint", "save_final", &c.checkpoint.save_final,
        "write a checkpoint at the end of the run and when stopping early (false: benchmarks only; a stop signal always saves)");
    add("checkpoint", "async", &c.checkpoint.async,
        "copy the state to host memory at the step boundary and write it in a background thread");
    add_choice("checkpoint", "on_error", &c.checkpoint.on_error, {OnSaveError::stop, OnSaveError::keep_training},
               "when a save fails (disk full, I/O error): stop (exit 1) or continue training; the previous "
               "checkpoint is intact either way");
    add("checkpoint", "file_locking", &c.checkpoint.file_locking,
        "file locks when writing checkpoints; false for file systems without lock support (NFS without "
        "lockd, Lustre without -o flock): no HDF5 file locking and the MPI-IO hints romio_ds_write = "
        "disable, romio_ds_read = disable, which need no fcntl locks (HDF5_USE_FILE_LOCKING=FALSE does "
        "the same); the start-up probe says when it is needed");
    add_choice("checkpoint", "run_lock", &c.checkpoint.run_lock, {RunLockMode::required, RunLockMode::off},
               "own [train] out_dir exclusively: required (a second job on it, or a file system that grants "
               "no lock, is refused with exit status 2 before any work) or off (where the file system grants no "
               "lock, go on without one: nothing stops two jobs from writing the same directory; a warning says "
               "so. Where it grants one, a job holding the directory is still refused)");
    add("checkpoint", "verify_on_resume", &c.checkpoint.verify_on_resume,
        "verify checksums before resuming and fall back to the newest checkpoint that is complete");
  }

  const po::options_description& desc() const { return desc_; }
  const std::vector<Key>& keys() const { return keys_; }
  std::string& dp_text() { return dp_text_; }
  const Key* find(const std::string& dotted) const {
    for (const Key& k : keys_)
      if (k.section + "." + k.key == dotted) return &k;
    return nullptr;
  }
  /// Turns the parsed text of every choice key into its enum value. Throws ConfigError
  /// "<where>: [section] key = value: expected a or b" for a name that is not one of the choices,
  /// where `origin("section.key")` says where the value was given ("command line" or
  /// "deck 'x.ini', line 7").
  void resolve_choices(const std::function<std::string(const std::string&)>& origin) {
    for (const auto& r : resolvers_) r(origin);
  }

 private:
  /// A key whose value is one of `values`, given by name (name_of) in the deck. The text is parsed
  /// as a string and resolved after parsing (resolve_choices), so downstream code sees only enums.
  /// `refused`: names that are not choices (yet) with the reason given instead of the list.
  template <class E>
  void add_choice(const char* section, const char* key, E* field, std::vector<E> values, const char* help,
                  std::vector<std::pair<std::string, std::string>> refused = {}) {
    std::string& text = texts_.emplace_back(name_of(*field));
    const std::string name = std::string(section) + "." + key;
    const std::string choices = choices_text(values);
    desc_.add_options()(name.c_str(), po::value<std::string>(&text)->default_value(text), help);
    keys_.push_back({section, key, help, "one of " + choices, [field] { return std::string(name_of(*field)); }});
    resolvers_.push_back([field, values, &text, section = std::string(section), key = std::string(key),
                          choices, refused](const std::function<std::string(const std::string&)>& origin) {
      for (E v : values)
        if (text == name_of(v)) {
          *field = v;
          return;
        }
      for (const auto& [name, why] : refused)
        if (text == name)
          throw ConfigError(origin(section + "." + key) + ": [" + section + "] " + key + " = " + text + ": " + why);
      throw ConfigError(origin(section + "." + key) + ": [" + section + "] " + key + " = " + text + ": expected " +
                        choices);
    });
  }

  template <class T>
  void add(const char* section, const char* key, T* field, const char* help) {
    const std::string name = std::string(section) + "." + key;
    if constexpr (std::is_same_v<T, bool>) {
      desc_.add_options()(name.c_str(),
                          po::value<DeckBool>()
                              ->default_value(DeckBool{*field}, format_value(*field))
                              ->notifier([field](const DeckBool& b) { *field = b.value; }),
                          help);
    } else {
      desc_.add_options()(name.c_str(), po::value<T>(field)->default_value(*field, format_value(*field)), help);
    }
    keys_.push_back({section, key, help, type_name<T>(), [field] { return format_value(*field); }});
  }

  po::options_description desc_;
  std::vector<Key> keys_;
  std::deque<std::string> texts_;  // parsed text of the choice keys (a deque: addresses stay valid)
  std::vector<std::function<void(const std::function<std::string(const std::string&)>&)>> resolvers_;
  std::string dp_text_ = "auto";
};

/// "--train.lr=5" -> "train.lr": Program_options reports command-line names with dashes and value.
std::string strip_dashes(std::string s) {
  while (!s.empty() && s.front() == '-') s.erase(s.begin());
  return s.substr(0, s.find('='));
}

std::string describe_key(const std::string& dotted) {
  auto dot = dotted.find('.');
  if (dot == std::string::npos) return "'" + dotted + "' (outside any section)";
  return "'" + dotted.substr(dot + 1) + "' in section [" + dotted.substr(0, dot) + "]";
}

/// Levenshtein distance of a and b (for "did you mean").
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// " (did you mean 'key' in section [s]?)" for the deck key closest to `dotted` ("section.key"):
/// the same key in another section, or a key of the same section at most 2 edits away (3 for long
/// names); "" when nothing is close.
std::string did_you_mean(const Schema& schema, const std::string& dotted) {
  const auto dot = dotted.find('.');
  const std::string section = dot == std::string::npos ? "" : dotted.substr(0, dot);
  const std::string key = dot == std::string::npos ? dotted : dotted.substr(dot + 1);
  if (dot != std::string::npos && section.empty()) return " (the section name before the dot is missing)";
  if (key.empty()) return " (the key name after the dot is missing)";
  // A section no key has: name the sections (a key suggested from another one misleads).
  std::vector<std::string> sections;
  for (const Key& k : schema.keys())
    if (std::find(sections.begin(), sections.end(), k.section) == sections.end()) sections.push_back(k.section);
  if (!section.empty() && std::find(sections.begin(), sections.end(), section) == sections.end()) {
    std::string list;
    for (const std::string& x : sections) list += (list.empty() ? "[" : ", [") + x + "]";
    return " (there is no section [" + section + "]; the sections are " + list + ")";
  }
  const Key* best = nullptr;
  std::size_t best_d = 0;
  for (const Key& k : schema.keys()) {
    std::size_t d = edit_distance(key, k.key) * 2 + (k.section == section ? 0 : 1);
    if (best == nullptr || d < best_d) {
      best = &k;
      best_d = d;
    }
  }
  const std::size_t limit = key.size() >= 8 ? 3 : 2;
  if (best == nullptr || best_d > 2 * limit + 1) return "";
  return " (did you mean '" + best->key + "' in section [" + best->section + "]?)";
}

/// 1-based number of the first line of deck `text` that is not blank, a comment, a [section]
/// header or a key = value line (0 when every line is one of those); its text in `line`.
int first_bad_line(const std::string& text, std::string& line) {
  std::istringstream in(text);
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#' || line[b] == ';') continue;
    if (line[b] == '[') {
      if (line.find(']', b) == std::string::npos) return n;
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos || eq == b) return n;
  }
  return 0;
}

/// 1-based line of deck `text` that sets key `key` (within its section), 0 if none is found.
int line_of_key(const std::string& text, const std::string& dotted, int after = 0) {
  const auto dot = dotted.find('.');
  const std::string section = dot == std::string::npos ? "" : dotted.substr(0, dot);
  const std::string key = dot == std::string::npos ? dotted : dotted.substr(dot + 1);
  std::istringstream in(text);
  std::string line, current;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const auto b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    if (line[b] == '[') {
      const auto e = line.find(']', b);
      current = line.substr(b + 1, e == std::string::npos ? std::string::npos : e - b - 1);
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(b, eq - b);
    while (!k.empty() && (k.back() == ' ' || k.back() == '\t')) k.pop_back();
    if (current == section && k == key && n > after) return n;
  }
  return 0;
}

Config parse_impl(std::istream& in_stream, const std::string& source, const std::string& deck_name,
                  const std::vector<std::string>& overrides) {
  Config cfg;
  cfg.deck_name = deck_name;
  Schema schema(cfg);
  po::variables_map vm;
  // The deck's text, kept to name the line of an error.
  std::string text((std::istreambuf_iterator<char>(in_stream)), std::istreambuf_iterator<char>());
  // A UTF-8 byte-order mark (some editors write one) is no part of the first line.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  // A deck is text: a control byte other than tab, CR and LF means another kind of file (an
  // executable, an HDF5 file) -- say so, rather than quote its bytes in a key error.
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(c));
      throw ConfigError(source + " is not a text file (byte " + std::to_string(i) + " is " + hex +
                        "): an input deck holds [section] lines and key = value lines");
    }
  }
  std::istringstream in(text);
  bool in_deck = false;  // the command-line overrides are parsed first, then the deck
  std::vector<std::string> keys;  // the dotted keys given on the command line
  // Where the value of a key came from, for messages about values checked after parsing.
  const auto origin = [&](const std::string& dotted) {
    if (std::find(keys.begin(), keys.end(), dotted) != keys.end()) return std::string("command line");
    const int line = line_of_key(text, dotted);
    return source + (line > 0 ? ", line " + std::to_string(line) : std::string());
  };
  try {
    // Command-line overrides first: Program_options keeps the first value stored for a key.
    // Overrides are accepted as "--section.key=value" or "section.key=value". A key overridden
    // more than once takes the last value (job scripts append to a user's arguments); only the
    // deck file itself may not give a key twice.
    std::vector<std::string> args;
    for (const auto& o : overrides) {
      std::string a = o.rfind("-", 0) == 0 ? o : "--" + o;
      std::string key = strip_dashes(a.substr(0, a.find('=')));
      const auto it = std::find(keys.begin(), keys.end(), key);
      if (it != keys.end()) {
        args.erase(args.begin() + (it - keys.begin()));
        keys.erase(it);
      }
      args.push_back(std::move(a));
      keys.push_back(std::move(key));
    }
    // "--section.key=" (an empty value, e.g. out_dir = default) is rejected by the command-line
    // parser; it goes through the config-file parser, which accepts it as a deck line would.
    std::string empties;
    std::vector<std::string> arg_keys = keys;  // keys[i] is the key of args[i] until empties leave args
    for (size_t i = 0; i < args.size();) {
      if (!args[i].empty() && args[i].back() == '=' && args[i].find('=') == args[i].size() - 1) {
        empties += arg_keys[i] + "=\n";
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
        arg_keys.erase(arg_keys.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    po::store(po::command_line_parser(args)
                  .options(schema.desc())
                  .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
                  .run(),
              vm);
    if (!empties.empty()) {
      std::istringstream empty_in(empties);
      po::store(po::parse_config_file(empty_in, schema.desc(), /*allow_unregistered=*/false), vm);
    }
    in_deck = true;
    po::store(po::parse_config_file(in, schema.desc(), /*allow_unregistered=*/false), vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    const std::string name = strip_dashes(e.get_option_name());
    if (!in_deck)
      throw ConfigError("unknown key " + describe_key(name) + " given on the command line (--" + name + "=...)" +
                        did_you_mean(schema, name) + " (`trident train --help` lists every key)");
    const int line = line_of_key(text, name);
    throw ConfigError(source + (line > 0 ? ", line " + std::to_string(line) : std::string()) + ": unknown key " +
                      describe_key(name) + did_you_mean(schema, name) + " (`trident train --help` lists every key)");
  } catch (const po::invalid_option_value& e) {
    const std::string name = strip_dashes(e.get_option_name());
    const Key* k = schema.find(name);
    const int line = in_deck ? line_of_key(text, name) : 0;
    // Program_options leaves the value out of its message when it is empty: "the argument for
    // option 'model.bias' is invalid" (else "the argument ('x') for option ...").
    const std::string what = e.what();
    const bool empty = what.find("the argument for option") != std::string::npos;
    throw ConfigError((in_deck ? source + (line > 0 ? ", line " + std::to_string(line) : std::string()) + ": "
                               : std::string("command line: ")) +
                      "bad value for " + describe_key(name) + ": " + (empty ? std::string("the value is empty") : what) +
                      (k ? std::string("; expected ") + k->type : std::string()));
  } catch (const po::invalid_config_file_syntax& e) {
    std::string bad;
    const int line = first_bad_line(text, bad);
    throw ConfigError(source + (line > 0 ? ", line " + std::to_string(line) : std::string()) +
                      ": syntax error: " + e.what() + " (a deck holds [section] lines and key = value lines)");
  } catch (const po::multiple_occurrences& e) {
    const std::string name = strip_dashes(e.get_option_name());
    const int first = line_of_key(text, name), second = first > 0 ? line_of_key(text, name, first) : 0;
    throw ConfigError(source + (second > 0 ? ", lines " + std::to_string(first) + " and " + std::to_string(second)
                                           : std::string()) +
                      ": key " + describe_key(name) + " is given twice");
  } catch (const po::error& e) {
    throw ConfigError(source + ": " + e.what());
  }
  schema.resolve_choices(origin);
  const std::string& dp = schema.dp_text();
  if (dp == "auto" || dp == "0") {
    cfg.parallel.dp = 0;
  } else {
    int v = 0;
    auto res = std::from_chars(dp.data(), dp.data() + dp.size(), v);
    if (res.ec != std::errc() || res.ptr != dp.data() + dp.size() || v < 1)
      throw ConfigError(origin("parallel.dp") + ": bad value for 'dp' in section [parallel]: '" + dp +
                        "'; expected a positive integer or auto");
    cfg.parallel.dp = v;
  }
  return cfg;
}

}  // namespace

Config parse_deck(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw ConfigError("deck '" + path + "' is not a file");
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot open deck file '" + path + "'");
  return parse_impl(in, "deck '" + path + "'", std::filesystem::path(path).stem().string(), overrides);
}

Config parse_deck_text(const std::string& text, const std::string& deck_name,
                       const std::vector<std::string>& overrides) {
  std::istringstream in(text);
  return parse_impl(in, "deck '" + deck_name + "'", deck_name, overrides);
}

namespace {
struct KeyValue {
  std::string section, key, value;
};

/// Every key of `c` with its value as the resolved deck writes it, in deck order.
std::vector<KeyValue> key_values(const Config& c) {
  Config copy = c;
  Schema schema(copy);
  schema.dp_text() = c.parallel.dp > 0 ? std::to_string(c.parallel.dp) : "auto";
  std::vector<KeyValue> kv;
  for (const Key& k : schema.keys())
    kv.push_back({k.section, k.key, k.section == "parallel" && k.key == "dp" ? schema.dp_text() : k.print()});
  return kv;
}
}  // namespace

std::string Config::to_ini() const {
  std::ostringstream out;
  out << "# Trident input deck (resolved)\n";
  std::string section;
  for (const KeyValue& k : key_values(*this)) {
    if (k.section != section) {
      out << (section.empty() ? "" : "\n") << "[" << k.section << "]\n";
      section = k.section;
    }
    out << k.key << " = " << k.value << "\n";
  }
  return out.str();
}

std::vector<DeckDifference> deck_differences(const Config& before, const Config& after) {
  const std::vector<KeyValue> a = key_values(before), b = key_values(after);
  std::vector<DeckDifference> d;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].value != b[i].value) d.push_back({a[i].section, a[i].key, a[i].value, b[i].value});
  return d;
}

std::string resolve_deck_key(const std::string& name) {
  Config cfg;
  Schema schema(cfg);
  if (name.find('.') != std::string::npos) {
    if (schema.find(name) == nullptr)
      throw ConfigError("'" + name + "' is not a deck key" + did_you_mean(schema, name) +
                        " (`trident train --help` lists every key)");
    return name;
  }
  std::vector<std::string> found;
  for (const Key& k : schema.keys())
    if (k.key == name) found.push_back(k.section + "." + k.key);
  if (found.size() == 1) return found[0];
  if (found.empty())
    throw ConfigError("'" + name + "' is not a deck key" + did_you_mean(schema, name) +
                      " (`trident train --help` lists every key)");
  std::string all;
  for (const auto& f : found) all += (all.empty() ? "" : " or ") + f;
  throw ConfigError("'" + name + "' is a key of several sections: give " + all);
}

std::vector<std::string> allowed_changes(const TrainConfig& t) {
  std::vector<std::string> keys;
  std::string item;
  std::istringstream in(t.allow_changed);
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    try {
      keys.push_back(resolve_deck_key(item.substr(b, e - b + 1)));
    } catch (const ConfigError& err) {
      throw ConfigError("[train] allow_changed = " + t.allow_changed + ": " + err.what());
    }
  }
  return keys;
}

std::vector<int> stage_layers(const ModelConfig& m, const ParallelConfig& p) {
  std::vector<int> counts;
  if (p.pp_layers.empty()) {
    for (int s = 0; s < p.pp; ++s) counts.push_back(m.n_layer / p.pp + (s < m.n_layer % p.pp ? 1 : 0));
    return counts;
  }
  std::stringstream ss(p.pp_layers);
  std::string item;
  int sum = 0;
  while (std::getline(ss, item, ',')) {
    int v = 0;
    auto res = std::from_chars(item.data(), item.data() + item.size(), v);
    require_config(res.ec == std::errc() && res.ptr == item.data() + item.size() && v >= 1,
                   "[parallel] pp_layers = " + p.pp_layers + ": expected positive block counts, e.g. 3,3,2,2");
    counts.push_back(v);
    sum += v;
  }
  require_config(static_cast<int>(counts.size()) == p.pp && sum == m.n_layer,
                 "[parallel] pp_layers = " + p.pp_layers + " must list pp = " + std::to_string(p.pp) +
                     " counts summing to [model] n_layer = " + std::to_string(m.n_layer));
  return counts;
}

std::string deck_help() {
  Config cfg;
  Schema schema(cfg);
  std::ostringstream out;
  std::string section;
  for (const Key& k : schema.keys()) {
    if (k.section != section) {
      out << "\n  [" << k.section << "]\n";
      section = k.section;
    }
    std::string name = k.key + " = " + (k.key == "dp" ? std::string("auto") : k.print());
    out << "    " << name;
    out << std::string(name.size() < 34 ? 34 - name.size() : 1, ' ') << k.help << "\n";
  }
  return out.str();
}

namespace {
std::string kv(const char* section, const char* key, const std::string& value) {
  return std::string("[") + section + "] " + key + " = " + value;
}
template <class T>
void require_at_least(T v, T lo, const char* section, const char* key) {
  require_config(v >= lo, kv(section, key, format_value(v)) + " must be >= " + format_value(lo));
}

/// With [train] dtype = float, `v` must survive the conversion to float that AdamW's kernel makes
/// (kernels/adamw.cpp casts the step size lr / (1 - beta1^t), eps and the betas to the compute
/// type; late in a run the step size is about the learning rate): 0, or a magnitude in the
/// normal range. Above FLT_MAX it becomes inf; below FLT_MIN it is a denormal that GPUs flush to 0
/// (an eps of 0 divides by zero).
void require_float(double v, const char* section, const char* key) {
  require_config(v == 0.0 || (std::fabs(v) >= FLT_MIN && std::fabs(v) <= FLT_MAX),
                 kv(section, key, format_value(v)) + " is outside the range of float (" + format_value(double(FLT_MIN)) +
                     " .. " + format_value(double(FLT_MAX)) + "), the compute type of [train] dtype = float");
}

/// Values that parse and pass their own range but that the run cannot represent: float overflow
/// and underflow in AdamW (its scalars, the first step size, the decay term), betas that round to
/// 1, step and token counters beyond their integer types. Local, deterministic.
void validate_representable(const Config& c) {
  const TrainConfig& t = c.train;
  if (t.dtype == Precision::f32) {
    require_float(t.lr, "train", "lr");
    require_float(t.min_lr, "train", "min_lr");
    require_float(t.eps, "train", "eps");
    // RMSNorm adds norm_eps to the mean square in the compute type: beyond FLT_MAX it is inf and
    // every normalised activation 0 (the model would silently learn nothing).
    if (c.model.arch == ModelArch::llama) require_float(c.model.norm_eps, "model", "norm_eps");
    for (const auto& [key, beta] : {std::pair<const char*, double>{"beta1", t.beta1}, {"beta2", t.beta2}})
      require_config(static_cast<float>(beta) < 1.0f,
                     kv("train", key, format_value(beta)) +
                         " rounds to 1 in float, the compute type of [train] dtype = float: the moment would "
                         "never change (at most 0.99999994, or dtype = double)");
    // AdamW's largest step size is at step 1: lr / (1 - beta1), cast to float.
    require_config(t.lr / (1.0 - t.beta1) <= FLT_MAX, "[train] lr / (1 - beta1) = " +
                                                          format_value(t.lr / (1.0 - t.beta1)) +
                                                          ", AdamW's first step size, overflows float");
    // The decay factor 1 - lr * weight_decay, cast to float.
    require_config(t.lr * t.weight_decay <= FLT_MAX, "[train] lr * weight_decay = " +
                                                         format_value(t.lr * t.weight_decay) +
                                                         ", AdamW's decay term, overflows float");
  }
  // Dropout masks and the data permutation take the step and the epoch as 32-bit keys.
  constexpr std::int64_t kMaxSteps = 4294967295;
  require_config(t.max_steps <= kMaxSteps, kv("train", "max_steps", format_value(t.max_steps)) +
                                               " is larger than 4294967295 (steps are 32-bit keys of the dropout masks)");
  // Sequences per step and per micro-batch are int in the executor and the memory plan.
  constexpr std::int64_t kMaxBatch = 2147483647;
  require_config(t.global_batch_size <= kMaxBatch, kv("train", "global_batch_size", format_value(t.global_batch_size)) +
                                                       " is larger than 2147483647");
  require_config(t.micro_batch_size <= kMaxBatch, kv("train", "micro_batch_size", format_value(t.micro_batch_size)) +
                                                      " is larger than 2147483647");
  // Samples and tokens of the run are counted in int64 (consumed_samples, window offsets).
  const double tokens = double(t.max_steps) * double(t.global_batch_size) * double(c.model.block_size);
  require_config(tokens < 9.2e18, "[train] max_steps * global_batch_size * [model] block_size = " +
                                      format_value(tokens) + " tokens, more than an int64 counts");
}
/// The loss_scale_* keys (checked whatever the dtype, so a deck that turns fp16 on later is
/// already valid). The scale is a float factor of the loss gradient: it must be a positive normal
/// float; growth above 1 and backoff in (0, 1) as torch.cuda.amp.GradScaler requires.
void validate_loss_scaling(const TrainConfig& t) {
  require_config(t.loss_scale_init >= FLT_MIN && t.loss_scale_init <= FLT_MAX,
                 kv("train", "loss_scale_init", format_value(t.loss_scale_init)) + " must be > 0 and within float (" +
                     format_value(double(FLT_MIN)) + " .. " + format_value(double(FLT_MAX)) +
                     "): the loss's gradient is multiplied by it in float");
  require_config(t.loss_scale_min >= FLT_MIN && t.loss_scale_min <= t.loss_scale_init,
                 kv("train", "loss_scale_min", format_value(t.loss_scale_min)) +
                     " must be > 0 (at least " + format_value(double(FLT_MIN)) + ") and at most [train] loss_scale_init = " +
                     format_value(t.loss_scale_init));
  require_config(t.loss_scale_growth > 1.0,
                 kv("train", "loss_scale_growth", format_value(t.loss_scale_growth)) + " must be > 1");
  require_config(t.loss_scale_backoff > 0.0 && t.loss_scale_backoff < 1.0,
                 kv("train", "loss_scale_backoff", format_value(t.loss_scale_backoff)) +
                     " must be between 0 and 1 (exclusive)");
  require_at_least<std::int64_t>(t.loss_scale_growth_interval, 1, "train", "loss_scale_growth_interval");
}
}  // namespace

void validate(Config& c, int world_size, BuildTarget target) {
  const bool cuda_build = TRIDENT_HAVE_CUDA || target == BuildTarget::cuda;
  {
    // inf and nan parse as numbers; no key of the deck takes them.
    Config copy = c;
    Schema schema(copy);
    for (const Key& k : schema.keys())
      if (k.type == type_name<double>()) {
        const std::string v = k.print();
        require_config(v.find("inf") == std::string::npos && v.find("nan") == std::string::npos,
                       kv(k.section.c_str(), k.key.c_str(), v) + " is not a finite number");
      }
  }
  ModelConfig& m = c.model;
  require_at_least(m.n_layer, 1, "model", "n_layer");
  require_at_least(m.n_head, 1, "model", "n_head");
  require_at_least(m.n_embd, 1, "model", "n_embd");
  require_at_least(m.block_size, 1, "model", "block_size");
  require_at_least(m.vocab_size, 0, "model", "vocab_size");
  require_config(m.n_embd % m.n_head == 0, kv("model", "n_embd", format_value(m.n_embd)) +
                                              " is not divisible by [model] n_head = " + format_value(m.n_head));
  // Sizes beyond these overflow the element counts of the activation buffers long before they fit
  // in any memory; reject them with a message rather than wrap around.
  require_config(m.n_layer <= 4096, kv("model", "n_layer", format_value(m.n_layer)) + " is larger than 4096");
  require_config(m.n_embd <= (1 << 17), kv("model", "n_embd", format_value(m.n_embd)) + " is larger than 131072");
  require_config(m.block_size <= (1 << 20), kv("model", "block_size", format_value(m.block_size)) + " is larger than 1048576");
  {
    const double psi = 12.0 * m.n_layer * double(m.n_embd) * m.n_embd + (double(m.vocab_size) + m.block_size) * m.n_embd;
    require_config(psi < 1e13, "[model] describes " + format_value(psi) + " parameters, more than 1e13");
  }
  require_config(m.dropout >= 0.0 && m.dropout < 1.0,
                 kv("model", "dropout", format_value(m.dropout)) + " must be in [0, 1)");
  if (m.arch == ModelArch::gpt2) {
    require_config(m.tie_embeddings, "[model] tie_embeddings = false: the gpt2 family always ties its LM head to "
                                     "the token embedding (arch = llama can untie)");
    require_config(m.n_kv_head == 0 || m.n_kv_head == m.n_head,
                   kv("model", "n_kv_head", format_value(m.n_kv_head)) +
                       ": grouped-query attention is a llama-family option (arch = llama)");
    const ModelConfig d;  // the llama keys' defaults: a gpt2 deck that sets one means another model
    const auto llama_only = [](const char* key) {
      return std::string("[model] ") + key + " is a llama-family key (arch = llama); the gpt2 family has no use for it";
    };
    require_config(m.ffn_hidden == 0 || m.ffn_hidden == 4 * m.n_embd, llama_only("ffn_hidden"));
    require_config(m.ffn_multiple_of == d.ffn_multiple_of, llama_only("ffn_multiple_of"));
    require_config(m.norm_eps == d.norm_eps, llama_only("norm_eps") + " (GPT-2's LayerNorm epsilon is 1e-5)");
    require_config(m.rope_theta == d.rope_theta, llama_only("rope_theta"));
  } else {
    require_config(!m.bias, "[model] bias = true: the llama family has no biases");
    require_at_least(m.n_kv_head, 0, "model", "n_kv_head");
    require_config(m.n_head % m.kv_heads() == 0, kv("model", "n_kv_head", format_value(m.n_kv_head)) +
                                                     " does not divide [model] n_head = " + format_value(m.n_head));
    require_config((m.n_embd / m.n_head) % 2 == 0, "[model] n_embd / n_head = " + format_value(m.n_embd / m.n_head) +
                                                       " (the head size) must be even for rotary embeddings");
    require_at_least(m.ffn_hidden, 0, "model", "ffn_hidden");
    require_at_least(m.ffn_multiple_of, 1, "model", "ffn_multiple_of");
    require_config(m.ffn_multiple_of <= (1 << 20), kv("model", "ffn_multiple_of", format_value(m.ffn_multiple_of)) +
                                                       " is larger than 1048576 (the largest ffn_hidden)");
    require_config(m.ffn_width() <= (1 << 20), "[model] ffn_hidden = " + format_value(m.ffn_width()) + " is larger than 1048576");
    require_config(m.norm_eps > 0.0, kv("model", "norm_eps", format_value(m.norm_eps)) + " must be positive");
    require_config(m.rope_theta > 1.0, kv("model", "rope_theta", format_value(m.rope_theta)) + " must be above 1");
    // Resolved, so the deck a run stores (and --print-config) names the model's real shape.
    m.n_kv_head = m.kv_heads();
    m.ffn_hidden = m.ffn_width();
  }

  ParallelConfig& p = c.parallel;
  require_at_least(p.tp, 1, "parallel", "tp");
  require_at_least(p.pp, 1, "parallel", "pp");
  if (p.dp == 0) {
    require_config(world_size % (p.tp * p.pp) == 0,
                   "[parallel] dp = auto: the number of ranks (" + std::to_string(world_size) +
                       ") is not divisible by tp * pp = " + std::to_string(p.tp) + " * " + std::to_string(p.pp));
    p.dp = world_size / (p.tp * p.pp);
  }
  require_config(static_cast<long long>(p.dp) * p.tp * p.pp == world_size,
                 "[parallel] dp * tp * pp = " + std::to_string(p.dp) + " * " + std::to_string(p.tp) + " * " +
                     std::to_string(p.pp) + " = " + std::to_string(static_cast<long long>(p.dp) * p.tp * p.pp) +
                     " does not match the number of ranks (" + std::to_string(world_size) + ")");
  require_config(m.n_head % p.tp == 0, kv("parallel", "tp", format_value(p.tp)) +
                                           " does not divide [model] n_head = " + format_value(m.n_head));
  if (m.arch == ModelArch::llama) {
    // Megatron-LM splits key/value heads over tp like query heads; a tp rank with no whole kv head
    // would need replicated kv heads and their gradients summed over tp, which is not built.
    require_config(m.kv_heads() % p.tp == 0, kv("parallel", "tp", format_value(p.tp)) +
                                                 " does not divide [model] n_kv_head = " + format_value(m.kv_heads()) +
                                                 ": each tp rank needs whole key/value heads (use tp <= n_kv_head)");
    require_config(m.ffn_width() % p.tp == 0, kv("parallel", "tp", format_value(p.tp)) +
                                                  " does not divide the SwiGLU width [model] ffn_hidden = " +
                                                  format_value(m.ffn_width()));
  }
  require_config(m.n_layer >= p.pp, kv("parallel", "pp", format_value(p.pp)) +
                                        " is larger than [model] n_layer = " + format_value(m.n_layer));
  require_config(p.zero_stage >= 0 && p.zero_stage <= 3,
                 kv("parallel", "zero_stage", format_value(p.zero_stage)) + " must be 0, 1, 2 or 3");
  require_at_least(p.shard_group_size, 0, "parallel", "shard_group_size");
  if (p.shard_group_size == 0) p.shard_group_size = p.dp;
  require_config(p.dp % p.shard_group_size == 0, kv("parallel", "shard_group_size", format_value(p.shard_group_size)) +
                                                     " does not divide dp = " + std::to_string(p.dp));
  require_config(p.zero_stage > 0 || p.shard_group_size == p.dp,
                 kv("parallel", "shard_group_size", format_value(p.shard_group_size)) +
                     ": hybrid sharding needs [parallel] zero_stage >= 1");
  require_at_least(p.unit_blocks, 0, "parallel", "unit_blocks");
  require_config(p.offload_optimizer != OffloadKind::host || cuda_build,
                 "[parallel] offload_optimizer = host: this build has no GPU, so the optimizer state is in host memory "
                 "already; use none, or nvme to move it to a local disk");
  if (p.offload_params != OffloadKind::none) {
    require_config(p.zero_stage == 3, "[parallel] offload_params = " + std::string(name_of(p.offload_params)) +
                                          " needs [parallel] zero_stage = 3 (only ZeRO-3 shards the parameters)");
    require_config(p.offload_optimizer == OffloadKind::nvme,
                   "[parallel] offload_params = nvme needs [parallel] offload_optimizer = nvme (the parameter shard "
                   "goes to the same per-rank file as the optimizer state, whose fp32 master weights refresh it)");
  }
  require_config(p.offload_optimizer != OffloadKind::nvme || !p.offload_path.empty(),
                 "[parallel] offload_optimizer = nvme needs [parallel] offload_path, a directory on a local disk");
  stage_layers(m, p);  // validates pp_layers

  TrainConfig& t = c.train;
  require_at_least<std::int64_t>(t.global_batch_size, 1, "train", "global_batch_size");
  require_at_least<std::int64_t>(t.micro_batch_size, 0, "train", "micro_batch_size");
  if (t.micro_batch_size == 0) {
    require_config(t.global_batch_size % p.dp == 0,
                   kv("train", "global_batch_size", format_value(t.global_batch_size)) +
                       " is not divisible by dp = " + std::to_string(p.dp));
    t.micro_batch_size = t.global_batch_size / p.dp;
  }
  require_config(t.global_batch_size % (t.micro_batch_size * p.dp) == 0,
                 kv("train", "global_batch_size", format_value(t.global_batch_size)) +
                     " is not a multiple of [train] micro_batch_size * dp = " + format_value(t.micro_batch_size) +
                     " * " + std::to_string(p.dp) + ": the number of accumulated micro-batches must be whole");
  require_config(double(t.micro_batch_size) * m.n_head * double(m.block_size) * m.block_size < 1e15,
                 "[train] micro_batch_size * [model] n_head * block_size^2 = attention scores of more than 1e15 "
                 "elements: lower the micro-batch or the context");
  require_at_least<std::int64_t>(t.max_steps, 1, "train", "max_steps");
  require_at_least<std::int64_t>(t.stop_at_step, 0, "train", "stop_at_step");
  require_at_least(t.time_limit_min, 0.0, "train", "time_limit_min");
  require_config(t.lr > 0.0, kv("train", "lr", format_value(t.lr)) + " must be > 0");
  require_config(t.min_lr >= 0.0 && t.min_lr <= t.lr,
                 kv("train", "min_lr", format_value(t.min_lr)) + " must be in [0, [train] lr]");
  require_at_least<std::int64_t>(t.warmup_steps, 0, "train", "warmup_steps");
  require_at_least(t.weight_decay, 0.0, "train", "weight_decay");
  require_config(t.beta1 >= 0.0 && t.beta1 < 1.0, kv("train", "beta1", format_value(t.beta1)) + " must be in [0, 1)");
  require_config(t.beta2 >= 0.0 && t.beta2 < 1.0, kv("train", "beta2", format_value(t.beta2)) + " must be in [0, 1)");
  require_config(t.eps > 0.0, kv("train", "eps", format_value(t.eps)) + " must be > 0");
  require_at_least(t.grad_clip, 0.0, "train", "grad_clip");
  require_at_least<std::int64_t>(t.eval_interval, 0, "train", "eval_interval");
  require_at_least<std::int64_t>(t.eval_iters, 0, "train", "eval_iters");
  require_at_least<std::int64_t>(t.seed, 0, "train", "seed");
  require_at_least<std::int64_t>(t.log_interval, 1, "train", "log_interval");
  require_at_least(t.peak_tflops, 0.0, "train", "peak_tflops");
  require_config((t.param_dtype == Precision::f32 && t.reduce_dtype == Precision::f32) || t.dtype == Precision::f32,
                 std::string("[train] param_dtype/reduce_dtype = ") +
                     name_of(t.param_dtype == Precision::f32 ? t.reduce_dtype : t.param_dtype) +
                     " needs [train] dtype = float");
  require_config(t.compute_dtype == Precision::f32 || t.dtype == Precision::f32,
                 "[train] compute_dtype = bf16 needs [train] dtype = float");
  // Host builds: oneDNN's bf16 matmul; whether this CPU has the bf16 dot product is checked where
  // the model is built (train/trainer.cpp), since the deck may be validated on another machine.
  require_config(t.compute_dtype == Precision::f32 || cuda_build || TRIDENT_HAVE_ONEDNN,
                 "[train] compute_dtype = bf16: this host build has no oneDNN, the library of its bf16 GEMMs "
                 "(OpenBLAS has no bf16 path; Debian: libdnnl-dev, then configure again; docs/performance.md). "
                 "Use compute_dtype = float here");
  require_config(t.host_gemm != HostGemmChoice::onednn || TRIDENT_HAVE_ONEDNN,
                 "[train] host_gemm = onednn: this build has no oneDNN (Debian: libdnnl-dev, then configure again); "
                 "use auto or openblas");
  require_config(c.model.attention == AttentionKernel::gemm || !cuda_build,
                 "[model] attention = fused is a CPU kernel (one thread per sequence and head on a GPU would be "
                 "far slower than cuBLAS): use attention = gemm in a CUDA build");
  validate_representable(c);
  allowed_changes(t);  // every name a deck key

  require_at_least<std::int64_t>(t.max_consecutive_skips, 1, "train", "max_consecutive_skips");
  validate_loss_scaling(t);
  require_config(t.spike_window == 0 || t.spike_window >= 2,
                 kv("train", "spike_window", format_value(t.spike_window)) + " must be 0 (off) or >= 2");
  require_config(t.spike_window <= 1000000,
                 kv("train", "spike_window", format_value(t.spike_window)) + " is larger than 1000000");
  require_config(t.spike_zscore > 0.0, kv("train", "spike_zscore", format_value(t.spike_zscore)) + " must be > 0");
  require_at_least<std::int64_t>(t.spike_max_rollbacks, 1, "train", "spike_max_rollbacks");
  require_config(!t.spike_rollback || t.spike_window > 0,
                 "[train] spike_rollback = true needs the spike detector: set [train] spike_window > 0");
  require_config(!t.spike_rollback || c.checkpoint.interval > 0,
                 "[train] spike_rollback = true needs checkpoints to roll back to: set [checkpoint] interval > 0");
  require_config(!c.data.path.empty(), "[data] path is not set: give the HDF5 token file written by `trident prep`");
  require_at_least(c.data.cache_max_mb, 0.0, "data", "cache_max_mb");
  require_at_least<std::int64_t>(c.checkpoint.interval, 0, "checkpoint", "interval");
  require_at_least<std::int64_t>(c.checkpoint.keep, 1, "checkpoint", "keep");
  require_at_least<std::int64_t>(c.checkpoint.keep_best, 0, "checkpoint", "keep_best");
  if (t.out_dir.empty()) t.out_dir = "runs/" + (c.deck_name.empty() ? std::string("trident") : c.deck_name);
}

}  // namespace trident
