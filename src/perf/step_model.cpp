// perf/step_model.cpp: see step_model.hpp for the model and its sources.
#include "perf/step_model.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "model/gpt.hpp"
#include "model/param_layout.hpp"
#include "perf/collective_model.hpp"
#include "train/trainer.hpp"

#include "model/family.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

namespace trident {

double narayanan_flops(const ModelConfig& m, double B, bool recompute) {
  // Narayanan et al.'s 72 B s l h^2 (1 + s / 6h + V / 12 l h) is p passes (3, or 4 with recompute)
  // of 2 FLOPs per block weight and token (12 h^2 for GPT-2), p * 4 B s^2 l h of attention scores,
  // and 6 B s h V for the logits; written so, it holds for every family's block.
  const double s = m.block_size, l = m.n_layer, h = m.n_embd, V = m.vocab_size;
  const double p = recompute ? 4.0 : 3.0, P = block_matmul_params(m);
  return p * 2.0 * B * s * l * P + p * 4.0 * B * s * s * l * h + 6.0 * B * s * h * V;
}

namespace {

/// Every group of `n` ranks, `stride` apart, sits on one node of `per_node` devices: ranks are
/// placed node by node and a group spans n * stride consecutive ranks from a multiple of that span,
/// so all groups fit when the span divides the node (tp = 3 on 8-GPU nodes: the third group of
/// three crosses a node boundary, and a collective is as slow as its slowest link).
bool intra_node(int n, int stride, int per_node) {
  const long long span = static_cast<long long>(n) * stride;
  return span <= per_node && per_node % span == 0;
}

double coll(const MachineSpec& mach, CommOp op, int n, double bytes, bool intra) {
  const LinkCost& c = (intra ? mach.intra : mach.inter).cost(op);
  return collective_seconds(op, n, bytes, c.alpha_s, c.beta_bus);
}

/// Compute seconds of one micro-batch on one stage.
struct StageCompute {
  double fwd = 0, bwd = 0, recompute = 0;
  double block_gemm = 0;  ///< the blocks' GEMM time of one micro-batch, all passes (what tp_overlap hides under)
};

/// Bytes of one activation element: the deck's dtype (4, or 8 for double), unless `peer` says.
double act_elem_bytes(const Config& cfg, const PeerSchedule& peer) {
  if (peer.activation_bytes > 0) return peer.activation_bytes;
  return cfg.train.dtype == Precision::f64 ? 8.0 : 4.0;
}

StageCompute stage_compute(const Config& cfg, const MachineSpec& mach, const PeerSchedule& peer, const ModelPart& part,
                           bool has_embed, bool has_head) {
  const ModelConfig& m = cfg.model;
  const double b = static_cast<double>(cfg.train.micro_batch_size), T = m.block_size, C = m.n_embd;
  const double tp = cfg.parallel.tp, N = b * T, L = part.n_layers;
  const double V = m.vocab_size;
  const Precision ct = cfg.train.compute_dtype == Precision::bf16 ? Precision::bf16 : cfg.train.dtype;
  const double gemm = mach.gemm_flops(ct);
  // The backward GEMMs (dX = dY W, dW = dY^T X: transposed operands) at their own measured share
  // of the peak where the machine file has one.
  const double bwd_ratio = mach.gemm_backward_efficiency > 0 ? mach.gemm_efficiency / mach.gemm_backward_efficiency : 1.0;
  const double es = act_elem_bytes(cfg, peer);  // activation element bytes
  const double bw = mach.memory_bw;
  const double gelu_rate = mach.gelu_elements_per_s > 0 ? mach.gelu_elements_per_s : bw / (5.0 * es);
  // One block, forward / backward (the family's Block, model/block.hpp):
  //  GEMMs: 2 FLOPs per block weight and token, over tp (GPT-2: qkv 6C^2, proj 2C^2, fc 8C^2,
  //  fcproj 8C^2); backward 2x.
  const double gemm_f = 2.0 * N * block_matmul_params(m) / tp / gemm;
  //  dropout (model/gpt2, model/llama: the counter-based mask is regenerated, never stored): the
  //  two residual dropouts read and write C per token forward and backward, and the attention
  //  dropout reads and writes the (T, T) probabilities forward and their gradient backward.
  const double drop_scores = m.dropout > 0 ? 2.0 * b * (m.n_head / tp) * T * T * es / bw : 0.0;
  //  attention: measured (bench_kernels' BM_Attention rate for its count, fwd + bwd = 6 b T^2 C, a
  //  third forward), or else as kernels/attention.cpp runs it: batched GEMMs over the whole (T, T)
  //  scores (no causal skip: 4 b T^2 C forward, 8 b T^2 C backward) at the GEMM rate, and the
  //  softmax over n_head / tp (T, T) matrices per sequence at memory speed (read scores, write
  //  probabilities forward; read probabilities and their gradient, write the scores' backward).
  double attn_f = 0, attn_b = 0;
  if (peer.flash_attention) {
    attn_f = 2.0 * b * T * T * C / tp / gemm;
    attn_b = 2.5 * attn_f;
  } else if (mach.attention_flops > 0) {
    const double attn = mach.attention_flops * (cfg.train.dtype == Precision::f64 ? 0.5 : 1.0);
    attn_f = 2.0 * b * T * T * C / tp / attn;
    attn_b = 2.0 * attn_f;
  } else {
    const double scores = b * (m.n_head / tp) * T * T * es;
    attn_f = 4.0 * b * T * T * C / tp / gemm + 2.0 * scores / bw;
    attn_b = 8.0 * b * T * T * C / tp / gemm + 3.0 * scores / bw;
  }
  if (!peer.flash_attention) {  // BM_Attention measures without dropout; a fused kernel drops in registers
    attn_f += drop_scores;
    attn_b += drop_scores;
  }
  //  memory-bound: two LayerNorms (6 passes of C floats fwd + bwd, as BM_LayerNorm counts), two
  //  residual adds forward (3 C each), two gradient copies backward (2 C each), so 10 C forward
  //  and 12 C backward elements per token.
  double mem_f = 10.0 * N * C * es / bw, mem_b = 12.0 * N * C * es / bw;
  if (m.dropout > 0) {
    mem_f += 4.0 * N * C * es / bw;
    mem_b += 4.0 * N * C * es / bw;
  }
  //  GELU on 4C / tp per token (SwiGLU on F / tp) (BM_Gelu's rate is forward + backward; a third forward).
  const double gelu_fb = mlp_hidden(m) * N / tp / gelu_rate;
  const double blk_f = gemm_f + attn_f + mem_f + gelu_fb / 3.0;
  const double blk_b = 2.0 * gemm_f * bwd_ratio + attn_b + mem_b + 2.0 * gelu_fb / 3.0;
  StageCompute s;
  s.fwd = L * blk_f;
  s.bwd = L * blk_b;
  if (cfg.train.activation_checkpointing == Recompute::block) s.recompute = L * blk_f;
  s.block_gemm = L * gemm_f * (2.0 * bwd_ratio + (cfg.train.activation_checkpointing == Recompute::block ? 2.0 : 1.0));
  if (has_embed) {  // gather C per token forward, scatter-add backward
    s.fwd += 2.0 * N * C * es / bw;
    s.bwd += 2.0 * N * C * es / bw;
  }
  if (has_head) {
    const double Vl = std::ceil(V / tp);
    s.fwd += 2.0 * N * C * Vl / gemm + (3.0 * N * Vl + 4.0 * N * C) * es / bw;  // logits, 3 passes of CE, lnf
    s.bwd += 4.0 * N * C * Vl / gemm * bwd_ratio + (2.0 * N * Vl + 6.0 * N * C) * es / bw;
  }
  return s;
}

/// True for the units with slots of their own (embedding, head: GptSchedule::special_units).
bool is_special_unit(const GptSchedule& sched, size_t u) {
  return std::find(sched.special_units.begin(), sched.special_units.end(), static_cast<int>(u)) !=
         sched.special_units.end();
}


/// The ZeRO engine's passes over its buffers inside one micro-batch on the stage `part` (in
/// master-dtype elements, as engine_passes counts them), forward and backward: stages 2-3 zero each
/// unit's padded gradient slot, reduce-scatter it (a copy over one rank; + the 16-bit conversions)
/// and accumulate the piece; stage 3 copies the owned piece into the gather buffer at every gather
/// (block units as often as the dp term gathers them, the embedding and head once per step; + the
/// 16-bit conversion of the gathered unit), in the pass that gathers; stages 0-2 with
/// 16-bit working params convert a unit each time it enters its slot, as often as stage 3 gathers
/// it (not for a peer assumed to keep 16-bit activations: its GEMMs read the 16-bit weights). The
/// count is the dp term's: block_slot_fills on this stage's own schedule, by pass direction.
struct MicroPasses {
  double fwd = 0, bwd = 0;
};
MicroPasses engine_micro_passes(const Config& cfg, const PeerSchedule& peer, const ModelPart& part, int S, int M) {
  const ParallelConfig& par = cfg.parallel;
  // A peer assumed to keep 16-bit activations (Megatron-LM's mixed precision) feeds its 16-bit
  // weights to the GEMMs as they are: no working copies to convert.
  const bool half_r = is_half(cfg.train.reduce_dtype), half_p = is_half(cfg.train.param_dtype) && peer.activation_bytes == 0;
  if (par.zero_stage < 2 && !half_p) return {};
  const ParamLayout layout = ParamLayout::make(cfg.model, par.unit_blocks, part);
  const GptSchedule sched = GptSchedule::make(layout, cfg.model);
  double s = 0, P = 0, n_blocks = 0, s_blocks = 0, P_blocks = 0, n_special = 0, s_special = 0, P_special = 0, nb = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const double n_u = static_cast<double>(layout.units()[u].numel), s_u = std::ceil(n_u / S);
    s += s_u;
    P += s_u * S;
    const bool special = is_special_unit(sched, u);
    (special ? n_special : n_blocks) += n_u;
    (special ? s_special : s_blocks) += s_u;
    (special ? P_special : P_blocks) += s_u * S;
    nb += special ? 0 : 1;
  }
  MicroPasses mp;
  if (par.zero_stage >= 2) mp.bwd += P + s + (half_r ? P + s : 0) + (S == 1 ? s : 0);
  // Units enter their slot as the dp term counts gathers: the blocks block_slot_fills times in
  // each direction (the stage's own schedule; a peer's interleaved schedule is counted as 1F1B),
  // the embedding and head once a step in forward (own slots). Block units are of equal size.
  const SlotFills fills = block_slot_fills(nb, par.pp_schedule, M, part.pp_size, part.pp_rank);
  double per_block = 0, special = 0;  // elements passed per block unit fill, and for the specials
  if (par.zero_stage == 3) {
    per_block = nb > 0 ? (s_blocks + (half_p ? P_blocks : 0)) / nb : 0.0;
    special = s_special + (half_p ? P_special : 0);
  } else if (half_p) {
    per_block = nb > 0 ? n_blocks / nb : 0.0;
    special = n_special;
  }
  mp.fwd += (fills.fwd * per_block + special) / M;
  mp.bwd += fills.bwd * per_block / M;
  return mp;
}

}  // namespace

SlotFills block_slot_fills(double nb, PipelineScheduleKind kind, int M, int pp, int stage) {
  if (nb <= 0 || M <= 0) return {};
  // Passes in a row: same direction (ff, bb) or a turn (fb, bf), from the schedule's shape:
  // 1F1B: F^w (F B)^(M - w) B^w; GPipe (and 1F1B with w = M): F^M B^M.
  const int w = kind == PipelineScheduleKind::gpipe ? M : std::min(std::max(pp - stage - 1, 0), M);
  double ff, fb, bf, bb;
  if (w < M) {
    ff = w;
    fb = M - w;
    bf = M - w - 1;
    bb = w;
  } else {
    ff = M - 1;
    fb = 1;
    bf = 0;
    bb = M - 1;
  }
  // A pass after one of the same direction finds, at each unit, the slot holding the last unit
  // of that parity from the previous pass: a hit only for the units 0 and 1 (forward; nb - 1 and
  // nb - 2 backward) when they were that last unit, i.e. nb <= 2, or unit 1 when nb = 3.
  const double same = nb >= 4 ? nb : nb == 3 ? 2 : 0, turn = nb - std::min(nb, 2.0);
  SlotFills f;
  f.fwd = nb + ff * same + bf * turn;  // the first forward fills every block unit
  f.bwd = fb * turn + bb * same;
  return f;
}

double engine_passes(int stage, int S, double n, double s, bool half_reduce, bool half_params) {
  const double P = s * S;  // the padded all-gather / reduce-scatter buffer
  // A reduce-scatter over one rank is a copy in the backend (separate buffers); the refresh's
  // all-gather is in place (MPI_IN_PLACE), so over one rank it moves nothing.
  const double one_rank = S == 1 ? 1 : 0;
  switch (stage) {
    case 0:  // zero the gradient; 16-bit reduction converts it there and back; 16-bit params from the master
      return n + (half_reduce ? 2 * n : 0) + (half_params ? n : 0);
    case 1:  // zero gradient and shard; fill + copy into the reduce-scatter buffer (+ its 16-bit
             // conversions), the reduce-scatter; the master piece into the all-gather buffer, the
             // buffer into the working params
      return n + s + (P + n + (half_reduce ? P + s : 0) + one_rank * n) + (s + n);
    case 2:  // zero the shard (the reduce-scatters ran in backward); the refresh as at stage 1
      return s + (s + n);
    default:  // 3: zero the shard; 16-bit params from the master piece
      return s + (half_params ? s : 0);
  }
}

void require_machine_rates(const Config& cfg, const MachineSpec& mach, const std::string& source) {
  auto missing = [](std::initializer_list<std::pair<const char*, double>> keys) {
    std::string out;
    for (const auto& [k, v] : keys)
      if (!(v > 0)) out += std::string(out.empty() ? "" : " and ") + k;
    return out;
  };
  if (cfg.parallel.offload_optimizer == OffloadKind::nvme) {
    const std::string m = missing({{"[storage] read_gbs", mach.storage_read_bw}, {"[storage] write_gbs", mach.storage_write_bw}});
    require_config(m.empty(), source + " has no " + m + ", which a deck with [parallel] offload_optimizer = nvme needs "
                              "(tools/machine_file.sh --offload-dir DIR measures them)");
  }
  if (cfg.parallel.offload_optimizer == OffloadKind::host) {
    const std::string m = missing({{"[host] link_gbs", mach.host_link_bw},
                                   {"[host] optimizer_gparams", mach.host_optimizer_params_per_s}});
    require_config(m.empty(), source + " has no " + m + ", which a deck with [parallel] offload_optimizer = host needs "
                              "(the host <-> device copy rate per rank and the host's AdamW rate; docs/offload.md)");
  }
}

StepPrediction predict_step(const Config& cfg, const MachineSpec& mach, const PeerSchedule& peer) {
  require_machine_rates(cfg, mach, "machine file " + mach.name);
  const ModelConfig& m = cfg.model;
  const ParallelConfig& par = cfg.parallel;
  const TrainConfig& tr = cfg.train;
  StepPrediction p;
  const int dp = par.dp, tp = par.tp, pp = par.pp, world = dp * tp * pp;
  const int S = par.shard_group_size > 0 ? par.shard_group_size : dp;
  const int dpn = mach.devices_per_node;
  const int M = static_cast<int>(tr.global_batch_size / (tr.micro_batch_size * dp));
  p.num_micro_batches = M;
  p.tokens = static_cast<double>(tr.global_batch_size) * m.block_size;
  const bool recompute = tr.activation_checkpointing == Recompute::block;
  p.model_flops = narayanan_flops(m, static_cast<double>(tr.global_batch_size), recompute);
  const double es = act_elem_bytes(cfg, peer);               // activations
  const double db = tr.dtype == Precision::f64 ? 8.0 : 4.0;  // master weights and gradients
  const double pbytes = is_half(tr.param_dtype) ? 2.0 : db;
  const double rbytes = is_half(tr.reduce_dtype) ? 2.0 : db;
  const double act_bytes = static_cast<double>(tr.micro_batch_size) * m.block_size * m.n_embd * es;
  const double N = static_cast<double>(tr.micro_batch_size) * m.block_size;
  const int v = peer.virtual_stages;
  const double copy_bw = mach.copy_bw > 0 ? mach.copy_bw : mach.memory_bw;  // the engine's buffer passes
  require_config(v >= 1, "interleaved pipeline: the chunks per stage must be >= 1, not " + std::to_string(v));
  require_config(v == 1 || M % pp == 0, "interleaved pipeline: " + std::to_string(M) +
                                            " micro-batches per step are not a multiple of pp = " + std::to_string(pp));
  require_config(v == 1 || pp == 1 || par.pp_schedule == PipelineScheduleKind::one_f_one_b,
                 "interleaved pipeline: a variant of 1F1B, not of gpipe");
  const bool tp_intra = intra_node(tp, 1, dpn), dp_intra = intra_node(dp, tp, dpn), shard_intra = intra_node(S, tp, dpn),
             pp_intra = intra_node(pp, tp * dp, dpn), world_intra = world <= dpn;

  // ---- per stage: compute, tp, p2p; pipeline ------------------------------------------------
  std::vector<double> t_stage(static_cast<size_t>(pp));
  size_t crit = 0;
  std::vector<StageCompute> comp(static_cast<size_t>(pp));
  std::vector<double> tpc(static_cast<size_t>(pp)), p2p(static_cast<size_t>(pp));
  std::map<std::tuple<int, bool, bool, int>, MicroPasses> micro;
  for (int s = 0; s < pp; ++s) {
    const ModelPart part = ModelPart::make(m, par, 0, s);
    require_config(pp == 1 || part.n_layers % v == 0, "interleaved pipeline: stage " + std::to_string(s) + "'s " +
                                               std::to_string(part.n_layers) + " layers do not split into " +
                                               std::to_string(v) + " chunks");
    const bool first = s == 0, last = s == pp - 1;
    comp[static_cast<size_t>(s)] = stage_compute(cfg, mach, peer, part, first, last);
    // Stages of equal blocks, ends and warm-up have equal passes: one layout each (the planner
    // asks often; the warm-up min(pp - s - 1, M) is the same for all but the last M stages).
    const int warm = par.pp_schedule == PipelineScheduleKind::gpipe ? M : std::min(pp - s - 1, M);
    const auto key = std::make_tuple(part.n_layers, first, last, warm);
    auto known = micro.find(key);
    if (known == micro.end()) known = micro.emplace(key, engine_micro_passes(cfg, peer, part, S, M)).first;
    const MicroPasses& mp = known->second;
    comp[static_cast<size_t>(s)].fwd += mp.fwd * db / copy_bw;
    comp[static_cast<size_t>(s)].bwd += mp.bwd * db / copy_bw;
    double tpt = 0;
    if (tp > 1) {
      const double ar = coll(mach, CommOp::all_reduce, tp, N * m.n_embd * es, tp_intra);
      const double per_block = (recompute ? 6.0 : 4.0) * ar;
      tpt += part.n_layers * per_block;
      if (first) tpt += ar;
      if (last)
        tpt += 2.0 * ar + coll(mach, CommOp::all_reduce, tp, N * es, tp_intra) +
               coll(mach, CommOp::all_reduce, tp, 2.0 * N * es, tp_intra);
    }
    if (peer.tp_overlap) tpt -= std::min(tpt, mach.overlap_efficiency * comp[static_cast<size_t>(s)].block_gemm);
    tpc[static_cast<size_t>(s)] = tpt;
    // p2p: a stage waits in a blocking recv for its input activation (all but the first) and for
    // its output gradient (all but the last), once per micro-batch each (train/trainer.cpp); the
    // sends are non-blocking. Interleaved: once per chunk (the first stage's first chunk and the
    // last stage's last chunk have no neighbour). Scatter/gather: 1/tp of it per link, then an
    // all-gather over tp.
    const double recvs = pp == 1 ? 0.0 : (first ? v - 1 : v) + (last ? v - 1 : v);
    const double one_recv = peer.p2p_scatter_gather && tp > 1
                                ? coll(mach, CommOp::send, 2, act_bytes / tp, pp_intra) +
                                      coll(mach, CommOp::all_gather, tp, act_bytes, tp_intra)
                                : coll(mach, CommOp::send, 2, act_bytes, pp_intra);
    p2p[static_cast<size_t>(s)] = recvs * one_recv;
    const StageCompute& c = comp[static_cast<size_t>(s)];
    t_stage[static_cast<size_t>(s)] = c.fwd + c.bwd + c.recompute + tpt + p2p[static_cast<size_t>(s)];
    if (t_stage[static_cast<size_t>(s)] > t_stage[crit]) crit = static_cast<size_t>(s);
  }
  double sum_t = 0;
  for (double t : t_stage) sum_t += t;
  // (M - 1) t_crit + sum_s t_s = M t_crit + (sum_s t_s - t_crit): the fill and drain shrink v times.
  p.pipeline_s = M * t_stage[crit] + (sum_t - t_stage[crit]) / v;
  p.forward_s = M * comp[crit].fwd;
  p.backward_s = M * comp[crit].bwd;
  p.recompute_s = M * comp[crit].recompute;
  p.tp_comm_s = M * tpc[crit];
  p.pp_comm_s = M * p2p[crit];
  p.bubble_s = p.pipeline_s - M * t_stage[crit];

  // ---- dp: the ZeRO engine's collectives on the critical stage's units ----------------------
  const ParamLayout layout = ParamLayout::make(m, par.unit_blocks, ModelPart::make(m, par, 0, static_cast<int>(crit)));
  const GptSchedule sched = GptSchedule::make(layout, m);
  const auto& units = layout.units();
  double local_owned = 0, n_total = 0;
  double dp_total = 0, overlappable_reduce = 0, overlappable_gather = 0, block_ag = 0;
  auto is_special = [&](size_t u) { return is_special_unit(sched, u); };
  size_t n_block_units = 0;
  for (size_t u = 0; u < units.size(); ++u) n_block_units += is_special(u) ? 0 : 1;
  for (size_t u = 0; u < units.size(); ++u) {
    const double n = static_cast<double>(units[u].numel);
    const double s_u = std::ceil(n / S), padded = s_u * S;
    n_total += n;
    local_owned += par.zero_stage >= 1 ? s_u : n;
    if (par.zero_stage == 0 && is_half(tr.reduce_dtype))
      dp_total += coll(mach, CommOp::all_reduce, S, n * rbytes, shard_intra);
    if (par.zero_stage == 1) {
      dp_total += coll(mach, CommOp::reduce_scatter, S, padded * rbytes, shard_intra);
      dp_total += coll(mach, CommOp::all_gather, S, padded * pbytes, shard_intra);
    }
    if (par.zero_stage == 2) {
      const double rs = M * coll(mach, CommOp::reduce_scatter, S, padded * rbytes, shard_intra);
      dp_total += rs + coll(mach, CommOp::all_gather, S, padded * pbytes, shard_intra);
      if (par.overlap_reduce && u != 0) overlappable_reduce += rs;  // unit 0 (embedding) completes last
    }
    if (par.zero_stage == 3) {
      const double ag = coll(mach, CommOp::all_gather, S, padded * pbytes, shard_intra);
      const double rs = M * coll(mach, CommOp::reduce_scatter, S, padded * rbytes, shard_intra);
      dp_total += rs;
      if (par.overlap_reduce && u != 0) overlappable_reduce += rs;
      if (is_special(u)) dp_total += ag;  // embedding and head: own slots, gathered once per step
      else block_ag += ag;
    }
  }
  double block_gathers_per_unit = 1.0;  // gathers of each block unit per step (stage 3)
  if (par.zero_stage == 3 && n_block_units > 0) {
    // Blocks share two alternating slots (block_slot_fills, on the critical stage's schedule).
    const double nb = static_cast<double>(n_block_units);
    const double count = block_slot_fills(nb, par.pp_schedule, M, pp, static_cast<int>(crit)).total();
    block_gathers_per_unit = count / nb;
    const double gathered = block_ag * count / nb;
    dp_total += gathered;
    // With prefetch, every gather but the first of each pass can run under the previous unit's compute.
    if (par.prefetch) overlappable_gather += gathered * std::max(0.0, count - 2.0 * M) / count;
  }
  if (par.zero_stage == 0 && !is_half(tr.reduce_dtype))
    dp_total += coll(mach, CommOp::all_reduce, S, n_total * rbytes, shard_intra);
  if (par.zero_stage >= 1 && dp / S > 1)
    dp_total += coll(mach, CommOp::all_reduce, dp / S, local_owned * rbytes, intra_node(dp, tp, dpn));
  const int tied = layout.tied_unit();
  if (pp > 1 && tied >= 0) {
    const double n = static_cast<double>(units[static_cast<size_t>(tied)].numel);
    dp_total += coll(mach, CommOp::all_reduce, 2, (par.zero_stage == 0 ? n : std::ceil(n / S)) * db, world_intra);
  }
  p.dp_comm_s = dp_total;
  const double pipeline_compute = p.forward_s + p.backward_s + p.recompute_s;
  p.dp_hidden_s = mach.overlap_efficiency *
                  (std::min(overlappable_reduce, p.backward_s + p.recompute_s) +
                   std::min(overlappable_gather, pipeline_compute));
  // Hidden communication runs under compute, and the dp collectives share one link: no more than the
  // compute time can be hidden in all (the prefetch gathers and overlapped reduce-scatters are caps of
  // their own, not additive beyond the compute).
  p.dp_hidden_s = std::min({p.dp_hidden_s, dp_total, pipeline_compute});
  p.dp_exposed_s = dp_total - p.dp_hidden_s;

  // ---- optimizer and small collectives -----------------------------------------------------
  // norm + AdamW on the owned pieces at the machine's rate for a shard of that size (in cache or
  // streaming from memory); the engine's fills and copies of its buffers at the copy rate.
  const double opt_rate = mach.optimizer_params_per_s > 0 ? mach.optimizer_rate(local_owned) : mach.memory_bw / (7.0 * db);
  const double adamw_s = local_owned / opt_rate;
  p.optimizer_s = adamw_s + engine_passes(par.zero_stage, S, n_total, local_owned, is_half(tr.reduce_dtype),
                                          is_half(tr.param_dtype)) *
                                db / copy_bw;

  // ---- offload (docs/offload.md): the engine's own records, at the machine's disk rates ---------
  if (par.offload_optimizer == OffloadKind::host) {
    // ZeroEngine::step_host, chunk after chunk without overlap: the gradient shard down, AdamW on
    // the host instead of the device, the master shard up (ZeRO-Offload, Ren et al. 2021, sec. 4).
    const double bytes = local_owned * db;
    p.offload_read_bytes = bytes;   // host -> device: the updated master
    p.offload_write_bytes = bytes;  // device -> host: the gradient
    p.offload_io_s = 2.0 * bytes / mach.host_link_bw;
    p.offload_exposed_s = p.offload_io_s;
    // The gradient norm stays on the device: of the eight passes over the shard that the device's
    // norm + AdamW rate covers (the norm reads g; AdamW reads p, g, m, v and writes p, m, v), one.
    p.optimizer_s += local_owned / mach.host_optimizer_params_per_s - adamw_s * 7.0 / 8.0;
  }
  if (par.offload_optimizer == OffloadKind::nvme) {
    const ZeroOptions zo = ZeroOptions::from(cfg);
    const auto rec = tr.dtype == Precision::f64 ? ZeroEngine<double>::plan_offload_records(layout, sched, zo, S, 0)
                                                : ZeroEngine<float>::plan_offload_records(layout, sched, zo, S, 0);
    // The step streams every optimizer chunk record in and out once (read -> AdamW -> write, the
    // I/O thread reading ahead and writing behind, so AdamW runs under the transfers); with
    // offload_params each unit's parameter record is written once and read at every gather.
    double param_reads = 0, param_writes = 0, first_reads = 0;
    for (size_t u = 0; u < rec.param_records.size(); ++u) {
      const double r = static_cast<double>(rec.param_records[u]);
      param_writes += r;
      param_reads += r * (is_special(u) ? 1.0 : block_gathers_per_unit);
      first_reads = std::max(first_reads, r);
    }
    const double chunks = static_cast<double>(rec.chunks);
    p.offload_read_bytes = chunks + param_reads;
    p.offload_write_bytes = chunks + param_writes;
    const double stream_s = chunks / mach.storage_read_bw + (chunks + param_writes) / mach.storage_write_bw;
    const double read_s = param_reads / mach.storage_read_bw;
    p.offload_io_s = stream_s + read_s;
    // Hidden: AdamW under the stream; with prefetch, a parameter read under the previous unit's
    // compute, except the first read of each forward and backward pass (2 M of them).
    const double unhidden_reads = par.prefetch ? std::min(read_s, 2.0 * M * first_reads / mach.storage_read_bw) : read_s;
    p.offload_hidden_s = std::min(stream_s, adamw_s) + std::min(read_s - unhidden_reads, pipeline_compute);
    p.offload_exposed_s = p.offload_io_s - p.offload_hidden_s;
  }
  p.other_s = coll(mach, CommOp::all_reduce, dp, 8, dp_intra) + coll(mach, CommOp::broadcast, pp, 8, pp_intra) +
              (par.zero_stage >= 1 ? coll(mach, CommOp::all_reduce, S, 8, shard_intra) : 0.0) +
              (tp * pp > 1 ? coll(mach, CommOp::all_reduce, tp * pp, 8, intra_node(tp * pp, 1, dpn) && world_intra) : 0.0);
  p.total_s = p.pipeline_s + p.dp_exposed_s + p.optimizer_s + p.other_s + p.offload_exposed_s;

  p.memory = predict_memory(cfg);
  if (par.offload_optimizer == OffloadKind::host) {
    // Memory is per device: the host block leaves it, one chunk of device staging stays, as the
    // machine's build (a CUDA build: host offload is refused otherwise) allocates them, whatever
    // build this planner is (predict_memory counted them as this build allocates them).
    const OffloadPlan here = predict_offload(cfg), there = predict_offload(cfg, true);
    p.memory[static_cast<size_t>(MemCategory::optimizer)] += there.device_bytes - here.host_bytes - here.device_bytes;
    p.host_offload_bytes = static_cast<double>(there.host_bytes);
  }
  p.memory_total_bytes = mach.runtime_overhead_bytes;
  for (auto v : p.memory) p.memory_total_bytes += static_cast<double>(v);
  return p;
}

std::string describe(const StepPrediction& p) {
  // A term that is zero up to rounding (the bubble of pp = 1: a difference of equal sums) prints 0.00, not -0.00.
  auto ms = [](double s) { return (s < 0 && s > -1e-9 ? 0.0 : s) * 1e3; };
  return log::format(
      "step %.2f ms = fwd %.2f + bwd %.2f + recompute %.2f + tp %.2f + pp %.2f + bubble %.2f + dp exposed %.2f "
      "(of %.2f, %.2f hidden) + optimizer %.2f + other %.2f%s | M=%d | mem %.1f MiB",
      ms(p.total_s), ms(p.forward_s), ms(p.backward_s), ms(p.recompute_s), ms(p.tp_comm_s), ms(p.pp_comm_s),
      ms(p.bubble_s), ms(p.dp_exposed_s), ms(p.dp_comm_s), ms(p.dp_hidden_s), ms(p.optimizer_s), ms(p.other_s),
      p.offload_io_s > 0
          ? log::format(" + offload exposed %.2f (of %.2f, %.2f hidden; %.1f MiB read, %.1f MiB written)",
                        ms(p.offload_exposed_s), ms(p.offload_io_s), ms(p.offload_hidden_s),
                        p.offload_read_bytes / (1024.0 * 1024.0), p.offload_write_bytes / (1024.0 * 1024.0))
                .c_str()
          : "",
      p.num_micro_batches, p.memory_total_bytes / (1024.0 * 1024.0));
}

}  // namespace trident
