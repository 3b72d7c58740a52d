#include "train/zero.hpp"

#include "core/error.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/instantiate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace trident {

ZeroOptions ZeroOptions::from(const Config& cfg) {
  ZeroOptions o;
  o.stage = cfg.parallel.zero_stage;
  o.prefetch = cfg.parallel.prefetch;
  o.overlap_reduce = cfg.parallel.overlap_reduce;
  o.bf16_params = cfg.train.param_dtype == Precision::bf16;
  o.bf16_reduce = cfg.train.reduce_dtype == Precision::bf16;
  return o;
}

namespace {

/// Everything about a rank's buffers that follows from the layout and options alone: one place
/// for the constructor and for plan() (the --dry-run prediction), so they cannot disagree.
struct Geometry {
  std::vector<std::int64_t> s_u, l_u;  // piece size and local offset per unit
  std::vector<Piece> owned;
  std::int64_t local_size = 0;
  std::vector<int> slot_of;            // unit -> slot
  std::vector<std::int64_t> slot_size; // elements per slot (unsharded, padded at stage 3)
  std::int64_t max_padded = 0, max_piece = 0, max_unit = 0;

  Geometry(const ParamLayout& layout, const GptSchedule& sched, const ZeroOptions& opt, int S, int r) {
    const auto& units = layout.units();
    const int U = static_cast<int>(units.size());
    for (int u = 0; u < U; ++u) {
      const std::int64_t n = units[static_cast<size_t>(u)].numel;
      const std::int64_t s = opt.stage == 0 ? n : (n + S - 1) / S;
      const std::int64_t l = opt.stage == 0 ? units[static_cast<size_t>(u)].offset : local_size;
      s_u.push_back(s);
      l_u.push_back(l);
      if (opt.stage == 0) {
        owned.push_back({units[static_cast<size_t>(u)].offset, n, l});
        local_size = std::max(local_size, l + n);
      } else {
        const std::int64_t a = std::min(n, s * r), b = std::min(n, s * (r + 1));
        owned.push_back({units[static_cast<size_t>(u)].offset + a, b - a, l});
        local_size += s;
      }
      max_padded = std::max(max_padded, opt.stage == 0 ? n : s * S);
      max_piece = std::max(max_piece, s);
      max_unit = std::max(max_unit, n);
    }
    // Slots: one for each unit of the embedding and head modules, two alternating for block units.
    slot_of.assign(static_cast<size_t>(U), 0);
    const auto& special = sched.special_units;
    int k = 0;
    for (int u = 0; u < U; ++u) {
      auto it = std::find(special.begin(), special.end(), u);
      slot_of[static_cast<size_t>(u)] =
          it != special.end() ? static_cast<int>(it - special.begin()) : static_cast<int>(special.size()) + (k++ % 2);
    }
    slot_size.assign(special.size() + 2, 0);
    for (int u = 0; u < U; ++u) {
      const std::int64_t sz = opt.stage == 3 ? s_u[static_cast<size_t>(u)] * S : units[static_cast<size_t>(u)].numel;
      auto& cur = slot_size[static_cast<size_t>(slot_of[static_cast<size_t>(u)])];
      cur = std::max(cur, sz);
    }
  }
  bool need_slots(const ZeroOptions& opt) const { return opt.stage == 3 || opt.bf16_params; }
};

}  // namespace

template <class T>
MemoryBytes ZeroEngine<T>::plan(const ParamLayout& layout, const GptSchedule& sched, const ZeroOptions& opt,
                                int shard_size, int shard_rank) {
  const Geometry g(layout, sched, opt, shard_size, shard_rank);
  MemoryBytes b{};
  auto add = [&b](MemCategory c, std::int64_t elements, std::int64_t elem_bytes) {
    b[static_cast<size_t>(c)] += elements * elem_bytes;
  };
  const std::int64_t N = layout.numel(), t = sizeof(T), h = sizeof(bf16_t);
  const std::int64_t p_elems = opt.stage == 3 ? g.local_size : N;
  add(MemCategory::params, p_elems, opt.bf16_params ? h : t);
  if (opt.bf16_params || opt.stage == 1 || opt.stage == 2) add(MemCategory::optimizer, g.local_size, t);  // own master
  add(MemCategory::optimizer, 2 * g.local_size, t);                                                   // moments
  if (opt.stage < 2) add(MemCategory::grads, N, t);
  if (opt.stage >= 1) add(MemCategory::grads, g.local_size, t);
  if (opt.stage == 1 || opt.stage == 2) {
    add(MemCategory::comm, g.max_padded, opt.bf16_params ? h : t);  // refresh staging
    if (opt.stage == 1) add(MemCategory::comm, g.max_padded, t);      // reduce-scatter staging
  }
  if (opt.bf16_reduce && opt.stage < 2) add(MemCategory::comm, g.max_padded + g.max_piece, h);
  if (g.need_slots(opt))
    for (auto sz : g.slot_size) {
      add(MemCategory::gathered, sz, t);
      if (opt.stage == 3 && opt.bf16_params) add(MemCategory::gathered, sz, h);
    }
  if (opt.stage >= 2)
    for (size_t s = 0; s < g.slot_size.size(); ++s) {
      const std::int64_t sz = opt.stage == 3 ? g.slot_size[s] : 0;
      // Stage 2 slots hold unsharded gradients: sized like the unit, padded to S pieces.
      std::int64_t gsz = sz;
      if (opt.stage == 2)
        for (size_t u = 0; u < g.slot_of.size(); ++u)
          if (static_cast<size_t>(g.slot_of[u]) == s) gsz = std::max(gsz, g.s_u[u] * shard_size);
      add(MemCategory::comm, gsz, t);
      add(MemCategory::comm, g.max_piece, t);
      if (opt.bf16_reduce) add(MemCategory::comm, gsz + g.max_piece, h);
    }
  return b;
}

template <class T>
ZeroEngine<T>::ZeroEngine(const ParamLayout& layout, const GptSchedule& sched, const TrainConfig& train,
                          const ZeroOptions& opt, Communicator& shard_comm, const ZeroComms& comms)
    : layout_(layout), sched_(sched), opt_(opt), shard_(shard_comm), comms_(comms), S_(shard_comm.size()),
      r_(shard_comm.rank()) {
  if (opt.stage < 0 || opt.stage > 3) throw ConfigError("ZeRO stage must be 0..3");
  if ((opt.bf16_params || opt.bf16_reduce) && !std::is_same_v<T, float>)
    throw ConfigError("bf16 parameters or reduction need [train] dtype = float");
  const Geometry g(layout, sched, opt, S_, r_);
  s_u_ = g.s_u;
  l_u_ = g.l_u;
  owned_ = g.owned;
  local_size_ = g.local_size;
  slot_of_ = g.slot_of;
  const std::int64_t N = layout.numel();
  const std::int64_t p_elems = opt.stage == 3 ? local_size_ : N;
  if (opt.bf16_params) params_h_ = TrackedBuffer<bf16_t>("trident::zero::params_bf16", p_elems, MemCategory::params);
  else params_T_ = TrackedBuffer<T>("trident::zero::params", p_elems, MemCategory::params);
  if (opt.bf16_params || opt.stage == 1 || opt.stage == 2) {
    master_own_ = TrackedBuffer<T>("trident::zero::master", local_size_, MemCategory::optimizer);
    fill<T>(master_own_.all(), T(0));
    master_ = master_own_.data();
  } else {
    master_ = params_T_.data();  // stage 0 / 3 in the compute type: the working params are the master
  }
  if (!opt.bf16_params) fill<T>(params_T_.all(), T(0));
  adam_ = std::make_unique<AdamW<T>>(layout, owned_, local_size_, train);
  if (opt.stage < 2) grads_full_ = TrackedBuffer<T>("trident::zero::grads", N, MemCategory::grads);
  if (opt.stage >= 1) {
    grads_shard_ = TrackedBuffer<T>("trident::zero::grad_shard", local_size_, MemCategory::grads);
    fill<T>(grads_shard_.all(), T(0));
  }
  if (opt.stage == 1 || opt.stage == 2) {
    if (opt.bf16_params) stage_h_ = TrackedBuffer<bf16_t>("trident::zero::refresh_bf16", g.max_padded, MemCategory::comm);
    else stage_T_ = TrackedBuffer<T>("trident::zero::refresh", g.max_padded, MemCategory::comm);
  }
  if (opt.stage == 1) grads_stage_ = TrackedBuffer<T>("trident::zero::rs_stage", g.max_padded, MemCategory::comm);
  if (opt.bf16_reduce && opt.stage < 2)
    reduce_h_ = TrackedBuffer<bf16_t>("trident::zero::reduce_bf16", g.max_padded + g.max_piece, MemCategory::comm);
  if (g.need_slots(opt)) {
    slots_.resize(g.slot_size.size());
    for (size_t s = 0; s < slots_.size(); ++s) {
      slots_[s].compute = TrackedBuffer<T>("trident::zero::slot", g.slot_size[s], MemCategory::gathered);
      if (opt.stage == 3 && opt.bf16_params)
        slots_[s].staging = TrackedBuffer<bf16_t>("trident::zero::slot_bf16", g.slot_size[s], MemCategory::gathered);
    }
  }
  if (opt.stage >= 2) {
    gslots_.resize(g.slot_size.size());
    for (size_t s = 0; s < gslots_.size(); ++s) {
      std::int64_t gsz = opt.stage == 3 ? g.slot_size[s] : 0;
      if (opt.stage == 2)
        for (size_t u = 0; u < slot_of_.size(); ++u)
          if (static_cast<size_t>(slot_of_[u]) == s) gsz = std::max(gsz, s_u_[u] * S_);
      gslots_[s].buf = TrackedBuffer<T>("trident::zero::grad_slot", gsz, MemCategory::comm);
      gslots_[s].recv = TrackedBuffer<T>("trident::zero::grad_recv", g.max_piece, MemCategory::comm);
      if (opt.bf16_reduce) {
        gslots_[s].send_h = TrackedBuffer<bf16_t>("trident::zero::grad_slot_bf16", gsz, MemCategory::comm);
        gslots_[s].recv_h = TrackedBuffer<bf16_t>("trident::zero::grad_recv_bf16", g.max_piece, MemCategory::comm);
      }
    }
  }
  gslot_in_use_.assign(layout.units().size(), -1);
  tied_unit_ = comms.tied != nullptr && comms.tied->size() > 1 ? layout.tied_unit() : -1;
  for (const Piece& p : owned_)
    for (const TensorSpec& t : layout.tensors()) {
      if (!t.canonical) continue;
      const std::int64_t a = std::max(p.flat_offset, t.offset), b = std::min(p.flat_offset + p.count, t.offset + t.valid);
      if (a < b) norm_pieces_.push_back({a, b - a, p.local_offset + (a - p.flat_offset)});
    }
}

template <class T>
void ZeroEngine<T>::initialize(std::uint64_t seed) {
  fill<T>(View1<T>(master_, static_cast<size_t>(local_size_)), T(0));
  for (const Piece& p : owned_)
    for (const TensorSpec& t : layout_.tensors()) {
      const std::int64_t a = std::max(p.flat_offset, t.offset), b = std::min(p.flat_offset + p.count, t.offset + t.numel);
      if (a < b)
        init_tensor_range<T>(View1<T>(master_ + p.local_offset + (a - p.flat_offset), static_cast<size_t>(b - a)), t,
                             a - t.offset, layout_.part().tp_size, layout_.part().tp_rank, seed);
    }
  refresh_params();
}

template <class T>
void ZeroEngine<T>::refresh_params() {
  const auto& units = layout_.units();
  if (opt_.stage == 0) {
    if (opt_.bf16_params) convert_to_bf16<T>(params_h_.all(), View1<const T>(master_, static_cast<size_t>(local_size_)));
  } else if (opt_.stage == 3) {
    if (opt_.bf16_params) convert_to_bf16<T>(params_h_.all(), View1<const T>(master_, static_cast<size_t>(local_size_)));
  } else {
    // Stages 1-2: all-gather every unit's pieces into the replicated working params.
    for (size_t u = 0; u < units.size(); ++u) {
      const std::int64_t s = s_u_[u], n = units[u].numel, off = units[u].offset;
      View1<const T> mine(master_ + l_u_[u], static_cast<size_t>(s));
      if (opt_.bf16_params) {
        bf16_t* st = stage_h_.data();
        convert_to_bf16<T>(View1<bf16_t>(st + r_ * s, static_cast<size_t>(s)), mine);
        shard_.all_gather(st + r_ * s, st, static_cast<size_t>(s), DataType::bf16);
        Kokkos::deep_copy(params_h_.slice(off, n), View1<bf16_t>(st, static_cast<size_t>(n)));
      } else {
        T* st = stage_T_.data();
        Kokkos::deep_copy(View1<T>(st + r_ * s, static_cast<size_t>(s)), mine);
        shard_.all_gather(st + r_ * s, st, static_cast<size_t>(s), dtype_of<T>());
        Kokkos::deep_copy(params_T_.slice(off, n), View1<T>(st, static_cast<size_t>(n)));
      }
    }
  }
  invalidate_slots();
}

template <class T>
void ZeroEngine<T>::invalidate_slots() {
  for (Slot& s : slots_) {
    if (s.pending) s.req.wait();
    s.pending = false;
    s.valid = false;
    s.held = false;
    s.unit = -1;
  }
}

template <class T>
void ZeroEngine<T>::begin_step() {
  if (opt_.stage < 2) fill<T>(grads_full_.all(), T(0));
  if (opt_.stage >= 1) fill<T>(grads_shard_.all(), T(0));
}

// ---- parameters --------------------------------------------------------------------------

template <class T>
void ZeroEngine<T>::begin_pass(Pass, const std::vector<int>& order) {
  order_ = order;
  cursor_ = 0;
}

template <class T>
void ZeroEngine<T>::start_gather(Slot& s, int u) {
  const std::int64_t piece = s_u_[static_cast<size_t>(u)];
  if (opt_.bf16_params) {
    bf16_t* g = s.staging.data();
    Kokkos::deep_copy(View1<bf16_t>(g + r_ * piece, static_cast<size_t>(piece)), params_h_.slice(l_u_[static_cast<size_t>(u)], piece));
    s.req = shard_.iall_gather(g + r_ * piece, g, static_cast<size_t>(piece), DataType::bf16);
  } else {
    T* g = s.compute.data();
    Kokkos::deep_copy(View1<T>(g + r_ * piece, static_cast<size_t>(piece)), params_T_.slice(l_u_[static_cast<size_t>(u)], piece));
    s.req = shard_.iall_gather(g + r_ * piece, g, static_cast<size_t>(piece), dtype_of<T>());
  }
  s.unit = u;
  s.pending = true;
  s.valid = false;
}

template <class T>
void ZeroEngine<T>::finish_gather(Slot& s) {
  s.req.wait();
  s.pending = false;
  if (opt_.bf16_params) {
    const std::int64_t n = padded(s.unit);
    convert_from_bf16<T>(s.compute.slice(0, n), View1<const bf16_t>(s.staging.data(), static_cast<size_t>(n)));
  }
  s.valid = true;
}

template <class T>
void ZeroEngine<T>::try_prefetch() {
  if (opt_.stage != 3 || !opt_.prefetch || cursor_ >= order_.size()) return;
  const int v = order_[cursor_];
  Slot& s = slots_[static_cast<size_t>(slot_of_[static_cast<size_t>(v)])];
  if (s.unit == v && (s.valid || s.pending)) return;
  if (s.held || s.pending) return;  // the slot is busy: retried when it is released
  start_gather(s, v);
}

template <class T>
const T* ZeroEngine<T>::acquire(int u) {
  const auto su = static_cast<size_t>(u);
  for (size_t i = cursor_; i < order_.size(); ++i)
    if (order_[i] == u) {
      cursor_ = i + 1;
      break;
    }
  if (opt_.stage < 3 && !opt_.bf16_params) return params_T_.data() + layout_.units()[su].offset;
  Slot& s = slots_[static_cast<size_t>(slot_of_[su])];
  if (s.held && s.unit != u) throw Error("ZeroEngine: slot of unit " + layout_.units()[su].name + " is in use");
  if (opt_.stage == 3) {
    if (s.unit != u || (!s.valid && !s.pending)) {
      if (s.pending) finish_gather(s);  // a gather of another unit: complete it before reusing the slot
      start_gather(s, u);
    }
    if (s.pending) finish_gather(s);
  } else if (s.unit != u || !s.valid) {  // bf16 working params, stages 0-2: convert the unit
    const std::int64_t n = layout_.units()[su].numel;
    convert_from_bf16<T>(s.compute.slice(0, n), View1<const bf16_t>(params_h_.data() + layout_.units()[su].offset,
                                                                      static_cast<size_t>(n)));
    s.unit = u;
    s.valid = true;
  }
  s.held = true;
  try_prefetch();
  return s.compute.data();
}

template <class T>
void ZeroEngine<T>::release(int u) {
  if (slots_.empty()) return;
  Slot& s = slots_[static_cast<size_t>(slot_of_[static_cast<size_t>(u)])];
  if (s.unit == u) s.held = false;
  try_prefetch();
}

// ---- gradients ---------------------------------------------------------------------------

template <class T>
T* ZeroEngine<T>::grads(int u) {
  const auto su = static_cast<size_t>(u);
  if (opt_.stage < 2) return grads_full_.data() + layout_.units()[su].offset;
  if (gslot_in_use_[su] >= 0) return gslots_[static_cast<size_t>(gslot_in_use_[su])].buf.data();
  const int gs = slot_of_[su];
  GradSlot& g = gslots_[static_cast<size_t>(gs)];
  if (g.pending) complete_reduce(g);
  fill<T>(g.buf.slice(0, padded(u)), T(0));
  g.unit = u;
  gslot_in_use_[su] = gs;
  return g.buf.data();
}

template <class T>
void ZeroEngine<T>::grads_done(int u) {
  const auto su = static_cast<size_t>(u);
  if (opt_.stage < 2) return;
  GradSlot& g = gslots_[static_cast<size_t>(gslot_in_use_[su])];
  gslot_in_use_[su] = -1;
  const std::int64_t piece = s_u_[su];
  if (opt_.bf16_reduce) {
    convert_to_bf16<T>(g.send_h.slice(0, padded(u)), View1<const T>(g.buf.data(), static_cast<size_t>(padded(u))));
    g.req = shard_.ireduce_scatter(g.send_h.data(), g.recv_h.data(), static_cast<size_t>(piece), DataType::bf16,
                                   ReduceOp::sum);
  } else {
    g.req = shard_.ireduce_scatter(g.buf.data(), g.recv.data(), static_cast<size_t>(piece), dtype_of<T>(), ReduceOp::sum);
  }
  g.pending = true;
  if (!opt_.overlap_reduce) complete_reduce(g);
}

template <class T>
void ZeroEngine<T>::complete_reduce(GradSlot& g) {
  g.req.wait();
  g.pending = false;
  const auto su = static_cast<size_t>(g.unit);
  const std::int64_t piece = s_u_[su];
  View1<T> dst = grads_shard_.slice(l_u_[su], piece);
  if (opt_.bf16_reduce) {
    convert_from_bf16<T>(g.recv.slice(0, piece), View1<const bf16_t>(g.recv_h.data(), static_cast<size_t>(piece)));
  }
  accumulate<T>(dst, View1<const T>(g.recv.data(), static_cast<size_t>(piece)));
}

template <class T>
void ZeroEngine<T>::progress() {
  for (Slot& s : slots_)
    if (s.pending) s.req.test();
  for (GradSlot& g : gslots_)
    if (g.pending) g.req.test();
}

template <class T>
void ZeroEngine<T>::end_micro_batch() {
  for (GradSlot& g : gslots_)
    if (g.pending) complete_reduce(g);
}

template <class T>
void ZeroEngine<T>::finish_gradients() {
  const auto& units = layout_.units();
  if (opt_.stage == 0) {
    if (opt_.bf16_reduce) {
      for (size_t u = 0; u < units.size(); ++u) {
        View1<T> gu = grads_full_.slice(units[u].offset, units[u].numel);
        View1<bf16_t> h = reduce_h_.slice(0, units[u].numel);
        convert_to_bf16<T>(h, gu);
        shard_.all_reduce(h.data(), h.data(), h.extent(0), DataType::bf16, ReduceOp::sum);
        convert_from_bf16<T>(gu, h);
      }
    } else {
      shard_.all_reduce(grads_full_.data(), static_cast<size_t>(grads_full_.size()));
    }
  } else if (opt_.stage == 1) {
    for (size_t u = 0; u < units.size(); ++u) {
      const std::int64_t s = s_u_[u], n = units[u].numel;
      View1<T> st = grads_stage_.slice(0, s * S_);
      fill<T>(st, T(0));
      Kokkos::deep_copy(View1<T>(st.data(), static_cast<size_t>(n)), grads_full_.slice(units[u].offset, n));
      if (opt_.bf16_reduce) {
        View1<bf16_t> h = reduce_h_.slice(0, s * S_), out = reduce_h_.slice(s * S_, s);
        convert_to_bf16<T>(h, st);
        shard_.reduce_scatter(h.data(), out.data(), static_cast<size_t>(s), DataType::bf16, ReduceOp::sum);
        convert_from_bf16<T>(grads_shard_.slice(l_u_[u], s), out);
      } else {
        shard_.reduce_scatter(st.data(), grads_shard_.data() + l_u_[u], static_cast<size_t>(s), dtype_of<T>(),
                              ReduceOp::sum);
      }
    }
  }
  // HSDP: every replica group reduced its own micro-batches; sum the shards across groups.
  if (opt_.stage >= 1 && comms_.replicate != nullptr && comms_.replicate->size() > 1)
    comms_.replicate->all_reduce(grads_shard_.data(), static_cast<size_t>(local_size_));
  // Tied embedding: the first stage's wte unit and the last stage's copy have equal pieces; the
  // gradient of the shared weight is the sum of both stages' contributions.
  if (tied_unit_ >= 0) {
    const auto u = static_cast<size_t>(tied_unit_);
    if (opt_.stage == 0)
      comms_.tied->all_reduce(grads_full_.data() + layout_.units()[u].offset, static_cast<size_t>(layout_.units()[u].numel));
    else
      comms_.tied->all_reduce(grads_shard_.data() + l_u_[u], static_cast<size_t>(s_u_[u]));
  }
}

template <class T>
double ZeroEngine<T>::grad_norm() {
  const T* g = opt_.stage == 0 ? grads_full_.data() : grads_shard_.data();
  double s = 0.0;
  for (const Piece& p : norm_pieces_) s += sum_squares<T>(View1<const T>(g + p.local_offset, static_cast<size_t>(p.count)));
  if (opt_.stage >= 1) s = shard_.all_reduce_value(s);
  if (comms_.model != nullptr && comms_.model->size() > 1) s = comms_.model->all_reduce_value(s);
  return std::sqrt(s);
}

template <class T>
void ZeroEngine<T>::poison_gradient() {
  if (norm_pieces_.empty()) return;
  T* g = opt_.stage == 0 ? grads_full_.data() : grads_shard_.data();
  Kokkos::deep_copy(View1<T>(g + norm_pieces_.front().local_offset, 1), std::numeric_limits<T>::quiet_NaN());
}

template <class T>
void ZeroEngine<T>::step(double lr, double grad_scale) {
  const T* g = opt_.stage == 0 ? grads_full_.data() : grads_shard_.data();
  adam_->step(master_, g, lr, grad_scale);
  refresh_params();
}

template <class T>
std::vector<Piece> ZeroEngine<T>::plan_checkpoint_pieces(const ParamLayout& layout, const GptSchedule& sched,
                                                         const ZeroOptions& opt, int shard_size, int shard_rank,
                                                         int dp_size, int dp_rank, bool first_replica) {
  std::vector<Piece> out;
  if (opt.stage == 0) {
    for (const UnitSpec& u : layout.units()) {
      const std::int64_t piece = (u.numel + dp_size - 1) / dp_size;
      const std::int64_t a = std::min(u.numel, piece * dp_rank), b = std::min(u.numel, piece * (dp_rank + 1));
      out.push_back({u.offset + a, b - a, u.offset + a});
    }
  } else if (first_replica) {
    out = Geometry(layout, sched, opt, shard_size, shard_rank).owned;
  }
  return out;
}

template <class T>
std::vector<Piece> ZeroEngine<T>::checkpoint_pieces(int dp_size, int dp_rank) const {
  return plan_checkpoint_pieces(layout_, sched_, opt_, S_, r_, dp_size, dp_rank,
                                comms_.replicate == nullptr || comms_.replicate->rank() == 0);
}

template class ZeroEngine<float>;
template class ZeroEngine<double>;

}  // namespace trident
