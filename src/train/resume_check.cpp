#include "train/resume_check.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace trident {

namespace {
bool is_any(const std::string& name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

LrSchedule schedule_of(const TrainConfig& t) { return LrSchedule{t.lr, t.min_lr, t.warmup_steps, t.max_steps}; }

std::string lr_text(double lr) { return log::format("%.4g", lr); }
}  // namespace

std::optional<ChangeClass> change_class(const std::string& name) {
  if (name.rfind("parallel.", 0) == 0 || name.rfind("checkpoint.", 0) == 0) return ChangeClass::same_math;
  if (is_any(name, {"train.micro_batch_size", "train.stop_at_step", "train.time_limit_min", "train.eval_interval",
                    "train.eval_iters", "train.log_interval", "train.out_dir", "train.activation_checkpointing",
                    "train.peak_tflops", "train.allow_changed", "data.cache_max_mb", "data.sample_log",
                    // only starts a run: a resume continues its own checkpoint
                    "train.init_from",
                    "train.nonfinite", "train.max_consecutive_skips", "train.spike_window", "train.spike_zscore",
                    "train.spike_rollback", "train.spike_max_rollbacks",
                    // fp16 loss scaling: the restored scale goes on (loss_scale_init only starts a
                    // run, or a resume from a checkpoint without a scale); it decides which steps
                    // overflow, not the math of an applied one.
                    "train.loss_scale_init", "train.loss_scale_growth_interval", "train.loss_scale_growth",
                    "train.loss_scale_backoff", "train.loss_scale_min", "train.timers"}))
    return ChangeClass::same_math;
  // The model's shape is compared before this, resolved (ModelState: n_kv_head, the SwiGLU width):
  // a key that spells the same shape differently changes nothing.
  if (is_any(name, {"model.n_kv_head", "model.ffn_hidden", "model.ffn_multiple_of"})) return ChangeClass::same_math;
  // The attention kernel: the same math in another summation order (as a layout change).
  if (name == "model.attention" || name == "train.host_gemm") return ChangeClass::same_math;
  if (is_any(name, {"model.dropout", "model.norm_eps", "model.rope_theta", "train.global_batch_size", "train.weight_decay", "train.beta1", "train.beta2",
                    "train.eps", "train.grad_clip", "train.dtype", "train.param_dtype", "train.reduce_dtype",
                    "train.compute_dtype"}))
    return ChangeClass::takes_effect;
  if (is_any(name, {"train.lr", "train.min_lr", "train.warmup_steps", "train.max_steps", "train.seed", "data.path"}))
    return ChangeClass::refused;
  if (is_any(name, {"model.n_layer", "model.n_head", "model.n_embd", "model.block_size", "model.vocab_size",
                    "model.bias", "model.arch", "model.tie_embeddings"}))
    return ChangeClass::impossible;
  return std::nullopt;
}

std::string tokenizer_mismatch(const RunState& checkpoint, const TokenFileInfo& data) {
  if (checkpoint.tokenizer.empty()) return "";
  const std::string ids = ": token ids would mean other characters or pieces";
  if (checkpoint.tokenizer != data.tokenizer)
    return "the checkpoint's tokenizer is '" + checkpoint.tokenizer + "', the token file's '" + data.tokenizer + "'" +
           ids + " (prepare the text with the checkpoint's tokenizer: trident prep --tokenizer " + checkpoint.tokenizer +
           ")";
  // The same kind, built from another text: prep cannot take a vocabulary or model from a
  // checkpoint, so the remedy is the token file the checkpoint was trained on.
  std::string what;
  if (!checkpoint.vocab.empty() && checkpoint.vocab != data.vocab)
    what = "vocabulary";
  else if (!checkpoint.tokenizer_model.empty() && checkpoint.tokenizer_model != data.model)
    what = "tokenizer model";
  if (what.empty()) return "";
  return "the checkpoint's " + checkpoint.tokenizer + " " + what +
         " differs from the token file's (the same kind, built from another text)" + ids + " (a " +
         checkpoint.tokenizer + " " + what + " comes from the text prep read: use the token file the checkpoint was "
         "trained on)";
}

bool same_training_data(const RunState& checkpoint, const TokenFileInfo& now) {
  if (checkpoint.data_hash.empty() || checkpoint.data_hash != now.content_hash) return false;
  return checkpoint.data_train_tokens < 0 || checkpoint.data_train_tokens == now.n_train;
}

void check_resume_data(const RunState& checkpoint, const TokenFileInfo& now, const std::string& path,
                       const TrainConfig& train, std::int64_t consumed) {
  if (checkpoint.data_hash.empty() || now.content_hash.empty()) return;
  std::string what;
  if (checkpoint.data_hash != now.content_hash) {
    what = "token file '" + path + "' holds other tokens than the file the checkpoint was trained on (content hash " +
           now.content_hash + ", the checkpoint's " + checkpoint.data_hash + ")";
  } else if (checkpoint.data_train_tokens >= 0 && checkpoint.data_train_tokens != now.n_train) {
    what = "token file '" + path + "' holds the same tokens as the file the checkpoint was trained on, split " +
           "otherwise: its train split has " + std::to_string(now.n_train) + " tokens, the checkpoint's " +
           std::to_string(checkpoint.data_train_tokens) + " (prepped again with another --val-fraction?)";
  } else {
    return;
  }
  what += ": consumed_samples (" + std::to_string(consumed) + ") would index other data";
  const std::vector<std::string> allowed = allowed_changes(train);
  if (std::find(allowed.begin(), allowed.end(), "data.path") != allowed.end()) {
    log::warn("%s; continuing as [train] allow_changed names data.path", what.c_str());
    return;
  }
  throw ConfigError(what + ". Resume with the original token file, or allow it with --train.allow_changed=data.path");
}

ResumeChanges compare_resume_decks(const Config& checkpoint, const Config& run, std::int64_t step,
                                   std::int64_t consumed, bool same_data) {
  const std::vector<std::string> allowed = allowed_changes(run.train);
  ResumeChanges r;
  r.step = step;
  const std::string next = "step " + std::to_string(step + 1);
  const double lr_before = schedule_of(checkpoint.train).at(step), lr_after = schedule_of(run.train).at(step);
  // Equal at the next step (e.g. still in warmup): the schedules part later, which is the change.
  const std::string lr_jump =
      lr_before == lr_after
          ? "the LR of " + next + " is " + lr_text(lr_before) +
                " under both schedules, but the later steps' LRs differ (warmup, decay and its end follow the keys)"
          : "the LR of " + next + " goes from " + lr_text(lr_before) + " to " + lr_text(lr_after) +
                (lr_before > 0 ? log::format(" (%+.0f%%)", 100.0 * (lr_after / lr_before - 1.0)) : "");
  for (const DeckDifference& d : deck_differences(checkpoint, run)) {
    const std::string name = d.name();
    if (name == "train.allow_changed") continue;  // about this resume, not about the run
    ResumeChange c;
    c.diff = d;
    c.cls = change_class(name).value_or(ChangeClass::takes_effect);
    c.allowed = std::find(allowed.begin(), allowed.end(), name) != allowed.end();
    std::error_code ec;
    if (name == "data.path" &&
        (std::filesystem::path(d.before).lexically_normal() == std::filesystem::path(d.after).lexically_normal() ||
         // an absolute and a relative name, or a link: the same file when both name it now
         (std::filesystem::exists(d.before, ec) && std::filesystem::equivalent(d.before, d.after, ec)))) {
      c.cls = ChangeClass::same_math;
      c.effect = "the same file, named another way";
    } else if (name == "data.path" && same_data) {
      c.cls = ChangeClass::same_math;
      c.effect = "the same tokens (the content hash the checkpoint recorded): the file named from elsewhere, or a copy";
    } else if (c.cls == ChangeClass::impossible) {
      c.effect = "another model: the checkpoint's tensors have other shapes";
    } else if (is_any(name, {"train.lr", "train.min_lr", "train.warmup_steps", "train.max_steps"})) {
      c.effect = "the LR schedule changes under the step counter: " + lr_jump;
    } else if (name == "train.seed") {
      c.effect = "the data order is a permutation keyed by the seed: the rest of the epoch after sample " +
                 std::to_string(consumed) + " repeats some windows and skips others; dropout masks change";
    } else if (name == "data.path") {
      c.effect = "consumed_samples (" + std::to_string(consumed) + ") would index another token file";
    } else if (name == "train.global_batch_size") {
      c.effect = "from " + next + " each step takes " + d.after + " sequences; the data continues at sample " +
                 std::to_string(consumed) + "; the LR schedule counts steps, so the run's tokens change";
    } else if (name == "train.beta1" || name == "train.beta2") {
      c.effect = "AdamW's moments average with the new beta from " + next +
                 " (its bias correction assumes the new beta for all steps)";
    } else if (name == "train.dtype") {
      c.effect = "the checkpoint's values are converted (the resume is not bitwise)";
    } else if (name == "train.param_dtype" || name == "train.reduce_dtype" || name == "train.compute_dtype") {
      c.effect = "the rounding of the working parameters, gradient sums or GEMM inputs changes from " + next;
    } else if (c.cls == ChangeClass::takes_effect) {
      c.effect = "the optimisation changes from " + next;
    } else if (d.section == "parallel" || name == "train.micro_batch_size") {
      c.effect = "the layout: the same math up to summation order (any layout resumes any other)";
    } else if (name == "train.activation_checkpointing") {
      c.effect = "recomputation: bitwise the same math";
    } else {
      c.effect = "run control and reporting: the training math is unchanged";
    }
    r.changes.push_back(std::move(c));
  }
  return r;
}

std::vector<ResumeChange> ResumeChanges::blocking() const {
  std::vector<ResumeChange> b;
  for (const ResumeChange& c : changes)
    if (c.cls == ChangeClass::impossible || (c.cls == ChangeClass::refused && !c.allowed)) b.push_back(c);
  return b;
}

namespace {
std::string line_of(const ResumeChange& c) {
  const char* verdict = c.cls == ChangeClass::same_math      ? "takes effect"
                        : c.cls == ChangeClass::takes_effect ? "takes effect"
                        : c.cls == ChangeClass::impossible   ? "refused (cannot be allowed)"
                        : c.allowed                          ? "takes effect (allowed by [train] allow_changed)"
                                                             : "refused";
  return "[" + c.diff.section + "] " + c.diff.key + " " + (c.diff.before.empty() ? "''" : c.diff.before) + " -> " +
         (c.diff.after.empty() ? "''" : c.diff.after) + ": " + verdict + "; " + c.effect;
}
}  // namespace

std::vector<std::string> ResumeChanges::lines() const {
  std::vector<std::string> l;
  for (const ResumeChange& c : changes) l.push_back(line_of(c));
  return l;
}

void ResumeChanges::log() const {
  std::string same;
  for (const ResumeChange& c : changes)
    if (c.cls == ChangeClass::same_math)
      same += (same.empty() ? "" : ", ") +
              ("[" + c.diff.section + "] " + c.diff.key + " " + c.diff.before + " -> " + c.diff.after +
               // A resume goes on with the checkpoint's loss scale; the initial one only starts it.
               (c.diff.name() == "train.loss_scale_init" ? " (used only if the checkpoint records no loss scale)" : ""));
  if (!same.empty())
    log::info("deck keys that differ from the checkpoint's without changing the training math: %s", same.c_str());
  for (const ResumeChange& c : changes)
    if (c.cls != ChangeClass::same_math)
      log::warn("the deck differs from the checkpoint's (step %lld): %s", static_cast<long long>(step),
                line_of(c).c_str());
}

void ResumeChanges::require_allowed() const {
  const std::vector<ResumeChange> b = blocking();
  if (b.empty()) return;
  std::string what, allow;
  bool only_impossible = true;
  for (const ResumeChange& c : b) {
    what += "\n  " + line_of(c);
    if (c.cls == ChangeClass::refused) {
      only_impossible = false;
      allow += (allow.empty() ? "" : ",") + c.diff.name();
    }
  }
  throw ConfigError("the deck changes what the checkpoint's state means:" + what +
                    (only_impossible ? std::string("\nresume with the checkpoint's model, or start a new run")
                                     : "\nresume with the checkpoint's values (its /config holds them: h5dump -d /config "
                                       "FILE), or allow the change with --train.allow_changed=" + allow));
}

}  // namespace trident
