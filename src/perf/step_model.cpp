// perf/step_model.cpp: see step_model.hpp for the model and its sources.
#include "perf/step_model.hpp"

#include "core/log.hpp"
#include "model/gpt.hpp"
#include "model/param_layout.hpp"
#include "perf/collective_model.hpp"
#include "train/trainer.hpp"

#include "model/family.hpp"

#include <algorithm>
#include <cmath>
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

/// Ranks of a group of `n` ranks, `stride` apart, fit on one node of `per_node` devices (ranks are
/// placed node by node and groups start at multiples of their span).
bool intra_node(int n, int stride, int per_node) { return static_cast<long long>(n) * stride <= per_node; }

double coll(const MachineSpec& mach, CommOp op, int n, double bytes, bool intra) {
  const LinkCost& c = (intra ? mach.intra : mach.inter).cost(op);
  return collective_seconds(op, n, bytes, c.alpha_s, c.beta_bus);
}

/// Compute seconds of one micro-batch on one stage.
struct StageCompute {
  double fwd = 0, bwd = 0, recompute = 0;
};

StageCompute stage_compute(const Config& cfg, const MachineSpec& mach, const ModelPart& part, bool has_embed,
                           bool has_head) {
  const ModelConfig& m = cfg.model;
  const double b = static_cast<double>(cfg.train.micro_batch_size), T = m.block_size, C = m.n_embd;
  const double tp = cfg.parallel.tp, N = b * T, L = part.n_layers;
  const double V = m.vocab_size;
  const Precision ct = cfg.train.compute_dtype == Precision::bf16 ? Precision::bf16 : cfg.train.dtype;
  const double gemm = mach.gemm_flops(ct);
  const double attn = mach.attention_flops > 0 ? mach.attention_flops * (cfg.train.dtype == Precision::f64 ? 0.5 : 1.0)
                                               : gemm;
  const double es = cfg.train.dtype == Precision::f64 ? 8.0 : 4.0;  // activation element bytes
  const double bw = mach.memory_bw;
  const double gelu_rate = mach.gelu_elements_per_s > 0 ? mach.gelu_elements_per_s : bw / (5.0 * es);
  // One block, forward / backward (the family's Block, model/block.hpp):
  //  GEMMs: 2 FLOPs per block weight and token, over tp (GPT-2: qkv 6C^2, proj 2C^2, fc 8C^2,
  //  fcproj 8C^2); backward 2x.
  const double gemm_f = 2.0 * N * block_matmul_params(m) / tp / gemm;
  //  attention (bench_kernels' BM_Attention count, fwd + bwd = 6 b T^2 C, a third forward).
  const double attn_fb = 6.0 * b * T * T * C / tp / attn;
  //  memory-bound: two LayerNorms (6 passes of C floats fwd + bwd, as BM_LayerNorm counts), two
  //  residual adds forward (3 C each), two gradient copies backward (2 C each), so 10 C forward
  //  and 12 C backward elements per token.
  const double mem_f = 10.0 * N * C * es / bw, mem_b = 12.0 * N * C * es / bw;
  //  GELU on 4C / tp per token (SwiGLU on F / tp) (BM_Gelu's rate is forward + backward; a third forward).
  const double gelu_fb = mlp_hidden(m) * N / tp / gelu_rate;
  const double blk_f = gemm_f + attn_fb / 3.0 + mem_f + gelu_fb / 3.0;
  const double blk_b = 2.0 * gemm_f + 2.0 * attn_fb / 3.0 + mem_b + 2.0 * gelu_fb / 3.0;
  StageCompute s;
  s.fwd = L * blk_f;
  s.bwd = L * blk_b;
  if (cfg.train.activation_checkpointing == Recompute::block) s.recompute = L * blk_f;
  if (has_embed) {  // gather C per token forward, scatter-add backward
    s.fwd += 2.0 * N * C * es / bw;
    s.bwd += 2.0 * N * C * es / bw;
  }
  if (has_head) {
    const double Vl = std::ceil(V / tp);
    s.fwd += 2.0 * N * C * Vl / gemm + (3.0 * N * Vl + 4.0 * N * C) * es / bw;  // logits, 3 passes of CE, lnf
    s.bwd += 4.0 * N * C * Vl / gemm + (2.0 * N * Vl + 6.0 * N * C) * es / bw;
  }
  return s;
}

}  // namespace

StepPrediction predict_step(const Config& cfg, const MachineSpec& mach) {
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
  const double es = tr.dtype == Precision::f64 ? 8.0 : 4.0;
  const double pbytes = is_half(tr.param_dtype) ? 2.0 : es;
  const double rbytes = is_half(tr.reduce_dtype) ? 2.0 : es;
  const double act_bytes = static_cast<double>(tr.micro_batch_size) * m.block_size * m.n_embd * es;
  const double N = static_cast<double>(tr.micro_batch_size) * m.block_size;
  const bool tp_intra = intra_node(tp, 1, dpn), dp_intra = intra_node(dp, tp, dpn), shard_intra = intra_node(S, tp, dpn),
             pp_intra = intra_node(pp, tp * dp, dpn), world_intra = world <= dpn;

  // ---- per stage: compute, tp, p2p; pipeline ------------------------------------------------
  std::vector<double> t_stage(static_cast<size_t>(pp));
  size_t crit = 0;
  std::vector<StageCompute> comp(static_cast<size_t>(pp));
  std::vector<double> tpc(static_cast<size_t>(pp)), p2p(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    const ModelPart part = ModelPart::make(m, par, 0, s);
    const bool first = s == 0, last = s == pp - 1;
    comp[static_cast<size_t>(s)] = stage_compute(cfg, mach, part, first, last);
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
    tpc[static_cast<size_t>(s)] = tpt;
    // p2p: a stage waits in a blocking recv for its input activation (all but the first) and for
    // its output gradient (all but the last), once per micro-batch each (train/trainer.cpp); the
    // sends are non-blocking.
    p2p[static_cast<size_t>(s)] = ((first ? 0 : 1) + (last ? 0 : 1)) * coll(mach, CommOp::send, 2, act_bytes, pp_intra);
    const StageCompute& c = comp[static_cast<size_t>(s)];
    t_stage[static_cast<size_t>(s)] = c.fwd + c.bwd + c.recompute + tpt + p2p[static_cast<size_t>(s)];
    if (t_stage[static_cast<size_t>(s)] > t_stage[crit]) crit = static_cast<size_t>(s);
  }
  double sum_t = 0;
  for (double t : t_stage) sum_t += t;
  p.pipeline_s = (M - 1) * t_stage[crit] + sum_t;
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
  auto is_special = [&](size_t u) {
    return std::find(sched.special_units.begin(), sched.special_units.end(), static_cast<int>(u)) !=
           sched.special_units.end();
  };
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
  if (par.zero_stage == 3 && n_block_units > 0) {
    // Blocks share two alternating slots: the two blocks resident at each turn of the schedule
    // (forward -> backward of a micro-batch, backward -> next forward) are not gathered again, so a
    // step gathers 2 M (n_b - 2) + 2 block units for n_b > 2, and each block once for n_b <= 2.
    const double nb = static_cast<double>(n_block_units);
    const double count = nb <= 2 ? nb : 2.0 * M * (nb - 2.0) + 2.0;
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
    dp_total += coll(mach, CommOp::all_reduce, 2, (par.zero_stage == 0 ? n : std::ceil(n / S)) * es, world_intra);
  }
  p.dp_comm_s = dp_total;
  const double pipeline_compute = p.forward_s + p.backward_s + p.recompute_s;
  p.dp_hidden_s = mach.overlap_efficiency *
                  (std::min(overlappable_reduce, p.backward_s + p.recompute_s) +
                   std::min(overlappable_gather, pipeline_compute));
  p.dp_hidden_s = std::min(p.dp_hidden_s, dp_total);
  p.dp_exposed_s = dp_total - p.dp_hidden_s;

  // ---- optimizer and small collectives -----------------------------------------------------
  const double opt_rate = mach.optimizer_params_per_s > 0 ? mach.optimizer_params_per_s : mach.memory_bw / (7.0 * es);
  // norm + AdamW on the owned pieces; zeroing the gradient (full below stage 2) at memory speed.
  p.optimizer_s = local_owned / opt_rate + (par.zero_stage < 2 ? n_total : local_owned) * es / mach.memory_bw;
  p.other_s = coll(mach, CommOp::all_reduce, dp, 8, dp_intra) + coll(mach, CommOp::broadcast, pp, 8, pp_intra) +
              (par.zero_stage >= 1 ? coll(mach, CommOp::all_reduce, S, 8, shard_intra) : 0.0) +
              (tp * pp > 1 ? coll(mach, CommOp::all_reduce, tp * pp, 8, intra_node(tp * pp, 1, dpn) && world_intra) : 0.0);
  p.total_s = p.pipeline_s + p.dp_exposed_s + p.optimizer_s + p.other_s;

  p.memory = predict_memory(cfg);
  p.memory_total_bytes = mach.runtime_overhead_bytes;
  for (auto v : p.memory) p.memory_total_bytes += static_cast<double>(v);
  return p;
}

std::string describe(const StepPrediction& p) {
  auto ms = [](double s) { return s * 1e3; };
  return log::format(
      "step %.2f ms = fwd %.2f + bwd %.2f + recompute %.2f + tp %.2f + pp %.2f + bubble %.2f + dp exposed %.2f "
      "(of %.2f, %.2f hidden) + optimizer %.2f + other %.2f | M=%d | mem %.1f MiB",
      ms(p.total_s), ms(p.forward_s), ms(p.backward_s), ms(p.recompute_s), ms(p.tp_comm_s), ms(p.pp_comm_s),
      ms(p.bubble_s), ms(p.dp_exposed_s), ms(p.dp_comm_s), ms(p.dp_hidden_s), ms(p.optimizer_s), ms(p.other_s),
      p.num_micro_batches, p.memory_total_bytes / (1024.0 * 1024.0));
}

}  // namespace trident
