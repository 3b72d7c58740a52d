// checkpoint/metadata.hpp: the restart metadata of a checkpoint -- the one place its schema
// (attribute names, texts, arrays, rank-state columns and their meaning) is written and read.
//
// Layer: checkpoint. The container (sharded arrays, index, checksums, format/version/dtype/kinds
// attributes) is io/checkpoint_file.hpp's; what a Trident run records besides its arrays is this
// type's. Everything that reads or writes a checkpoint attribute goes through CheckpointMeta, so a
// new field is added here once (docs/checkpoint-format.md lists them for h5py users).
// Invariants: write_to() followed by read() gives back every field (bitwise for numbers); read()
// never throws for a missing attribute -- it lists it in `missing` and leaves the default, so
// `trident ckpt verify` can report every problem of a damaged file; require_complete() turns a
// non-empty `missing` into a CheckpointError for readers that need every field.
#pragma once

#include "core/config.hpp"
#include "io/checkpoint_file.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident {

/// The array kinds a Trident checkpoint holds per shard: fp32/fp64 master weights and AdamW's two
/// moments (Loshchilov & Hutter 2019), in this order.
const std::vector<std::string>& checkpoint_kinds();

/// Where a run stands: what a checkpoint records besides the model state and the deck.
struct RunState {
  std::int64_t step = 0;              ///< optimizer steps done
  std::int64_t consumed_samples = 0;  ///< position of the data stream (global samples)
  double last_lr = 0.0;               ///< learning rate of the last update
  std::string tokenizer;              ///< tokenizer kind name (data/tokenizer.hpp registry)
  std::vector<std::int32_t> vocab;    ///< tokenizer vocabulary (empty for kinds that store none)
  std::vector<std::uint8_t> tokenizer_model;  ///< serialized tokenizer model (bpe); empty for kinds that store none
  std::string lineage;                ///< "leg@first_step;..." that led here (train/metrics.hpp)
  /// The token file's content hash (TokenFileInfo::content_hash) the run trained on; "" when
  /// unknown (a token file or checkpoint of an older version). Attribute data_xxh64.
  std::string data_hash;
  /// The train split's size in tokens of that file; -1 when unknown (older versions). The hash
  /// covers train then val as one stream, so a re-prep with another --val-fraction keeps it: the
  /// split size tells those apart. Attribute data_train_tokens.
  std::int64_t data_train_tokens = -1;
  double val_loss = 0.0;              ///< the last validation loss of the run, at val_loss_step
  std::int64_t val_loss_step = -1;    ///< the step val_loss was measured after; -1: none yet
  // The numerics policy (train/numerics.hpp). Absent in files of older versions: zeros, empty.
  std::int64_t skipped_steps = 0;      ///< steps whose update was skipped ([train] nonfinite = skip), all legs
  std::int64_t consecutive_skips = 0;  ///< skipped steps in a row up to this step
  std::vector<double> loss_window;     ///< the spike detector's window: losses of the last applied steps, oldest first
  // Dynamic loss scaling (fp16; train/numerics.hpp LossScaler). Written only by runs that scale;
  // absent (loss_scale = 0) in other files and older versions.
  double loss_scale = 0.0;                 ///< the scale of the next step; 0: none recorded
  std::int64_t loss_scale_good_steps = 0;  ///< finite steps in a row since the last overflow or growth
  std::int64_t overflow_steps = 0;         ///< steps skipped for a gradient overflow, all legs
};

/// Every restart field of a checkpoint. Attribute names are in metadata.cpp only.
struct CheckpointMeta {
  RunState run;
  std::int64_t adam_step = 0;  ///< AdamW's step count (bias correction), <= run.step

  // Hyperparameters of the writing run, for checks and for `trident ckpt` listings.
  std::int64_t seed = 0, max_steps = 0, warmup_steps = 0, global_batch_size = 0;
  double lr = 0, min_lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;

  // Layout of the writing run.
  std::int64_t dp = 0, tp = 0, pp = 0, world_size = 0, zero_stage = 0, shard_group_size = 0;

  /// Model fingerprint: n_layer, n_head, n_embd, block_size, vocab_size (resolved), bias, dropout.
  ModelConfig model;

  std::string code_version;            ///< "0.1.0 (git abc1234)"
  std::string deck_name;
  std::string param_dtype;             ///< [train] param_dtype of the writing run
  std::int64_t created_unix_time = 0;
  std::string config_text;             ///< the resolved deck (Config::to_ini)

  /// Names of attributes/texts read() did not find (empty for a complete file).
  std::vector<std::string> missing;
  /// Why the tokenizer's vocabulary could not be read, "" when it was (or none is stored).
  std::string vocab_error;
  /// Why the tokenizer's model could not be read (missing, damaged), "" when it was (or none is stored).
  std::string model_error;

  /// The metadata a run of `cfg` on a dp x tp x pp grid writes at `run` (adam_step, the layout and
  /// shard_group_size filled from the arguments; created_unix_time now; code_version this build).
  /// Local.
  static CheckpointMeta of_run(const Config& cfg, const RunState& run, std::int64_t adam_step, int dp, int tp, int pp,
                               int shard_group_size);

  /// Adds every field to `w` (attributes, /config, /tokenizer/vocab, /tokenizer/model) and sets its rank-state
  /// columns and this rank's row. Local.
  void write_to(CheckpointWrite& w) const;

  /// Reads every field of `rd`, listing absent ones in `missing`. Local. Throws IoError only when
  /// a present attribute cannot be read.
  static CheckpointMeta read(const CheckpointReader& rd);

  /// Throws CheckpointError naming the first missing field (and how many more) when `missing` is
  /// not empty. Local.
  void require_complete(const std::string& path) const;

  /// The deck stored in the checkpoint, parsed (parse_deck_text) with `overrides` applied
  /// ("section.key=value", as on a command line), with vocab_size resolved to the fingerprint's.
  /// Local. Throws ConfigError when it does not parse or an override is unknown or invalid.
  Config deck(const std::vector<std::string>& overrides = {}) const;

  /// True when read() found every field of the model fingerprint. Local.
  bool has_model() const;
  /// True when read() found the attribute `field` (a name of the file's schema, e.g. "tp"). Local.
  bool has(const std::string& field) const;

  /// Problems of the restart attributes, in the user's words: missing fields, empty kinds or
  /// /rank_state, a file name that disagrees with the step, a /rank_state row that disagrees with
  /// the attributes, negative counters, adam_step > step, a layout that does not multiply to
  /// world_size or match the shard table. Local (deterministic: every rank finds the same).
  static std::vector<std::string> problems(const CheckpointReader& rd);
  /// Problems of the stored deck: /config unreadable, not a deck, or describing another model or
  /// layout than the attributes. Local (deterministic).
  static std::vector<std::string> deck_problems(const CheckpointReader& rd);
};

/// The validation loss recorded in checkpoint file `path` (RunState::val_loss), read serially by
/// this process alone, or nothing when the file has none or cannot be read. Local (rotation with
/// [checkpoint] keep_best runs on rank 0 only).
std::optional<double> peek_val_loss(const std::string& path);

/// "" when the file name of `rd` is not step_NNNNNNNN.h5 or names its `step` attribute, else the
/// problem ("the file name says step 40 but attribute step = 4"): resume and rotation order
/// checkpoints by name, so a misnamed file counts as damaged. Local.
std::string step_name_problem(const CheckpointReader& rd);

}  // namespace trident
