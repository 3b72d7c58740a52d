// perf/step_model.hpp: predicted time of one training step, and memory per rank, for a deck, a
// layout and a machine file; first principles calibrated by the bundled benchmarks.
//
// Layer: perf. Local and pure: nothing is allocated, no communication. Memory per rank is the
// trainer's own dry-run prediction (predict_memory, train/trainer.hpp: the ZeroEngine's plan and the
// Gpt's activation plan), never a second formula.
//
// The model of one step (docs/scaling.md has the derivation and the measured errors):
//  - Compute of one micro-batch of b sequences of T tokens on a stage, width C, tp ranks:
//    GEMMs 24 b T C^2 / tp FLOPs per block forward and 2 b T C V / tp for the logits (Narayanan et
//    al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters", sec. 5.1 / appendix:
//    the terms of F = 72 B s l h^2 (1 + s/6h + V/12lh)); backward twice the forward (at the
//    machine's gemm_backward_efficiency where it has one: transposed operands); causal
//    attention 6 b T^2 C / tp FLOPs forward + backward (bench_kernels' count: the mask halves it) at
//    the measured attention rate, or where none is measured, as kernels/attention.cpp runs it
//    (GEMMs over the whole (T, T) scores, 12 b T^2 C / tp, plus the softmax's passes at memory speed); the memory-bound kernels (LayerNorm, residual, copies, cross
//    entropy) by the bytes they move at memory_bw; GELU at its measured rate. Activation
//    checkpointing adds one block forward per block in backward (F's 96 instead of 72). The ZeRO
//    engine's buffer passes within a micro-batch (stages 2-3: zero, reduce-scatter and accumulate
//    the gradient slots; stage 3: the owned piece into each gather; 16-bit working params converted
//    at each use) at the machine's copy rate.
//  - Optimizer: this rank's owned parameters (Psi_stage / S from ZeRO stage 1) at the measured
//    norm + AdamW rate for a shard of that size (MachineSpec::optimizer_rate: in cache, or
//    streaming from memory), plus the ZeRO engine's fills and copies of its gradient and parameter
//    buffers in that part of the step (engine_passes) at the machine's copy rate.
//  - Pipeline: stage times t_s (forward + backward of one micro-batch plus the transfers it waits
//    for in blocking receives: the input activation, the output gradient),
//    M micro-batches: (M - 1) max_s t_s + sum_s t_s, which is (M + pp - 1) t for equal stages; the
//    bubble is what exceeds M max_s t_s, (pp - 1) / M of the ideal (Narayanan et al. 2021, sec.
//    2.2; GPipe and 1F1B have the same bubble, 1F1B only needs fewer stashes). With PeerSchedule's
//    v chunks per stage (Megatron-LM's interleaved 1F1B, sec. 2.2.2): M max_s t_s + (sum_s t_s -
//    max_s t_s) / v, and v receives of each kind per micro-batch (one fewer on the first/last stage).
//  - Tensor parallelism (Trident's Gpt, model/gpt.cpp): per block 2 all-reduces of b T C elements
//    forward, 2 backward, 2 more when recomputing; the embedding 1; the head 1 forward (plus the
//    vocab-parallel cross entropy's max and sums, 3 b T elements) and 1 backward. Blocking: exposed.
//  - Data parallelism (train/zero.cpp, per unit u of n_u elements cut into S pieces of
//    ceil(n_u / S)): stage 0 one all-reduce of the gradient (per unit with bf16 reduce); stage 1 a
//    reduce-scatter and an all-gather per unit per step; stage 2 a reduce-scatter per unit per
//    micro-batch (overlapped with the rest of backward when overlap_reduce) and an all-gather per
//    unit per step; stage 3 the block units through two alternating slots (2 M (n_b - 2) + 2
//    gathers a step for n_b > 2 block units: the two resident at each forward/backward turn are not
//    gathered again; n_b <= 2: once each), the embedding and head once per step (own slots), and a
//    reduce-scatter per unit per micro-batch (prefetch and overlap_reduce hide them up to the compute available, times the
//    machine's overlap_efficiency). HSDP adds an all-reduce of the gradient shard across replicas;
//    pp > 1 an all-reduce of the tied embedding's gradient between first and last stage; every step
//    has the loss all-reduce, the loss broadcast over pp and the gradient-norm all-reduces.
//  - Offload (offload_optimizer = nvme, docs/offload.md): the engine's own records
//    (ZeroEngine::plan_offload_records): every optimizer chunk read and written once per step,
//    with AdamW running under the transfers; with offload_params each unit's parameter record
//    written once and read at each of its gathers, hidden under compute with prefetch except the
//    first read of each pass; at the machine's [storage] read and write bandwidth per rank
//    (ZeRO-Infinity, Rajbhandari et al. 2021, sec. 5-6). A deck that offloads needs them. The disk
//    is a resource of its own (the offload I/O thread), so its hidden time is capped by the compute
//    separately from the dp collectives' (which share the network link and one cap).
//  - Host offload (offload_optimizer = host, GPU builds): ZeroEngine::step_host moves the gradient
//    shard down and the fp32 master shard up (4 + 4 bytes per owned element, the compute type's
//    size) at the machine's [host] link_gbs, chunk after chunk with nothing hidden, and runs AdamW
//    at [host] optimizer_gparams instead of the device's rate (ZeRO-Offload, Ren et al. 2021, sec. 4).
//  - Each collective: perf/collective_model.hpp, on the intra-node link when every rank of its group
//    sits on one node (ranks placed node by node; tp fastest, then dp, then pp:
//    parallel/process_grid.hpp), else inter-node.
#pragma once

#include "core/config.hpp"
#include "perf/machine.hpp"
#include "train/zero.hpp"

#include <cstdint>
#include <string>

namespace trident {

/// Predicted time of one optimizer step, seconds, split by cause (see the header comment).
/// total_s = pipeline_s + dp_exposed_s + optimizer_s + other_s + offload_exposed_s, where pipeline_s holds compute,
/// tp and pp communication and the bubble of the slowest stage.
struct StepPrediction {
  int num_micro_batches = 1;   ///< M: micro-batches per dp rank per step
  double forward_s = 0;        ///< compute of all forwards of the critical stage
  double backward_s = 0;       ///< compute of all backwards (recompute excluded)
  double recompute_s = 0;      ///< the forwards recomputed by activation checkpointing
  double tp_comm_s = 0;        ///< tp all-reduces of the critical stage (blocking)
  double pp_comm_s = 0;        ///< p2p activation/gradient transfers on the critical path
  double bubble_s = 0;         ///< pipeline fill and drain
  double pipeline_s = 0;       ///< forward + backward + recompute + tp + pp + bubble
  double dp_comm_s = 0;        ///< all dp collectives (ZeRO, HSDP, tied embedding), modelled
  double dp_hidden_s = 0;      ///< the part of dp_comm_s overlapped with compute
  double dp_exposed_s = 0;     ///< dp_comm_s - dp_hidden_s
  double optimizer_s = 0;      ///< gradient norm + AdamW on this rank's pieces, plus zeroing
  double other_s = 0;          ///< loss and norm all-reduces, loss broadcast
  /// Offload (offload_optimizer = nvme): the transfers of the offload file per step at the
  /// machine's [storage] rates, the part hidden (AdamW under the streamed chunks; with prefetch,
  /// parameter reads under compute) and the rest, which is in total_s. offload_optimizer = host:
  /// the copies host <-> device at [host] link_gbs, none hidden.
  double offload_io_s = 0, offload_hidden_s = 0, offload_exposed_s = 0;
  double offload_read_bytes = 0, offload_write_bytes = 0;  ///< per step, what metrics.csv's offload_read/write_mib count
  /// offload_optimizer = host: host bytes per rank (the block and its gradient staging), which are
  /// not in `memory` or memory_total_bytes (both per device).
  double host_offload_bytes = 0;
  double total_s = 0;
  double model_flops = 0;      ///< model FLOPs of the step (narayanan_flops), all ranks
  double tokens = 0;           ///< tokens per step (global batch x T)
  MemoryBytes memory{};        ///< predicted tracked bytes per rank by category (predict_memory), per device
  double memory_total_bytes = 0;  ///< sum of memory plus the machine's runtime overhead
  /// Model FLOP/s utilisation: model_flops / (total_s * ranks * peak GEMM FLOP/s). Local.
  double mfu(int ranks, double peak_flops) const { return model_flops / (total_s * ranks * peak_flops); }
};

/// What another code runs that Trident does not, so that the model can be compared with that code's
/// published runs (docs/scaling.md, "Published runs"). The defaults are Trident's own schedules;
/// `trident train` runs nothing else, and `trident plan` uses these only when asked (--assume-*).
struct PeerSchedule {
  /// v model chunks per pipeline stage: Megatron-LM's interleaved 1F1B (Narayanan et al. 2021,
  /// sec. 2.2.2): the bubble is (p - 1) / (v m) of the ideal instead of (p - 1) / m, and every
  /// chunk boundary is a p2p transfer (v times as many). With pp > 1 it needs the 1F1B schedule,
  /// each stage's layers divisible by v and the micro-batches per step a multiple of pp (as
  /// Megatron-LM requires); with pp = 1 it changes nothing. 1: Trident's.
  int virtual_stages = 1;
  /// Megatron-LM's scatter/gather p2p (Narayanan et al. 2021, sec. 4.1): each tp rank sends 1/tp
  /// of the activation over its own link and the receiving stage all-gathers it over tp.
  bool p2p_scatter_gather = false;
  /// Bytes per activation element in the tp and pp transfers and the memory-bound kernels. 0:
  /// Trident's (the deck's dtype: 4, or 8 for double; Trident keeps activations in the master
  /// dtype and casts GEMM inputs only). Megatron-LM's mixed precision keeps them in 16 bits: 2.
  int activation_bytes = 0;
  /// A fused causal attention kernel (FlashAttention, Dao et al. 2022; Dao 2023, sec. 3): the
  /// GEMMs of the unmasked half of the scores only (2 b T^2 C / tp forward, 2.5 times that
  /// backward, which recomputes the scores) at the GEMM rate, no pass over (T, T) in memory.
  /// Trident's attention materialises the scores (kernels/attention.cpp).
  bool flash_attention = false;
  /// The tp collectives overlapped with the GEMMs (Megatron-Core's --tp-comm-overlap, Wang et al.
  /// 2023): up to the block GEMM time, times the machine's overlap_efficiency, is hidden. Trident's
  /// tp all-reduces block.
  bool tp_overlap = false;
  /// True when anything differs from Trident's own schedules. Local.
  bool any() const {
    return virtual_stages != 1 || p2p_scatter_gather || activation_bytes != 0 || flash_attention || tp_overlap;
  }
};

/// Model FLOPs of one step of `global_batch` sequences: Narayanan et al. 2021, sec. 5.1,
/// F = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) without and 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
/// with activation recomputation (B batch, s = block_size, l = n_layer, h = n_embd, V = vocab_size).
/// Local, pure.
double narayanan_flops(const ModelConfig& m, double global_batch, bool recompute);

/// The ZeRO engine's (train/zero.cpp) passes over its buffers in the optimizer part of a step
/// (begin_step, finish_gradients, refresh_params), in elements of the master dtype: each a fill, a
/// copy or a 16-bit conversion, charged at the bytes it writes (Trident counts a conversion as a
/// master-dtype pass). `n` parameters of the stage, `s` of them owned (the padded piece, n at stage
/// 0), S ranks in the shard group: stage 0: n (+ 2n with a 16-bit reduce, + n with 16-bit params);
/// stage 1: 3n + 2s + sS (+ sS + s with a 16-bit reduce, + n when S = 1: the backend copies a
/// one-rank reduce-scatter; the all-gather is in place); stage 2: n + 2s; stage 3: s (+ s with
/// 16-bit params). The passes inside forward and backward (stage 2-3 gradient slots, stage 3
/// gathers, 16-bit working copies) are the stage compute's, per micro-batch (step_model.cpp,
/// engine_micro_passes). Local, pure.
double engine_passes(int stage, int S, double n, double s, bool half_reduce, bool half_params);

/// Times per step the `nb` block units of one pipeline stage enter their slots, by pass: a ZeRO-3
/// all-gather, or below stage 3 the conversion of 16-bit working params. The engine's rule
/// (train/zero.cpp): block unit k lives in slot k % 2, a unit enters when its slot holds another,
/// every slot is invalid at the start of a step; a forward acquires the blocks in order, a backward
/// in reverse. So the first pass fills all nb; a pass after one of the other direction keeps the two
/// units resident at the turn (nb - min(nb, 2)); a pass after one of the same direction (GPipe, the
/// warm-up forwards and cool-down backwards of 1F1B on stage s < pp - 1) refills all nb when nb >= 4,
/// 2 of 3, none when nb <= 2 (a slot then still holds the same-parity unit the pass starts with). The passes are those of PipelineSchedule(kind, M, pp, stage) (train/
/// pipeline_schedule.hpp): 1F1B with w = min(pp - stage - 1, M) warm-up forwards, or GPipe. pp = 1
/// under 1F1B gives 2 M (nb - 2) + 2 in all (nb > 2). Local, pure, O(1).
struct SlotFills {
  double fwd = 0, bwd = 0;  ///< fills in forward and in backward passes, per step
  double total() const { return fwd + bwd; }
};
SlotFills block_slot_fills(double nb, PipelineScheduleKind kind, int M, int pp, int stage);

/// Predicted step time and memory of `cfg` (validated for dp * tp * pp ranks, vocab resolved) on
/// machine `mach`, with the pipeline run as `peer` says (default: as Trident runs it). Local, pure.
/// Throws what predict_memory throws for a layout it cannot build, ConfigError when the deck has
/// offload_optimizer = nvme and `mach` has no [storage] read_gbs / write_gbs, or offload_optimizer = host
/// and `mach` has no [host] link_gbs / optimizer_gparams, and ConfigError when `peer`
/// does not apply to the layout (virtual_stages < 1, a stage's layers not divisible by it, or the
/// micro-batches not a multiple of pp with virtual_stages > 1).
StepPrediction predict_step(const Config& cfg, const MachineSpec& mach, const PeerSchedule& peer = {});

/// Throws ConfigError naming `source` (the machine file) and each missing key when the deck needs
/// rates `mach` lacks: [storage] read_gbs / write_gbs for offload_optimizer = nvme, [host] link_gbs /
/// optimizer_gparams for offload_optimizer = host. Layout-independent, so `trident plan` asks once
/// before enumerating. Local.
void require_machine_rates(const Config& cfg, const MachineSpec& mach, const std::string& source);

/// One line per component of `p` ("compute fwd 12.3 ms | ..."), for logs and `trident plan`. Local.
std::string describe(const StepPrediction& p);

}  // namespace trident
