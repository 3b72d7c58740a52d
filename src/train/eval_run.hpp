// train/eval_run.hpp: `trident eval`: the mean loss of a checkpoint's model on a whole split of a
// token file, on a layout of the evaluation's own choosing.
//
// Layer: train (builds a Trainer from the checkpoint's own deck and runs Trainer::evaluate, the
// exact evaluation of a training run, so a checkpoint's recorded val loss is reproduced).
#pragma once

#include "parallel/communicator.hpp"

#include <cstdint>
#include <string>

namespace trident {

/// What `trident eval` evaluates, and on which layout.
struct EvalRunOptions {
  std::string checkpoint;         ///< a checkpoint file, or a run / checkpoints directory (its latest)
  std::string data;               ///< token file; empty: the [data] path of the checkpoint's deck
  std::string split = "val";      ///< "val" or "train"
  int tp = 1, pp = 1;             ///< layout of the evaluation; dp = world size / (tp x pp)
  std::int64_t micro_batch = 8;   ///< sequences per forward pass on one dp rank
  /// Deck values that change how the model is computed, not what it is: "" keeps the checkpoint's.
  /// compute_dtype: [train] compute_dtype (float | bf16), e.g. float to evaluate a bf16-trained
  /// checkpoint on a CPU without bf16 dot products; attention: [model] attention (gemm | fused);
  /// host_gemm: [train] host_gemm (auto | openblas | onednn | shape). Another value than the run's changes
  /// the loss in its last digits (another rounding or summation order).
  std::string compute_dtype, attention, host_gemm;
};

/// The result, identical on every rank.
struct EvalRunResult {
  std::string path;        ///< the checkpoint file evaluated
  std::string data;        ///< the token file
  std::int64_t step = 0;   ///< the checkpoint's step
  double loss = 0;         ///< mean cross-entropy per token (nats) over every window of the split
  std::int64_t tokens = 0; ///< predicted tokens: (split tokens - 1) / block_size windows x block_size
  double seconds = 0;      ///< wall time of the evaluation (not of loading)
  std::string layout;      ///< "dp=2 tp=1 pp=1 (2 ranks)"
};

/// Loads the checkpoint at opt.checkpoint (checked intact first, as `trident ckpt verify` would)
/// with its own deck on the layout dp x opt.tp x opt.pp over `world` (a checkpoint of any layout:
/// the reshard-on-load of a resume), and evaluates the whole split opt.split of the token file:
/// windows of block_size + 1 tokens starting every block_size tokens, split contiguously over dp
/// (Trainer::evaluate with eval_iters = 0). The loss is the training run's whole-split val loss
/// bitwise on the same layout, and equal to rounding elsewhere (another summation order).
/// Collective over world. Throws ConfigError (usage: a bad split, layout or micro-batch, a token
/// file of another tokenizer or vocabulary, a split shorter than one window) and CheckpointError
/// (a missing, damaged or incomplete checkpoint), both collectively.
EvalRunResult evaluate_checkpoint(const EvalRunOptions& opt, Communicator& world);

}  // namespace trident
