// train/resume_check.hpp: what `trident train --resume` does with a deck that differs from the
// deck stored in the checkpoint (CheckpointMeta::deck()).
//
// Layer: train. Local and pure: every rank compares the same two decks (the checkpoint's text and
// its own validated deck) and reaches the same verdict, so no rank refuses alone.
// Every differing key is listed with what it does, in one of four classes (docs/design.md,
// "Resuming with another deck", argues each key):
//  - same_math: the layout, accounting and run control ([parallel], micro_batch_size,
//    activation_checkpointing, stop_at_step, eval_*, log_interval, timers, out_dir, [checkpoint], the
//    numerics policy's keys, ...):
//    takes effect; the training math is unchanged up to summation order (info line);
//  - takes_effect: a hyperparameter of the optimisation that the restart state stays valid under
//    (AdamW's betas, eps, weight_decay, grad_clip, dropout, global_batch_size, the dtypes):
//    takes effect from the next step (warning);
//  - refused: a change after which a restart counter means something else -- the step's place in
//    the LR schedule (lr, min_lr, warmup_steps, max_steps, as Megatron-LM refuses a scheduler
//    mismatch without --override-opt_param-scheduler) or consumed_samples' place in the data
//    (data path, seed): refused unless [train] allow_changed names the key (then a warning);
//  - impossible: the model's shape; the checkpoint's tensors do not fit, nothing overrides it.
#pragma once

#include "checkpoint/metadata.hpp"
#include "core/config.hpp"
#include "io/token_file.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident {

enum class ChangeClass { same_math, takes_effect, refused, impossible };

/// The class of deck key `name` ("section.key"); nothing for a name that is not classified
/// (compare_resume_decks treats it as takes_effect; a unit test checks that every deck key has
/// a class). Local, pure.
std::optional<ChangeClass> change_class(const std::string& name);

/// One key that differs from the checkpoint's deck, and what the resume does with it.
struct ResumeChange {
  DeckDifference diff;
  ChangeClass cls = ChangeClass::same_math;
  bool allowed = false;     ///< a refused change that [train] allow_changed names
  std::string effect;       ///< what it does, in the user's words
};

/// Every difference between the checkpoint's deck and this run's, and the verdict.
struct ResumeChanges {
  std::int64_t step = 0;  ///< the checkpoint's step: the resumed run's next update is step + 1
  std::vector<ResumeChange> changes;

  /// The changes that stop the resume: refused and not allowed, or impossible.
  std::vector<ResumeChange> blocking() const;
  /// One line per change, "[train] eps 1e-08 -> 1e-06: takes effect ...", in deck order.
  std::vector<std::string> lines() const;
  /// Logs the changes on world rank 0: one info line for all same_math changes, one warning per
  /// other change; nothing when the decks agree. Local.
  void log() const;
  /// Throws ConfigError naming every blocking change, what it would do and how to allow it (with
  /// --train.allow_changed=KEY,... where that is possible). Local; every rank throws alike.
  void require_allowed() const;
};

/// Compares `checkpoint` (the checkpoint's deck) with `run` (this run's validated deck) for a
/// resume at checkpoint step `step`, consumed_samples `consumed`. [train] allow_changed of `run`
/// marks refused changes as allowed. The LR schedule keys report the next step's LR under both
/// schedules (train/lr_schedule.hpp). A data path that differs only lexically (data/x.h5 vs
/// ./data/x.h5) counts as the same file, and so does any path when `same_data` (the token file's
/// content hash equals the one the checkpoint recorded: the file named from another directory, a
/// copy). Local, pure. Throws ConfigError when allow_changed names a key that is not a deck key.
ResumeChanges compare_resume_decks(const Config& checkpoint, const Config& run, std::int64_t step,
                                   std::int64_t consumed, bool same_data = false);

/// Why token file `data` cannot feed a model trained with the tokenizer that checkpoint run state
/// `checkpoint` records: another kind, or the same kind with another vocabulary (char, byte) or
/// model (bpe), so token ids would mean other characters or pieces. One phrase naming both
/// sides, for a ConfigError of the caller (resume, [train] init_from, trident eval), with the
/// remedy (`trident prep --tokenizer KIND`); empty where they agree or the checkpoint records no
/// tokenizer (files of older versions). Local.
std::string tokenizer_mismatch(const RunState& checkpoint, const TokenFileInfo& data);

/// Whether the token file described by `now` holds the data the checkpoint's run trained on
/// (`checkpoint`: RunState::data_hash and data_train_tokens): the same content hash and, where
/// both are known, the same train split size. Unknown hashes (files of older versions) are never
/// the same data. Local.
bool same_training_data(const RunState& checkpoint, const TokenFileInfo& now);

/// The data check of a resume: the checkpoint's record of the token file the run trained on
/// (RunState::data_hash, data_train_tokens) against `now` (the file at `path` now). Equal, or
/// unknown (files of older versions): nothing. Another hash (the same path holds other tokens) or
/// another train split size (the same tokens prepped with another --val-fraction): consumed_samples
/// `consumed` would index other data; ConfigError naming the file, unless `train`'s allow_changed
/// names data.path (then a warning). Local.
void check_resume_data(const RunState& checkpoint, const TokenFileInfo& now, const std::string& path,
                       const TrainConfig& train, std::int64_t consumed);

}  // namespace trident
