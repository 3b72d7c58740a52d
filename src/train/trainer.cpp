#include "train/trainer.hpp"
#include "train/resume_check.hpp"

#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/host_copy.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "core/timer.hpp"
#include "io/checkpoint_file.hpp"
#include "kernels/elementwise.hpp"
#include "parallel/agree.hpp"
#include "parallel/runtime.hpp"
#include "checkpoint/async_writer.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/verify.hpp"
#include "train/checkpoint_policy.hpp"
#include "train/metrics.hpp"
#include "train/model_schema.hpp"
#include "train/peak.hpp"
#include "train/perf.hpp"
#include "train/resume.hpp"
#include "train/run_dir.hpp"
#include "train/signals.hpp"
#include "train/stop_policy.hpp"
#include "trident_version.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <ctime>
#include <filesystem>

namespace trident {

namespace fs = std::filesystem;

void resolve_vocab(Config& cfg, const TokenFileInfo& info) {
  if (cfg.model.vocab_size == 0) {
    cfg.model.vocab_size = static_cast<int>(info.vocab_size);
  } else if (cfg.model.vocab_size < info.vocab_size) {
    throw ConfigError("[model] vocab_size = " + std::to_string(cfg.model.vocab_size) + " is smaller than the " +
                      std::to_string(info.vocab_size) + " tokens of the data file's " + info.tokenizer +
                      " vocabulary (set 0 to take it from the file)");
  }
}

namespace {

constexpr std::uint64_t kEvalSeedSalt = 0xE7A1C0DEull;

/// Micro-batches per step on one dp rank, and the schedule of pipeline stage `pp_rank`.
int micro_batches(const Config& cfg) {
  return static_cast<int>(cfg.train.global_batch_size / (cfg.parallel.dp * cfg.train.micro_batch_size));
}
PipelineSchedule pipeline_schedule(const Config& cfg, int pp_rank) {
  const PipelineScheduleKind kind = cfg.parallel.pp_schedule;
  return PipelineSchedule(kind, micro_batches(cfg), cfg.parallel.pp, pp_rank);
}

}  // namespace

template <class T>
Trainer<T>::Trainer(const Config& cfg, const ProcessGrid& grid, const TokenDataset& data)
    : cfg_(cfg),
      grid_(grid),
      data_(data),
      state_(cfg, grid),
      n_micro_(micro_batches(cfg)),
      pipeline_(pipeline_schedule(cfg, grid.pp_rank())),
      gpt_(cfg.model, state_.layout(), &grid.tp_comm(), static_cast<int>(cfg.train.micro_batch_size),
           cfg.model.block_size, cfg.train.activation_checkpointing == Recompute::block, pipeline_.stashes(),
           cfg.train.compute_dtype == Precision::bf16 ? GemmInputs::bf16 : GemmInputs::native),
      sampler_(static_cast<std::uint64_t>(cfg.train.seed), data.size("train"), cfg.model.block_size),
      tokens_("trident::tokens",
              static_cast<size_t>(pipeline_.stashes() * cfg.train.micro_batch_size * cfg.model.block_size)),
      targets_("trident::targets",
               static_cast<size_t>(pipeline_.stashes() * cfg.train.micro_batch_size * cfg.model.block_size)),
      nonfinite_(cfg.train.nonfinite, cfg.train.max_consecutive_skips),
      spikes_(cfg.train.spike_window),
      scaler_(cfg.train),
      timers_(cfg.train.timers) {
  // A resume compares the checkpoint's [data] path with this run's; equal contents are the same data.
  state_.set_data_identity(data.info());
  for (Communicator* c : {&grid.dp_comm(), &grid.tp_comm(), &grid.pp_comm(), &grid.mp_comm(), &grid.world_comm()})
    timers_.watch(*c);
  for (Communicator* c : state_.own_comms()) timers_.watch(*c);
  if (grid.pp_size() > 1)
    send_buf_ = TrackedBuffer<T>("trident::pp_send", cfg.train.micro_batch_size * cfg.model.block_size * cfg.model.n_embd,
                                 MemCategory::comm);
  require_bf16_gemms(cfg.train, grid.world_comm(), "[train] compute_dtype = bf16 cannot run here",
                     "Use compute_dtype = float on this machine");
  gpt_.set_gemm_inputs(cfg.train.compute_dtype == Precision::bf16 ? GemmInputs::bf16 : GemmInputs::native);
  schedule_.lr = cfg.train.lr;
  schedule_.min_lr = cfg.train.min_lr;
  schedule_.warmup_steps = cfg.train.warmup_steps;
  schedule_.max_steps = cfg.train.max_steps;
}

template <class T>
std::vector<T> Trainer<T>::master_copy() const {
  const ZeroEngine<T>& z = state_.engine();
  std::vector<T> out(static_cast<size_t>(z.local_size()));
  z.read_state(0, 0, z.local_size(), out.data());  // from the live array or the offload file
  return out;
}
template <class T>
std::vector<T> Trainer<T>::exp_avg_copy() const {
  const ZeroEngine<T>& z = state_.engine();
  std::vector<T> out(static_cast<size_t>(z.local_size()));
  z.read_state(1, 0, z.local_size(), out.data());
  return out;
}
template <class T>
std::vector<T> Trainer<T>::exp_avg_sq_copy() const {
  const ZeroEngine<T>& z = state_.engine();
  std::vector<T> out(static_cast<size_t>(z.local_size()));
  z.read_state(2, 0, z.local_size(), out.data());
  return out;
}
template <class T>
OffloadCounters Trainer<T>::offload_counters() const {
  return state_.engine().offload_counters();
}
template <class T>
std::int64_t Trainer<T>::comm_bytes() const {
  return state_.comm_bytes();
}

template <class T>
void Trainer<T>::load_micro_batch(std::int64_t first, int stash) {
  const int T_ = cfg_.model.block_size;
  const std::int64_t mb = cfg_.train.micro_batch_size, n = mb * T_;
  std::vector<std::int64_t> offsets(static_cast<size_t>(mb));
  for (std::int64_t b = 0; b < mb; ++b) offsets[static_cast<size_t>(b)] = sampler_.offset(first + b);
  if (grid_.pp_rank() == 0)
    for (std::int64_t b = 0; b < mb; ++b) {
      loaded_samples_.push_back(first + b);
      loaded_samples_.push_back(offsets[static_cast<size_t>(b)]);
    }
  std::vector<token_t> tok(static_cast<size_t>(n)), tgt(static_cast<size_t>(n));
  data_.load_batch("train", offsets, T_, tok.data(), tgt.data());
  auto sub = [&](Kokkos::View<token_t*, MemSpace>& v) {
    return Kokkos::subview(v, std::make_pair(static_cast<size_t>(stash * n), static_cast<size_t>((stash + 1) * n)));
  };
  auto dtok = sub(tokens_);
  auto dtgt = sub(targets_);
  Kokkos::deep_copy(dtok, Kokkos::View<const token_t*, HostSpace, Unmanaged>(tok.data(), tok.size()));
  Kokkos::deep_copy(dtgt, Kokkos::View<const token_t*, HostSpace, Unmanaged>(tgt.data(), tgt.size()));
}

template <class T>
StepResult Trainer<T>::train_step() {
  Timer timer;
  const int T_ = cfg_.model.block_size;
  const std::int64_t G = cfg_.train.global_batch_size, mb = cfg_.train.micro_batch_size;
  const std::int64_t per_rank = G / grid_.dp_size();
  // fp16 loss scaling: the seed of the backward carries the scale (Micikevicius et al. 2018, sec.
  // 3.2). With a power-of-two scale every gradient is exactly scale times the unscaled one (barring
  // overflow and underflow), so the update below, which divides it out again, is bitwise that of
  // an unscaled run; the scale only decides what survives a 16-bit reduction.
  const double loss_scale = scaler_.scale();
  const T dloss = static_cast<T>(loss_scale / (static_cast<double>(G) * T_));
  const std::int64_t n = mb * T_, act = n * cfg_.model.n_embd;
  const bool first = grid_.pp_rank() == 0, last = grid_.pp_rank() == grid_.pp_size() - 1;
  const int pp = grid_.pp_size(), stage = grid_.pp_rank(), M = n_micro_;
  Communicator& ppc = grid_.pp_comm();
  ZeroEngine<T>& zero = state_.engine();
  {
    const auto part = timers_.time(StepPart::opt);  // zeroing the gradient belongs to the update
    zero.begin_step();
  }
  loaded_samples_.clear();

  double loss_sum = 0.0, busy = 0.0;
  std::vector<Request> fwd_send(static_cast<size_t>(pipeline_.stashes()));
  Request bwd_send;
  auto forward = [&](int m) {
    const int k = pipeline_.stash_of(m);
    fwd_send[static_cast<size_t>(k)].wait();  // the stash's previous output has been received
    const std::int64_t first_sample = consumed_samples_ + grid_.dp_rank() * per_rank + m * mb;
    if (first || last) {
      const auto part = timers_.time(StepPart::data);
      load_micro_batch(first_sample, k);
    }
    if (!first) {
      const auto part = timers_.claim(StepPart::bubble);  // waiting for the previous stage's activations
      ppc.recv(gpt_.stage_input(k).data(), static_cast<size_t>(act), dtype_of<T>(), stage - 1, 2 * m);
    }
    ForwardContext ctx;
    ctx.seed = static_cast<std::uint64_t>(cfg_.train.seed);
    ctx.step = static_cast<std::uint32_t>(step_);
    ctx.sample_offset = static_cast<std::uint64_t>(first_sample);
    ctx.train = true;
    View1<const token_t> tv(tokens_.data() + k * n, static_cast<size_t>(n)), gv(targets_.data() + k * n, static_cast<size_t>(n));
    Timer t;
    {
      const auto part = timers_.time(StepPart::fwd);
      loss_sum += gpt_.forward(zero, tv, last ? gv : View1<const token_t>(), static_cast<int>(mb), T_, ctx, true, k);
    }
    busy += t.seconds();
    if (!last)
      fwd_send[static_cast<size_t>(k)] =
          ppc.isend(gpt_.stage_output(k).data(), static_cast<size_t>(act), dtype_of<T>(), stage + 1, 2 * m);
  };
  auto backward = [&](int m) {
    const int k = pipeline_.stash_of(m);
    if (!last) {
      const auto part = timers_.claim(StepPart::bubble);  // waiting for the next stage's gradient
      ppc.recv(gpt_.output_grad().data(), static_cast<size_t>(act), dtype_of<T>(), stage + 1, 2 * m + 1);
    }
    Timer t;
    {
      const auto part = timers_.time(StepPart::bwd);
      gpt_.backward(zero, dloss, k);
      zero.end_micro_batch();
    }
    busy += t.seconds();
    if (!first) {
      bwd_send.wait();
      Kokkos::deep_copy(send_buf_.slice(0, act), View1<const T>(gpt_.input_grad().data(), static_cast<size_t>(act)));
      bwd_send = ppc.isend(send_buf_.data(), static_cast<size_t>(act), dtype_of<T>(), stage - 1, 2 * m + 1);
    }
  };
  // GPipe or 1F1B (train/pipeline_schedule.hpp): the order of this stage's passes.
  for (const PipelineAction& a : pipeline_.actions()) {
    if (a.pass == PipelineAction::Pass::forward) forward(a.micro_batch);
    else backward(a.micro_batch);
  }
  for (auto& r : fwd_send) r.wait();
  bwd_send.wait();
  // The optimizer part: gradient reduction (its communication goes to the dp column), the loss,
  // norm and health agreements, clipping and the update, up to the fence that ends the step.
  auto opt_part = timers_.time(StepPart::opt);
  zero.finish_gradients();
  // The loss lives on the last stage: sum over its dp group, then give it to every stage.
  loss_sum = grid_.dp_comm().all_reduce_value(loss_sum);
  ppc.broadcast(&loss_sum, 1, pp - 1);

  const std::int64_t this_step = step_ + 1;
  if (poison_point("grad", this_step)) zero.poison_gradient();  // test hook (core/fault.hpp)
  StepResult r;
  r.loss = loss_sum / (static_cast<double>(G) * T_);
  r.grad_norm = zero.grad_norm() / loss_scale;  // the norm of the unscaled gradient
  r.loss_scale = loss_scale;
  if (poison_point("loss", this_step)) r.loss = std::nan("");
  if (poison_point("spike", this_step)) r.loss *= 1000.0;
  // Every rank takes the same decision from the same numbers (train/numerics.hpp).
  const StepHealth health = agree_step_health(grid_.world_comm(), grid_.world_rank(), r.loss, r.grad_norm);
  r.lr = schedule_.at(step_);
  r.loss_z = std::nan("");
  // fp16: finite losses with a non-finite gradient are an overflow of the scaled gradient, the
  // scaler's case (GradScaler's found_inf), not the nonfinite policy's; a non-finite loss is
  // always the policy's (a real divergence, which no scale causes: the forward is unscaled).
  if (scaler_.enabled() && health.loss_finite && !health.finite) {
    const double before = scaler_.scale();
    if (scaler_.update(false) == ScaleVerdict::stop)
      throw Error(log::format("stopping at step %lld: the gradients overflow (inf or nan, first seen on world rank %d) "
                              "at the minimum loss scale %g ([train] loss_scale_min): no update was made and "
                              "nothing is saved; the last checkpoint holds the last good state. Gradients that are "
                              "not finite without scaling mean divergence: lower [train] lr and resume, or use "
                              "[train] param_dtype = bf16 (no loss scaling needed)",
                              static_cast<long long>(this_step), health.first_bad_rank, before),
                  /*collective=*/true);
    log::warn("step %lld: gradient overflow at loss scale %g (first seen on world rank %d): update skipped, the "
              "scale is now %g ([train] loss_scale_backoff = %g)",
              static_cast<long long>(this_step), before, health.first_bad_rank, scaler_.scale(),
              cfg_.train.loss_scale_backoff);
    r.skipped = true;
    r.overflow = true;
    r.first_bad_rank = health.first_bad_rank;
    r.loss = health.loss;
    r.grad_norm = std::numeric_limits<double>::infinity();
  }
  const NonfiniteVerdict verdict = r.overflow ? NonfiniteVerdict::apply : nonfinite_.decide(health.finite);
  if (verdict != NonfiniteVerdict::apply) scaler_.interrupt();
  if (verdict == NonfiniteVerdict::stop) {
    const std::string here = log::format("loss %g, gradient norm %g on world rank %d", r.loss, r.grad_norm,
                                         grid_.world_rank());
    if (nonfinite_.action() == NonfiniteAction::stop)
      throw Error("training diverged at step " + std::to_string(this_step) +
                      ": the loss or gradient norm is not finite (first seen on world rank " +
                      std::to_string(health.first_bad_rank) + "; " + here +
                      "); no update was made and nothing is saved. Lower [train] lr, resume from an earlier "
                      "checkpoint, or set [train] nonfinite = skip to drop such steps",
                  /*collective=*/true);
    throw Error("stopping at step " + std::to_string(this_step) + ": " + std::to_string(nonfinite_.consecutive()) +
                    " steps in a row had a non-finite loss or gradient norm ([train] max_consecutive_skips = " +
                    std::to_string(nonfinite_.max_consecutive()) + "; first seen on world rank " +
                    std::to_string(health.first_bad_rank) + "; " + here +
                    "). Nothing is saved: the last checkpoint holds the last good state. Lower [train] lr and "
                    "resume from it",
                /*collective=*/true);
  }
  if (r.overflow) {
    // Skipped above: no update, the step still counts (the nonfinite policy's counters untouched).
  } else if (verdict == NonfiniteVerdict::skip) {
    // Megatron-LM / DeepSpeed: the iteration counts, the update is dropped.
    r.skipped = true;
    r.first_bad_rank = health.first_bad_rank;
    log::warn("step %lld: non-finite loss or gradient norm (first seen on world rank %d): update skipped "
              "([train] nonfinite = skip; %lld in a row, the run stops at %lld)",
              static_cast<long long>(this_step), health.first_bad_rank,
              static_cast<long long>(nonfinite_.consecutive()), static_cast<long long>(nonfinite_.max_consecutive()));
    r.loss = std::nan("");
    r.grad_norm = std::nan("");
  } else {
    r.loss = health.loss;
    r.loss_z = spikes_.zscore(r.loss);
    spikes_.push(r.loss);
    // Clipping by global norm, as torch.nn.utils.clip_grad_norm_: scale = min(1, clip / (norm + 1e-6)).
    double scale = 1.0;
    if (cfg_.train.grad_clip > 0.0) scale = std::min(1.0, cfg_.train.grad_clip / (r.grad_norm + 1e-6));
    if (poison_point("offload_truncate", this_step)) zero.truncate_offload_for_test();  // test hook
    zero.step(r.lr, scale / loss_scale);  // unscales the gradient (exactly, for a power-of-two scale)
    scaler_.update(true);                 // may grow the scale of the next step
  }
  // An offload I/O failure on any rank (the update's streams, or the parameter reads of the
  // forward and backward, also in a skipped step) stops every rank here, before anything is
  // saved: the last checkpoint stays the newest (the file is scratch, rebuilt from it at resume).
  if (zero.offloaded())
    run_agreed(grid_.world_comm(), "step " + std::to_string(this_step) + ": offload failed",
               [&] { zero.check_offload(); });
  ++step_;
  consumed_samples_ += G;
  Kokkos::fence();
  opt_part.stop();
  r.step = step_;
  r.seconds = timer.seconds();
  // Bubble: the share of the step a stage waits outside its forward and backward passes (mean over
  // stages). Defined for pipelines only; with one stage it would only measure the optimizer.
  r.bubble = pp > 1 ? ppc.all_reduce_value(std::max(0.0, 1.0 - busy / r.seconds)) / pp : 0.0;
  r.bubble_theory = static_cast<double>(pp - 1) / (M + pp - 1);
  return r;
}

template <class T>
EvalResult Trainer<T>::evaluate(const std::function<bool()>& stop_requested, const std::string& split) {
  Timer timer;
  EvalResult res;
  const int T_ = cfg_.model.block_size;
  const std::int64_t n_val = data_.size(split);
  const int dp = grid_.dp_size(), d = grid_.dp_rank();
  const std::int64_t mb = cfg_.train.micro_batch_size;
  const bool first = grid_.pp_rank() == 0, last = grid_.pp_rank() == grid_.pp_size() - 1;
  Communicator& ppc = grid_.pp_comm();
  std::vector<std::int64_t> windows;  // start offsets of all windows of this evaluation
  // eval_iters batches of random windows that would read more windows than the split holds (the
  // same windows again) cost more than the whole split and estimate its loss less well: the whole
  // split instead, said once.
  const std::int64_t whole = n_val >= T_ + 1 ? (n_val - 1) / T_ : 0;
  const bool sampled = cfg_.train.eval_iters > 0 &&
                       cfg_.train.eval_iters <= whole / std::max<std::int64_t>(1, cfg_.train.global_batch_size);
  if (cfg_.train.eval_iters > 0 && !sampled && !eval_capped_warned_ && whole > 0) {
    eval_capped_warned_ = true;
    log::warn("[train] eval_iters = %lld batches of %lld sequences is more than the %s split's %lld windows of %d "
              "tokens: every evaluation reads the whole split instead (as eval_iters = 0)",
              static_cast<long long>(cfg_.train.eval_iters), static_cast<long long>(cfg_.train.global_batch_size),
              split.c_str(), static_cast<long long>(whole), T_);
  }
  if (n_val >= T_ + 1) {
    if (!sampled) {
      const std::int64_t n = (n_val - 1) / T_;
      for (std::int64_t i = 0; i < n; ++i) windows.push_back(i * T_);
    } else {
      Sampler s(static_cast<std::uint64_t>(cfg_.train.seed) ^ kEvalSeedSalt, n_val, T_);
      const std::int64_t n = cfg_.train.eval_iters * cfg_.train.global_batch_size;
      for (std::int64_t i = 0; i < n; ++i) windows.push_back(s.offset(i));
    }
  }
  // This dp rank's contiguous share of the windows. Every rank runs the same number of forward
  // passes (a rank with fewer windows runs an empty-target batch), because the tp, pp and ZeRO-3
  // communication inside a forward needs every rank of its groups.
  const auto n = static_cast<std::int64_t>(windows.size());
  const std::int64_t begin = n * d / dp, end = n * (d + 1) / dp;
  const std::int64_t most = (n + dp - 1) / dp, passes = (most + mb - 1) / mb;
  std::vector<token_t> tok(static_cast<size_t>(mb * T_)), tgt(static_cast<size_t>(mb * T_));
  double loss_sum = 0.0;
  res.batches_planned = passes;
  // Rank 0's passes (every rank runs as many). ProgressEnd::erase: the "val loss" line that follows
  // is the evaluation's one line in the step log; progress shows only on a terminal, or in a batch
  // log once an evaluation has run for a whole TRIDENT_PROGRESS_INTERVAL (whole splits, eval_iters = 0).
  Progress progress(!sampled ? "evaluation (whole " + split + " split)" : "evaluation", passes,
                    ProgressUnit::batches, ProgressEnd::erase);
  for (std::int64_t k = 0; k < passes; ++k) {
    // Every rank asks at the same pass, before any of the pass's communication, so all leave
    // together (the forward passes are collective over tp, pp and the ZeRO-3 gathers).
    if (stop_requested && stop_requested()) {
      res.stopped = true;
      res.loss = std::nan("");
      res.seconds = timer.seconds();
      return res;
    }
    res.batches = k + 1;
    const std::int64_t i = begin + k * mb;
    const std::int64_t B = std::max<std::int64_t>(0, std::min(mb, end - i));
    const std::int64_t rows = std::max<std::int64_t>(B, 1);  // a dummy window whose loss is not counted
    if (first || last) {
      std::vector<std::int64_t> offsets;
      if (B > 0) offsets.assign(windows.begin() + i, windows.begin() + i + B);
      else offsets.assign(1, 0);
      data_.load_batch(split, offsets, T_, tok.data(), tgt.data());
      if (B == 0) std::fill(tgt.begin(), tgt.begin() + T_, -1);
      Kokkos::deep_copy(Kokkos::subview(tokens_, std::make_pair(size_t{0}, static_cast<size_t>(rows * T_))),
                        Kokkos::View<const token_t*, HostSpace, Unmanaged>(tok.data(), static_cast<size_t>(rows * T_)));
      Kokkos::deep_copy(Kokkos::subview(targets_, std::make_pair(size_t{0}, static_cast<size_t>(rows * T_))),
                        Kokkos::View<const token_t*, HostSpace, Unmanaged>(tgt.data(), static_cast<size_t>(rows * T_)));
    }
    const auto len = static_cast<size_t>(rows * T_);
    const std::size_t act = len * static_cast<size_t>(cfg_.model.n_embd);
    if (!first) ppc.recv(gpt_.stage_input(0).data(), act, dtype_of<T>(), grid_.pp_rank() - 1, 0);
    View1<const token_t> tv(tokens_.data(), len), gv(targets_.data(), len);
    loss_sum += gpt_.forward(state_.engine(), tv, last ? gv : View1<const token_t>(), static_cast<int>(rows), T_,
                             ForwardContext{}, /*for_backward=*/false, 0);
    if (!last) ppc.send(gpt_.stage_output(0).data(), act, dtype_of<T>(), grid_.pp_rank() + 1, 0);
    progress.update(k + 1);
  }
  progress.finish();
  // With offload_params the forward passes read the parameter records: a failed read must not
  // become a wrong loss. Agreed over world, as after a step.
  if (state_.engine().offloaded())
    run_agreed(grid_.world_comm(), "evaluation: offload failed", [&] { state_.engine().check_offload(); });
  loss_sum = grid_.dp_comm().all_reduce_value(loss_sum);
  ppc.broadcast(&loss_sum, 1, grid_.pp_size() - 1);
  res.tokens = n * T_;
  res.loss = n > 0 ? loss_sum / static_cast<double>(res.tokens) : std::nan("");
  res.seconds = timer.seconds();
  return res;
}

template <class T>
RunState Trainer<T>::run_state() const {
  RunState r;
  r.step = step_;
  r.consumed_samples = consumed_samples_;
  r.last_lr = step_ > 0 ? schedule_.at(step_ - 1) : 0.0;
  r.tokenizer = data_.info().tokenizer;
  r.vocab = data_.info().vocab;
  r.tokenizer_model = data_.info().model;
  r.lineage = lineage_;
  r.data_hash = data_.info().content_hash;
  r.data_train_tokens = data_.info().n_train;
  r.val_loss = val_loss_;
  r.val_loss_step = val_loss_step_;
  r.skipped_steps = nonfinite_.skipped_total();
  r.consecutive_skips = nonfinite_.consecutive();
  r.loss_window = spikes_.values();
  if (scaler_.enabled()) {
    r.loss_scale = scaler_.scale();
    r.loss_scale_good_steps = scaler_.good_steps();
    r.overflow_steps = scaler_.overflows();
  }
  return r;
}

template <class T>
CheckpointSnapshot Trainer<T>::snapshot() const {
  return state_.snapshot(run_state());
}

template <class T>
CheckpointSnapshot Trainer<T>::live_view() const {
  return state_.live_view(run_state());
}

template <class T>
void Trainer<T>::write_checkpoint(const std::string& path) {
  const CheckpointSnapshot view = live_view();
  write_checkpoint_file(path, grid_.world_comm(), view.write);
}

template <class T>
void Trainer<T>::load_checkpoint(const std::string& path) {
  const RunState r = state_.load(path);
  step_ = r.step;
  consumed_samples_ = r.consumed_samples;
  lineage_ = r.lineage;
  loaded_run_ = r;
  val_loss_ = r.val_loss;
  val_loss_step_ = r.val_loss_step;
  nonfinite_.restore(r.consecutive_skips, r.skipped_steps);
  spikes_.restore(r.loss_window);
  // The loss scale of a checkpoint of an fp16 run; one of a run without loss scaling (another
  // param_dtype) has none: the scale starts again at loss_scale_init.
  scaler_ = LossScaler(cfg_.train);
  if (scaler_.enabled() && r.loss_scale > 0.0 &&
      scaler_.restore(r.loss_scale, r.loss_scale_good_steps, r.overflow_steps))
    log::warn("the checkpoint's loss scale %g is below [train] loss_scale_min = %g: the scale starts at %g",
              r.loss_scale, cfg_.train.loss_scale_min, scaler_.scale());
}

template <class T>
void Trainer<T>::init_weights_from(const std::string& path, const TokenFileInfo& data) {
  // Same vocabulary size is not the same vocabulary: ids must mean the same tokens. Checked before
  // the model's shape (the vocabulary size follows from the tokenizer). Identical on every rank
  // (one file, one token file), so the ConfigError is collective.
  state_.load_weights(path, [&](const CheckpointMeta& meta) {
    if (const std::string why = tokenizer_mismatch(meta.run, data); !why.empty())
      throw ConfigError("[train] init_from: " + why);  // load_weights names the file
  });
}

template <class T>
void Trainer<T>::rollback(const std::string& path) {
  const std::int64_t consumed = consumed_samples_;
  load_checkpoint(path);
  consumed_samples_ = consumed;  // past the batches that led to the spike
}

template class Trainer<float>;
template class Trainer<double>;

namespace {
/// What the checkpoint category of a prediction `b` for `cfg` is, in the user's words.
std::string save_memory_note(const Config& cfg, const MemoryBytes& b) {
  if (cfg.checkpoint.async)
    return "  (an asynchronous save's host snapshot: master weights and both moments of this rank's shard, "
           "kept for the next save)";
  if (b[static_cast<size_t>(MemCategory::checkpoint)] == 0)
    return "  (a synchronous save writes straight from the live buffers)";
  return log::format("  (a synchronous save's staging buffer, at most %lld MiB; the rest is written from the "
                     "live buffers)",
                     static_cast<long long>(ModelState<float>::kSaveStagingBytes >> 20));
}
}  // namespace

MemoryBytes predict_memory(const Config& cfg) {
  // The largest part: stage 0 (embedding + the most blocks) or the last stage (head), tp rank 0.
  MemoryBytes best{};
  std::int64_t best_total = -1;
  for (int pp_rank : {0, cfg.parallel.pp - 1}) {
    const ParamLayout layout =
        ParamLayout::make(cfg.model, cfg.parallel.unit_blocks, ModelPart::make(cfg.model, cfg.parallel, 0, pp_rank));
    const GptSchedule sched = GptSchedule::make(layout, cfg.model);
    const int S = cfg.parallel.shard_group_size > 0 ? cfg.parallel.shard_group_size : cfg.parallel.dp;
    const bool dbl = cfg.train.dtype == Precision::f64;
    MemoryBytes b = dbl ? ZeroEngine<double>::plan(layout, sched, ZeroOptions::from(cfg), S, 0)
                        : ZeroEngine<float>::plan(layout, sched, ZeroOptions::from(cfg), S, 0);
    const bool recompute = cfg.train.activation_checkpointing == Recompute::block;
    const int mb = static_cast<int>(cfg.train.micro_batch_size);
    const int stashes = pipeline_schedule(cfg, pp_rank).stashes();
    const GemmInputs gemm = cfg.train.compute_dtype == Precision::bf16 ? GemmInputs::bf16 : GemmInputs::native;
    const std::int64_t acts =
        dbl ? Gpt<double>::activation_elements(cfg.model, layout, mb, cfg.model.block_size, recompute, stashes, gemm)
            : Gpt<float>::activation_elements(cfg.model, layout, mb, cfg.model.block_size, recompute, stashes, gemm);
    b[static_cast<size_t>(MemCategory::activations)] += acts * (dbl ? 8 : 4);
    // bf16 GEMM inputs: the GEMM seam's bf16 copy of the largest GEMM's A and B (kernels/gemm.hpp).
    if (cfg.train.compute_dtype == Precision::bf16)
      b[static_cast<size_t>(MemCategory::activations)] +=
          2 * Gpt<float>::gemm_operand_elements(cfg.model, layout, mb, cfg.model.block_size);
    if (cfg.parallel.pp > 1)
      b[static_cast<size_t>(MemCategory::comm)] += cfg.train.micro_batch_size * cfg.model.block_size * cfg.model.n_embd * (dbl ? 8 : 4);
    b[static_cast<size_t>(MemCategory::checkpoint)] += dbl ? ModelState<double>::plan_save_bytes(cfg, layout, sched)
                                                           : ModelState<float>::plan_save_bytes(cfg, layout, sched);
    std::int64_t total = 0;
    for (auto v : b) total += v;
    if (total > best_total) {
      best = b;
      best_total = total;
    }
  }
  return best;
}

void print_memory_prediction(const Config& cfg) {
  const MemoryBytes b = predict_memory(cfg);
  const ParamLayout layout = ParamLayout::make(cfg.model, cfg.parallel.unit_blocks);
  const double psi = static_cast<double>(layout.numel()), mib = 1024.0 * 1024.0;
  const int S = cfg.parallel.shard_group_size > 0 ? cfg.parallel.shard_group_size : cfg.parallel.dp;
  const int z = cfg.parallel.zero_stage;
  std::printf("predicted memory per rank for %s: dp=%d (shard groups of %d) tp=%d pp=%d, ZeRO stage %d, %s params\n",
              cfg.deck_name.c_str(), cfg.parallel.dp, S, cfg.parallel.tp, cfg.parallel.pp, z,
              name_of(cfg.train.param_dtype));
  std::printf("model: %.0f parameters (%.2fM), micro-batch %lld x %d tokens, activation checkpointing %s, "
              "attention %s, compute_dtype %s\n",
              psi, psi / 1e6, static_cast<long long>(cfg.train.micro_batch_size), cfg.model.block_size,
              name_of(cfg.train.activation_checkpointing), name_of(cfg.model.attention), name_of(cfg.train.compute_dtype));
  std::int64_t total = 0;
  for (int c = 0; c < static_cast<int>(MemCategory::data); ++c) {
    std::printf("  %-12s %12.2f MiB%s\n", mem_category_name(static_cast<MemCategory>(c)),
                static_cast<double>(b[static_cast<size_t>(c)]) / mib,
                static_cast<MemCategory>(c) == MemCategory::checkpoint ? save_memory_note(cfg, b).c_str() : "");
    total += b[static_cast<size_t>(c)];
  }
  std::printf("  %-12s %12.2f MiB  (the peak: during a save)\n", "total", static_cast<double>(total) / mib);
  // ZeRO paper, sec. 3/5: with mixed precision 2 + 2 + 12 bytes per parameter; stage 1 divides
  // the 12, stage 2 also the gradient's 2, stage 3 everything, by the sharding degree.
  // Tensor and pipeline parallelism first divide the parameters by tp * pp (Megatron-LM's model
  // parallelism), ZeRO then shards each rank's part over the dp shard group.
  const double p = 2, g = 2, k = 12, psi_mp = psi / (cfg.parallel.tp * cfg.parallel.pp);
  const double zero_paper = psi_mp * ((z >= 3 ? p / S : p) + (z >= 2 ? g / S : g) + (z >= 1 ? k / S : k));
  std::printf("ZeRO paper formula (2+2+12 bytes/param, params / (tp*pp) = %.0f, shard %d): %.2f MiB of model states\n",
              psi_mp, S, zero_paper / mib);
  std::printf("Trident model states (params + grads + optimizer above): %.2f MiB\n",
              static_cast<double>(b[0] + b[1] + b[2]) / mib);
  // By device: what the categories above take on the accelerator and in host memory, and what
  // the optimizer-state offload keeps on the local disk (ZeRO-Infinity's three tiers).
  const OffloadPlan off = predict_offload(cfg);
  const std::int64_t host =
      TRIDENT_HAVE_CUDA ? b[static_cast<size_t>(MemCategory::checkpoint)] + off.staging_bytes + off.host_bytes : total;
  std::printf("by device: accelerator %.2f MiB, host %.2f MiB, nvme %.2f MiB%s\n",
              static_cast<double>(total - host) / mib, static_cast<double>(host) / mib,
              static_cast<double>(off.file_bytes) / mib, TRIDENT_HAVE_CUDA ? "" : " (a host build: no accelerator)");
  if (off.file_bytes > 0 && cfg.parallel.offload_params == OffloadKind::nvme)
    std::printf("offload_optimizer = nvme, offload_params = nvme: %.2f MiB per rank in %s (fp32 master weights, "
                "both AdamW moments, and the parameter shard: one record per unit; scratch, rebuilt from the "
                "checkpoint at start); resident instead: %.2f MiB of staging (two optimizer records of at most 16 MiB "
                "in optimizer above, and three records of the largest unit's parameter piece in params above)\n",
                static_cast<double>(off.file_bytes) / mib, offload_file_name(cfg.parallel.offload_path, 0).c_str(),
                static_cast<double>(off.staging_bytes) / mib);
  else if (off.host_bytes > 0)
    std::printf("offload_optimizer = host: %.2f MiB per rank in host memory (fp32 master weights and both AdamW moments, "
                "page-locked, with the host staging of one gradient chunk; in optimizer above), the AdamW step on the "
                "host; on the accelerator one chunk of staging\n",
                static_cast<double>(off.host_bytes) / mib);
  else if (off.file_bytes > 0)
    std::printf("offload_optimizer = nvme: %.2f MiB per rank in %s (fp32 master weights where they are a copy of "
                "their own, and both AdamW moments; scratch, rebuilt from the checkpoint at start); resident instead: "
                "two records of at most 16 MiB of state, %.2f MiB (in optimizer above)\n",
                static_cast<double>(off.file_bytes) / mib,
                offload_file_name(cfg.parallel.offload_path, 0).c_str(), static_cast<double>(off.staging_bytes) / mib);
}

OffloadPlan predict_offload(const Config& cfg, bool gpu) {
  OffloadPlan best;
  for (int pp_rank : {0, cfg.parallel.pp - 1}) {
    const ParamLayout layout =
        ParamLayout::make(cfg.model, cfg.parallel.unit_blocks, ModelPart::make(cfg.model, cfg.parallel, 0, pp_rank));
    const GptSchedule sched = GptSchedule::make(layout, cfg.model);
    const int S = cfg.parallel.shard_group_size > 0 ? cfg.parallel.shard_group_size : cfg.parallel.dp;
    const ZeroOptions o = ZeroOptions::from(cfg);
    const bool dbl = cfg.train.dtype == Precision::f64;
    OffloadPlan p;
    p.file_bytes = dbl ? ZeroEngine<double>::plan_offload_bytes(layout, sched, o, S, 0)
                       : ZeroEngine<float>::plan_offload_bytes(layout, sched, o, S, 0);
    p.staging_bytes = dbl ? ZeroEngine<double>::plan_offload_staging_bytes(layout, sched, o, S, 0)
                          : ZeroEngine<float>::plan_offload_staging_bytes(layout, sched, o, S, 0);
    const HostOffloadBytes h = dbl ? ZeroEngine<double>::plan_offload_host_split(layout, sched, o, S, 0, gpu)
                                   : ZeroEngine<float>::plan_offload_host_split(layout, sched, o, S, 0, gpu);
    p.host_bytes = h.host;
    p.device_bytes = h.device;
    if (p.file_bytes > best.file_bytes || p.host_bytes > best.host_bytes) best = p;
  }
  return best;
}

// ---------------------------------------------------------------------------------------------

namespace {

std::string human(double v) {
  if (v >= 1e9) return log::format("%.2fG", v / 1e9);
  if (v >= 1e6) return log::format("%.2fM", v / 1e6);
  if (v >= 1e3) return log::format("%.1fk", v / 1e3);
  return log::format("%.0f", v);
}

/// [train] host_gemm = shape: what rank 0's chooser picked, at the end of a run (however it stops).
void log_host_gemm_choices() {
  if (const std::string choices = host_gemm_choices_text(); !choices.empty())
    log::info("fp32 GEMMs per shape on rank 0: %s", choices.c_str());
}

/// The Trainer's checkpoints through CheckpointDir's commit protocol: on the training thread, or
/// with [checkpoint] async on an AsyncCheckpointWriter's thread. Collective over world (the
/// constructor duplicates it for the writer).
template <class T>
class TrainerCheckpointSaver final : public CheckpointSaver {
 public:
  TrainerCheckpointSaver(Trainer<T>& trainer, const CheckpointDir& ckdir, Communicator& world, const Config& cfg)
      : trainer_(trainer), ckdir_(ckdir), world_(world), keep_(cfg.checkpoint.keep),
        file_locking_(cfg.checkpoint.file_locking) {
    // Asynchronous saves need a thread that may do MPI; without MPI_THREAD_MULTIPLE they are synchronous.
    if (cfg.checkpoint.async) {
      if (mpi_thread_multiple()) writer_ = std::make_unique<AsyncCheckpointWriter>(world);
      else log::warn("[checkpoint] async = true needs MPI_THREAD_MULTIPLE, which this MPI does not provide: saving synchronously");
    }
  }
  std::string save(std::int64_t step) override {
    // Synchronous: written from the live state, with bounded extra memory (no copy).
    CheckpointSnapshot view = trainer_.live_view();
    view.write.file_locking = file_locking_;
    // On this thread, so progress may show; erased (or, in a batch log, only after a whole interval)
    // because the checkpoint policy logs the save's own line.
    view.write.progress_label = "checkpoint save";
    view.write.progress_end = ProgressEnd::erase;
    return ckdir_.commit(
        step, world_, [&](const std::string& tmp) { write_checkpoint_file(tmp, world_, view.write); }, keep_);
  }
  bool can_start() const override { return writer_ != nullptr; }
  void start(std::int64_t step) override {
    CheckpointSnapshot snap = trainer_.snapshot();
    snap.write.file_locking = file_locking_;
    writer_->start(ckdir_, step, std::move(snap), keep_);
  }
  bool busy() const override { return writer_ && writer_->busy(); }
  BackgroundSaveResult wait() override {
    AsyncCheckpointWriter::Result r;
    try {
      r = writer_->wait();
    } catch (const CheckpointError&) {
      trainer_.recycle(writer_->release());
      throw;
    }
    trainer_.recycle(writer_->release());
    return BackgroundSaveResult{r.path, r.step, r.seconds, r.bytes, r.abandoned};
  }
  void abandon() override {
    if (writer_) writer_->abandon();
  }
  std::string path_for(std::int64_t step) const override { return ckdir_.path_for(step); }

 private:
  Trainer<T>& trainer_;
  const CheckpointDir& ckdir_;
  Communicator& world_;
  std::int64_t keep_;
  bool file_locking_;
  std::unique_ptr<AsyncCheckpointWriter> writer_;
};

template <class T>
int train_loop(const Config& cfg, const ProcessGrid& grid, const TokenDataset& data, const TrainRunOptions& opt,
               const CheckpointDir& ckdir, const RunDirClaim& claim, Timer& wall) {
  Communicator& world = grid.world_comm();
  Trainer<T> trainer(cfg, grid, data);

  const std::string resume_from = choose_resume_checkpoint(world, ckdir, opt.resume, opt.resume_path,
                                                           cfg.checkpoint.verify_on_resume, model_schema());
  if (!resume_from.empty()) {
    Timer t;
    trainer.load_checkpoint(resume_from);
    // The same path may hold another file's tokens (same vocabulary, other text): identical on
    // every rank (the same checkpoint, the same file), so the ConfigError is collective.
    // Another tokenizer is never a data change to allow: the model's ids would mean other tokens
    // (and the next checkpoint would record the file's tokenizer for this model).
    if (const std::string why = tokenizer_mismatch(trainer.loaded_run_state(), data.info()); !why.empty())
      throw ConfigError("cannot resume from " + resume_from + " on token file '" + cfg.data.path + "': " + why);
    check_resume_data(trainer.loaded_run_state(), data.info(), cfg.data.path, cfg.train,
                      trainer.consumed_samples());
    log::info("resumed from %s at step %lld (%lld samples consumed; loaded in %.2f s)", resume_from.c_str(),
              static_cast<long long>(trainer.step()), static_cast<long long>(trainer.consumed_samples()), t.seconds());
  }
  const std::int64_t resumed_step = resume_from.empty() ? -1 : trainer.step();
  if (!cfg.train.init_from.empty()) {
    if (!resume_from.empty()) {
      log::info("[train] init_from = %s is not used: the run resumes from its own checkpoint",
                cfg.train.init_from.c_str());
    } else {
      Timer t;
      std::string from = cfg.train.init_from;
      if (!std::filesystem::exists(from))
        throw ConfigError("[train] init_from = " + from + " does not exist (a checkpoint file, or a run or checkpoint "
                          "directory)");
      try {  // a run directory or a checkpoint directory means its latest checkpoint
        from = resolve_checkpoint_path(from);
      } catch (const CheckpointError&) {
        // A Hugging Face model directory is the likely mistake: say how to make it a checkpoint.
        std::error_code ec;
        const bool hf = std::filesystem::exists(std::filesystem::path(from) / "config.json", ec);
        throw ConfigError("[train] init_from = " + cfg.train.init_from + ": the directory holds no checkpoint" +
                          (hf ? std::string(" (it has a config.json: a Hugging Face model becomes one with `trident "
                                            "ckpt import --format hf --output OUT " + from + "`, then init_from = OUT)")
                              : std::string()));
      }
      trainer.init_weights_from(from, data.info());
      log::info("initialised the weights from %s (fresh optimizer, step 0; %.2f s)", from.c_str(), t.seconds());
    }
  }

  // This invocation's leg id (rank 0's, the same on every rank): metrics rows and the
  // lineage of the checkpoints it writes name it (train/metrics.hpp).
  std::string leg = world.rank() == 0 ? new_leg_id() : std::string();
  broadcast_string(world, leg);
  check_run_dir(world, cfg.train.out_dir, ckdir, opt.resume);
  RunDirOptions run_dir_opt;
  run_dir_opt.out_dir = cfg.train.out_dir;
  run_dir_opt.deck_ini = cfg.to_ini();
  run_dir_opt.resumed_step = resumed_step;
  run_dir_opt.lineage = trainer.lineage();
  run_dir_opt.leg = leg;
  run_dir_opt.sample_log = cfg.data.sample_log;
  RunDir run_dir(world, run_dir_opt, claim);

  trainer.begin_leg(leg);
  const ModelConfig& m = cfg.model;
  const std::string host_gemm_text = resolve_host_gemm(cfg.train, world);  // before the peak probe and any step
  const PeakFlops peak_info = resolve_peak_flops(cfg.train, world);
  install_host_gemm_chooser(cfg.train);  // after the peak probe, which times the process-wide library
  const double peak = peak_info.flops;
  const double tokens_per_step = static_cast<double>(cfg.train.global_batch_size) * m.block_size;
  const double fpt = flops_per_token(m);
  log::info("Trident %s (git %s) | %s | %s", TRIDENT_VERSION_STRING, TRIDENT_GIT_COMMIT, grid.describe().c_str(),
            name_of(cfg.train.dtype));
  if (!cfg.parallel.offload_path.empty() && cfg.parallel.offload_optimizer != OffloadKind::nvme)
    log::warn("[parallel] offload_path = %s is not used: offload_optimizer = %s (only nvme writes there)",
              cfg.parallel.offload_path.c_str(), name_of(cfg.parallel.offload_optimizer));
  const std::string family =
      m.arch == ModelArch::gpt2
          ? std::string("gpt2")
          : log::format("%s (%d kv heads, SwiGLU %d, rope_theta %g, norm_eps %g, %s head)", name_of(m.arch),
                        m.kv_heads(), m.ffn_width(), m.rope_theta, m.norm_eps, m.tie_embeddings ? "tied" : "untied");
  log::info("model: %s, %d layers, %d heads, %d embd, block %d, vocab %d, bias %s, dropout %g | %s parameters | "
            "attention %s, compute_dtype %s",
            family.c_str(), m.n_layer, m.n_head, m.n_embd, m.block_size, m.vocab_size, m.bias ? "on" : "off", m.dropout,
            human(static_cast<double>(ParamLayout::make(m).numel())).c_str(), name_of(m.attention),
            name_of(cfg.train.compute_dtype));
  log::info("data: %s (%s tokenizer, %lld train / %lld val tokens)", data.path().c_str(), data.info().tokenizer.c_str(),
            static_cast<long long>(data.size("train")), static_cast<long long>(data.size("val")));
  log::info("batch: %lld sequences x %d tokens = %s tokens/step; micro-batch %lld, %lld per rank per step",
            static_cast<long long>(cfg.train.global_batch_size), m.block_size, human(tokens_per_step).c_str(),
            static_cast<long long>(cfg.train.micro_batch_size),
            static_cast<long long>(cfg.train.global_batch_size / (cfg.train.micro_batch_size * grid.dp_size())));
  if (!TRIDENT_HAVE_CUDA && cfg.train.dtype == Precision::f32 && cfg.train.compute_dtype == Precision::f32)
    log::info("fp32 GEMMs: %s", host_gemm_text.c_str());
  log::info("peak: %.1f GFLOP/s per rank (%s) | run to step %lld, out_dir %s", peak / 1e9,
            peak_info.source.c_str(),
            static_cast<long long>(cfg.train.max_steps), cfg.train.out_dir.c_str());
  if (trainer.loss_scaler().enabled())
    log::info("fp16 loss scaling: scale %g, x%g after %lld steps without overflow, x%g on an overflow (update "
              "skipped), minimum %g",
              trainer.loss_scaler().scale(), cfg.train.loss_scale_growth,
              static_cast<long long>(cfg.train.loss_scale_growth_interval), cfg.train.loss_scale_backoff,
              cfg.train.loss_scale_min);
  log::info("numerics: [train] nonfinite = %s%s | spike detector: %s",
            name_of(cfg.train.nonfinite),
            cfg.train.nonfinite == NonfiniteAction::skip
                ? log::format(" (stop at %lld skipped steps in a row)", static_cast<long long>(cfg.train.max_consecutive_skips)).c_str()
                : "",
            cfg.train.spike_window == 0
                ? "off"
                : log::format("window %lld, z > %g %s", static_cast<long long>(cfg.train.spike_window),
                              cfg.train.spike_zscore, cfg.train.spike_rollback ? "rolls back" : "warns").c_str());
  StopPolicy stops(StopLimits{cfg.train.max_steps, cfg.train.stop_at_step, cfg.train.time_limit_min},
                   [&wall] { return wall.seconds(); });
  switch (stops.at_start(trainer.step())) {
    case StartDecision::train: break;
    case StartDecision::at_stop_step: return 0;
    case StartDecision::complete:
      // A stop during the final evaluation saved the last step without its validation loss (the
      // evaluation was abandoned): the requeued or resumed run does that evaluation now, so the
      // run still ends with its final val loss. Nothing is saved: the checkpoint stays as it is.
      if (trainer.val_loss_step() == trainer.step()) return 0;
      {
        install_stop_signal_handlers();
        const EvalResult e = trainer.evaluate(
            [&world] { return StopPolicy::agree_signal(world, stop_signal_received()) != 0; });
        if (e.stopped) {
          log::info("the final evaluation was abandoned again after %lld of %lld batches: a stop was requested; "
                    "resume to run it",
                    static_cast<long long>(e.batches), static_cast<long long>(e.batches_planned));
          return StopPolicy::exit_status(StopReason::signal, /*final_saved=*/true);
        }
        if (e.tokens > 0) {
          log::info("step %6lld | val loss %.4f | %s tokens | %.2f s (the final evaluation, abandoned at a stop, "
                    "run now: in metrics.csv, not in the checkpoint)",
                    static_cast<long long>(trainer.step()), e.loss, human(static_cast<double>(e.tokens)).c_str(),
                    e.seconds);
          if (run_dir.metrics()) run_dir.metrics()->record_val_loss(trainer.step(), e.loss);
        }
      }
      return 0;
  }

  {
    const MemoryBytes pred = predict_memory(cfg);
    std::string cats;
    for (int c = 0; c < static_cast<int>(MemCategory::data); ++c) {
      const auto cat = static_cast<MemCategory>(c);
      // Nothing of a save is allocated yet: say what the first one will take.
      const bool at_save = cat == MemCategory::checkpoint;
      cats += log::format("%s%s %.1f%s", c ? ", " : "", mem_category_name(cat),
                          static_cast<double>(at_save ? pred[static_cast<size_t>(c)] : MemoryLedger::current(cat)) /
                              (1024.0 * 1024.0),
                          at_save ? (cfg.checkpoint.async ? " (snapshot, from the first save)" : " (during saves)") : "");
    }
    log::info("memory per rank (MiB): %s | ZeRO stage %d%s%s, predicted peak %.1f MiB (what `trident train "
              "--dry-run %d` prints; the step log's mem is this ledger, its RSS adds the runtime and libraries)",
              cats.c_str(), cfg.parallel.zero_stage, cfg.train.param_dtype == Precision::bf16 ? ", bf16 params" : cfg.train.param_dtype == Precision::fp16 ? ", fp16 params" : "",
              cfg.train.activation_checkpointing == Recompute::block ? ", recompute" : "",
              static_cast<double>(std::accumulate(pred.begin(), pred.end(), std::int64_t{0})) / (1024.0 * 1024.0),
              grid.world_size());
  }
  TrainerCheckpointSaver<T> saver(trainer, ckdir, world, cfg);
  CheckpointPolicyOptions checkpoint_opt;
  checkpoint_opt.interval = cfg.checkpoint.interval;
  checkpoint_opt.save_final = cfg.checkpoint.save_final;
  checkpoint_opt.continue_on_error = cfg.checkpoint.on_error == OnSaveError::keep_training;
  CheckpointPolicy checkpoints(saver, checkpoint_opt, resumed_step, world.rank());
  install_stop_signal_handlers();
  // Stop requests agreed at fixed points that every rank reaches alike: before the first step
  // (a signal during start-up), between evaluation batches, after each step (StopPolicy).
  auto stop_requested = [&world] { return StopPolicy::agree_signal(world, stop_signal_received()) != 0; };
  if (const int sig = StopPolicy::agree_signal(world, stop_signal_received()); sig != 0) {
    const StopDecision d{StopReason::signal, trainer.step(), sig};
    return stops.finish(d, checkpoints.final_save(d.reason, d.step), world.rank());
  }

  SpikePolicy spikes(cfg.train.spike_zscore, cfg.train.spike_rollback, cfg.train.spike_max_rollbacks);
  auto write_sample_log = [&](std::int64_t step) {
    if (!cfg.data.sample_log || grid.tp_rank() != 0 || grid.pp_rank() != 0) return;
    // What every dp rank actually loaded (the first stage's ranks of tp partition 0), to world rank 0.
    const std::vector<std::int64_t>& mine = trainer.loaded_samples();
    std::vector<std::int64_t> all(mine.size() * static_cast<size_t>(grid.dp_size()));
    grid.dp_comm().all_gather(mine.data(), all.data(), mine.size(), DataType::i64);
    if (run_dir.sample_log()) run_dir.sample_log()->write(step, std::move(all));
  };

  Timer run_timer;
  const std::int64_t first_step = trainer.step();
  double last_val = std::nan("");
  // Step-time breakdown (train/step_timers.hpp): one interval per metrics row, from the previous
  // row to this one, so the save after step s (and the stop agreement) is in the row of step s + 1
  // and every row is still written before its step's save. The final save is reported apart.
  StepTimers& timers = trainer.timers();
  BreakdownSummary breakdown;
  // After the last row: the save after the last step (interval or final) and the stop decision.
  auto final_save = [&](StopReason why, std::int64_t step) {
    bool ok = false;
    {
      const auto part = timers.claim(StepPart::ckpt);
      ok = checkpoints.final_save(why, step);
    }
    const StepBreakdown tail = timers.lap();
    const std::string line =
        breakdown.line(log::format(" on world rank 0, [train] timers = %s", name_of(cfg.train.timers)));
    if (!line.empty())
      log::info("%s | after the last row: saves %.1f ms", line.c_str(),
                tail.part[static_cast<size_t>(StepPart::ckpt)] * 1e3);
    return ok;
  };
  timers.start();
  while (trainer.step() < cfg.train.max_steps) {
    const std::int64_t bytes_before = trainer.comm_bytes();
    const OffloadCounters off_before = trainer.offload_counters();
    StepResult r = trainer.train_step();
    const OffloadCounters off_after = trainer.offload_counters();
    const double comm_mib = static_cast<double>(trainer.comm_bytes() - bytes_before) / (1024.0 * 1024.0);
    const double tps = tokens_per_step / r.seconds;
    const double mfu = fpt * tps / grid.world_size() / peak;
    const double mem_mib = static_cast<double>(peak_rss_bytes()) / (1024.0 * 1024.0);
    double tracked_mib = 0.0;  // the memory ledger now: the buffers --dry-run predicts
    for (int c = 0; c < static_cast<int>(MemCategory::data); ++c)
      tracked_mib += static_cast<double>(MemoryLedger::current(static_cast<MemCategory>(c))) / (1024.0 * 1024.0);
    stops.record_step_seconds(r.seconds);
    MetricsRow row;
    row.step = r.step;
    row.train_loss = r.loss;
    row.lr = r.lr;
    row.grad_norm = r.grad_norm;
    row.tokens_per_sec = tps;
    row.ms_per_step = r.seconds * 1e3;
    row.mfu = mfu;
    row.peak_mem_mib = mem_mib;
    for (int c = 0; c <= static_cast<int>(MemCategory::checkpoint); ++c)
      row.mem_mib[c] = static_cast<double>(MemoryLedger::peak(static_cast<MemCategory>(c))) / (1024.0 * 1024.0);
    row.comm_mib = comm_mib;
    row.bubble = r.bubble;
    row.skipped = r.skipped;
    row.skipped_steps = trainer.skipped_steps();
    row.loss_z = r.loss_z;
    row.loss_scale = r.loss_scale;
    row.overflow_steps = trainer.loss_scaler().overflows();
    row.offload_read_mib = static_cast<double>(off_after.bytes_read - off_before.bytes_read) / (1024.0 * 1024.0);
    row.offload_write_mib = static_cast<double>(off_after.bytes_written - off_before.bytes_written) / (1024.0 * 1024.0);
    row.offload_wait_ms = (off_after.wait_seconds - off_before.wait_seconds) * 1e3;
    if (r.step % cfg.train.log_interval == 0 || r.step == first_step + 1 || r.step == cfg.train.max_steps)
      log::info("step %6lld/%lld | loss %.4f | lr %.3e | norm %.4f | %.1f ms | %s tok/s | MFU %.1f%% | mem %.1f MiB "
                "(RSS %.1f) | comm %.2f MiB%s",
                static_cast<long long>(r.step), static_cast<long long>(cfg.train.max_steps), r.loss, r.lr, r.grad_norm,
                r.seconds * 1e3, human(tps).c_str(), 100.0 * mfu, tracked_mib, mem_mib, comm_mib,
                ((grid.pp_size() > 1
                      ? log::format(" | bubble %.0f%% (theory %.0f%%)", 100.0 * r.bubble, 100.0 * r.bubble_theory)
                      : std::string()) +
                    (trainer.loss_scaler().enabled() ? log::format(" | loss scale %g", r.loss_scale) : std::string()))
                    .c_str());
    // Loss spikes (train/numerics.hpp): every rank has the same z-score, so the same verdict.
    SpikeVerdict spike = SpikeVerdict::none;
    if (r.loss_z > spikes.threshold()) {
      if (cfg.train.spike_rollback) checkpoints.finish_async();  // the newest committed checkpoint
      spike = spikes.decide(r.loss_z, checkpoints.last_saved());
      log::warn("step %lld: loss spike: loss %.4f is %.1f standard deviations above the mean of the last %lld "
                "losses ([train] spike_zscore = %g)%s",
                static_cast<long long>(r.step), r.loss, r.loss_z, static_cast<long long>(cfg.train.spike_window),
                cfg.train.spike_zscore,
                spike == SpikeVerdict::rollback ? log::format(": rolling back to the checkpoint of step %lld and "
                                                              "skipping the batches since",
                                                              static_cast<long long>(checkpoints.last_saved())).c_str()
                : spike == SpikeVerdict::warn && cfg.train.spike_rollback ? ": no checkpoint to roll back to yet"
                                                                           : "");
    }
    if (spike == SpikeVerdict::rollback || spike == SpikeVerdict::stop) {
      row.breakdown = timers.lap();
      breakdown.add(r.step, row.breakdown);
      // The spiked step is recorded (its rows move to the .superseded.csv files with the rollback).
      if (run_dir.metrics()) run_dir.metrics()->write(row);
      write_sample_log(r.step);
      const std::int64_t c = checkpoints.last_saved();
      if (spike == SpikeVerdict::stop)
        throw Error("stopping at step " + std::to_string(r.step) + ": a loss spike again after " +
                        std::to_string(spikes.rollbacks_to(c)) + " rollbacks to the checkpoint of step " +
                        std::to_string(c) + " ([train] spike_max_rollbacks = " +
                        std::to_string(cfg.train.spike_max_rollbacks) +
                        "). Nothing is saved; lower [train] lr or raise spike_zscore, and resume",
                    /*collective=*/true);
      const std::string path = c == resumed_step && !resume_from.empty() ? resume_from : ckdir.path_for(c);
      const std::int64_t skip_from = trainer.step();
      {
        const auto part = timers.claim(StepPart::ckpt);
        trainer.rollback(path);
      }
      std::string new_leg = world.rank() == 0 ? new_leg_id() : std::string();
      broadcast_string(world, new_leg);
      run_dir.rollback(world, c, trainer.lineage(), new_leg);
      trainer.begin_leg(new_leg);
      log::info("rolled back to %s (step %lld); the data of steps %lld-%lld is skipped, training goes on from "
                "sample %lld", path.c_str(), static_cast<long long>(trainer.step()), static_cast<long long>(c + 1),
                static_cast<long long>(skip_from), static_cast<long long>(trainer.consumed_samples()));
      continue;
    }
    const bool last = r.step == cfg.train.max_steps;
    if ((cfg.train.eval_interval > 0 && r.step % cfg.train.eval_interval == 0) || last) {
      EvalResult e;
      {
        const auto part = timers.claim(StepPart::eval);
        e = trainer.evaluate(stop_requested);
      }
      if (e.stopped) {
        log::info("step %6lld | evaluation abandoned after %lld of %lld batches: a stop was requested",
                  static_cast<long long>(r.step), static_cast<long long>(e.batches),
                  static_cast<long long>(e.batches_planned));
      } else if (e.tokens == 0) {
        log::warn("the validation split is shorter than one sequence: no validation loss");
      } else if (!std::isfinite(e.loss)) {
        throw Error("the validation loss is not finite at step " + std::to_string(r.step) +
                        ": the model has diverged; resume from an earlier checkpoint with a lower [train] lr",
                    /*collective=*/true);
      } else {
        row.has_val = true;
        row.val_loss = last_val = e.loss;
        trainer.record_val_loss(e.loss);
        log::info("step %6lld | val loss %.4f | %s tokens | %.2f s", static_cast<long long>(r.step), e.loss,
                  human(static_cast<double>(e.tokens)).c_str(), e.seconds);
      }
    }
    row.breakdown = timers.lap();
    breakdown.add(r.step, row.breakdown);
    if (run_dir.metrics()) run_dir.metrics()->write(row);
    write_sample_log(r.step);

    {
      const auto part = timers.claim(StepPart::ckpt);
      checkpoints.after_step(r.step);
    }
    const StopDecision stop = stops.after_step(world, r.step, stop_signal_received(), checkpoints.last_save_seconds());
    if (stop.reason == StopReason::end_of_run) break;
    if (stop.stop()) {
      log_host_gemm_choices();
      return stops.finish(stop, final_save(stop.reason, r.step), world.rank());
    }
  }
  if (!final_save(StopReason::end_of_run, trainer.step())) {  // reported by final_save
    log_host_gemm_choices();
    return StopPolicy::exit_status(StopReason::end_of_run, /*final_saved=*/false);
  }
  const double secs = run_timer.seconds();
  log_host_gemm_choices();
  // NaN: no evaluation finished (a validation split shorter than one sequence is warned about where
  // it is evaluated; a non-finite validation loss stops the run before this line).
  log::info("done: steps %lld-%lld in %.1f s (%s tok/s), final val loss %s",
            static_cast<long long>(first_step + 1), static_cast<long long>(trainer.step()), secs,
            human(tokens_per_step * static_cast<double>(trainer.step() - first_step) / secs).c_str(),
            std::isnan(last_val) ? "none" : log::format("%.4f", last_val).c_str());
  return 0;
}

}  // namespace

int run_train(Config cfg, Communicator& world, const TrainRunOptions& opt) {
  Timer wall;
  // Own the run directory and probe its file system before any heavy work (data, model, resume):
  // a busy out_dir or one where saves would fail is refused in seconds (train/run_dir.hpp).
  const CheckpointDir ckdir((fs::path(cfg.train.out_dir) / "checkpoints").string(), cfg.checkpoint.keep_best);
  const RunDirClaim claim(world, cfg.train.out_dir, ckdir, cfg.checkpoint.run_lock, cfg.checkpoint.file_locking);
  std::unique_ptr<TokenDataset> data;
  run_agreed(world, "cannot load training data", [&] {
    data = std::make_unique<TokenDataset>(cfg.data.path, cfg.data.cache_max_mb);
    resolve_vocab(cfg, data->info());
    if (data->size("train") < cfg.model.block_size + 1)
      throw ConfigError("[data] path '" + cfg.data.path + "': the training split has " +
                        std::to_string(data->size("train")) + " tokens, fewer than [model] block_size + 1 = " +
                        std::to_string(cfg.model.block_size + 1));
  });
  ProcessGrid grid(world, GridShape{cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp}, cfg.parallel.comm_backend);
  log::info("collectives: %s ([parallel] comm_backend = %s)", grid.describe_comm_backends().c_str(),
            name_of(cfg.parallel.comm_backend));
  // BLAS's work buffers before the model state: OpenBLAS retries a failed buffer allocation
  // forever, so a rank near its memory limit (ulimit -v) must fail in the model state's
  // allocation (a clear, agreed error), not hang in the first GEMM.
  warm_up_blas();
  if (cfg.train.dtype == Precision::f64) return train_loop<double>(cfg, grid, *data, opt, ckdir, claim, wall);
  return train_loop<float>(cfg, grid, *data, opt, ckdir, claim, wall);
}

}  // namespace trident
