#include "train/zero.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/instantiate.hpp"
#include "core/timer.hpp"
#include "kernels/adamw.hpp"
#include "parallel/device_memory.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <limits>
#include <type_traits>

namespace trident {

ZeroOptions ZeroOptions::from(const Config& cfg) {
  ZeroOptions o;
  o.stage = cfg.parallel.zero_stage;
  o.prefetch = cfg.parallel.prefetch;
  o.overlap_reduce = cfg.parallel.overlap_reduce;
  o.half_params = is_half(cfg.train.param_dtype);
  o.half_reduce = is_half(cfg.train.reduce_dtype);
  o.param_format = cfg.train.param_dtype == Precision::fp16 ? HalfFormat::fp16 : HalfFormat::bf16;
  o.reduce_format = cfg.train.reduce_dtype == Precision::fp16 ? HalfFormat::fp16 : HalfFormat::bf16;
  o.offload_nvme = cfg.parallel.offload_optimizer == OffloadKind::nvme;
  o.offload_host = cfg.parallel.offload_optimizer == OffloadKind::host;
  o.offload_params = o.offload_nvme && o.stage == 3 && cfg.parallel.offload_params == OffloadKind::nvme;
  // Test hook: smaller chunks, so that tiny models have several per unit. A whole number of bytes
  // from 64 (a test uses 1000; '1e6' once meant 1-byte chunks and a step of minutes); anything
  // else is named, not ignored.
  const char* c = o.offload_nvme || o.offload_host ? std::getenv("TRIDENT_OFFLOAD_CHUNK_BYTES") : nullptr;
  if (c != nullptr && *c != '\0') {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(c, &end, 10);
    if (*end != '\0' || errno != 0 || v < 64)
      throw ConfigError(std::string("TRIDENT_OFFLOAD_CHUNK_BYTES = '") + c + "' is not a whole number of bytes >= 64");
    o.offload_chunk_bytes = v;
  }
  return o;
}

std::string offload_file_name(const std::string& dir, int world_rank) {
  return dir + "/trident-offload." + std::to_string(world_rank) + ".bin";
}

namespace {

/// True when the live state (MemSpace) can be read by the host in place (CPU builds).
constexpr bool kStateOnHost = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

/// True when the fp32 master weights are a copy of their own (bf16 working params, stages 1-2
/// whose working params are replicated, the working params on disk, or the master on the host
/// while the working params stay on the device), false when the working params are the master.
bool separate_master(const ZeroOptions& opt) {
  return opt.half_params || opt.stage == 1 || opt.stage == 2 || opt.offload_params || opt.offload_host;
}
/// Host memory as an unmanaged host view (copies to and from device views).
template <class T>
HostView1<T> host_view(T* p, std::int64_t n) {
  return HostView1<T>(p, static_cast<size_t>(n));
}
/// offload_params: the parameter records' elements (one record per unit, s_u each) and bytes.
std::int64_t param_elem_bytes(const ZeroOptions& opt, std::int64_t t) { return opt.half_params ? 2 : t; }
std::vector<std::int64_t> param_record_bytes(const std::vector<std::int64_t>& s_u, const ZeroOptions& opt,
                                             std::int64_t t) {
  std::vector<std::int64_t> r;
  if (opt.offload_params)
    for (auto s : s_u) r.push_back(s * param_elem_bytes(opt, t));
  return r;
}
std::int64_t max_param_record(const std::vector<std::int64_t>& s_u, const ZeroOptions& opt, std::int64_t t) {
  std::int64_t m = 0;
  for (auto b : param_record_bytes(s_u, opt, t)) m = std::max(m, OffloadFile::aligned(b));
  return m;
}
/// Kinds of state per offload record: master + both moments, or the moments only.
int offload_kinds(const ZeroOptions& opt) { return separate_master(opt) ? 3 : 2; }

/// The offload records: every unit's local stretch [l_u, l_u + s_u) cut into chunks of at most
/// offload_chunk_bytes of state (all kinds together), in local order.
std::vector<OffloadChunk> offload_chunks(const std::vector<std::int64_t>& s_u, const std::vector<std::int64_t>& l_u,
                                         const ZeroOptions& opt, std::int64_t elem_bytes) {
  const std::int64_t c = std::max<std::int64_t>(1, opt.offload_chunk_bytes / (offload_kinds(opt) * elem_bytes));
  std::vector<OffloadChunk> out;
  for (size_t u = 0; u < s_u.size(); ++u)
    for (std::int64_t b = 0; b < s_u[u] || (b == 0 && s_u[u] == 0); b += c) {
      const std::int64_t n = std::min(c, s_u[u] - b);
      out.push_back(OffloadChunk{static_cast<int>(u), b, n, l_u[u] + b, b + n >= s_u[u]});
      if (n <= 0) break;
    }
  return out;
}
std::int64_t max_chunk(const std::vector<OffloadChunk>& chunks) {
  std::int64_t m = 0;
  for (const auto& c : chunks) m = std::max(m, c.count);
  return m;
}

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
  bool need_slots(const ZeroOptions& opt) const { return opt.stage == 3 || opt.half_params; }
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
  const std::int64_t N = layout.numel(), t = sizeof(T), h = sizeof(std::uint16_t);
  const std::int64_t p_elems = opt.stage == 3 ? g.local_size : N;
  if (!opt.offload_params) {
    add(MemCategory::params, p_elems, opt.half_params ? h : t);
  } else {
    // The shard is on disk: three host records of the largest unit piece (one read, two written
    // behind), plus on a GPU build the device buffer of the 16-bit conversion.
    add(MemCategory::params, 3 * max_param_record(g.s_u, opt, t), 1);
    if (!kStateOnHost && opt.half_params) add(MemCategory::params, g.max_piece, h);  // the 16-bit conversion's target
  }
  if (opt.offload_host) {
    // The host block and the gradient chunk's host staging; on a GPU one chunk of device staging.
    const HostOffloadBytes h = plan_offload_host_split(layout, sched, opt, shard_size, shard_rank, !kStateOnHost);
    add(MemCategory::optimizer, h.host + h.device, 1);
  } else if (!opt.offload_nvme) {
    if (separate_master(opt)) add(MemCategory::optimizer, g.local_size, t);  // own master
    add(MemCategory::optimizer, 2 * g.local_size, t);                       // moments
  } else {
    // Two staging buffers of the largest record (host), plus their device copies on a GPU.
    const std::int64_t rec = offload_kinds(opt) * max_chunk(offload_chunks(g.s_u, g.l_u, opt, t));
    add(MemCategory::optimizer, 2 * OffloadFile::aligned(rec * t), 1);
    if (!kStateOnHost) add(MemCategory::optimizer, 2 * rec, t);
  }
  if (opt.stage < 2) add(MemCategory::grads, N, t);
  if (opt.stage >= 1) add(MemCategory::grads, g.local_size, t);
  if (opt.stage == 1 || opt.stage == 2) {
    add(MemCategory::comm, g.max_padded, opt.half_params ? h : t);  // refresh staging
    if (opt.stage == 1) add(MemCategory::comm, g.max_padded, t);      // reduce-scatter staging
  }
  if (opt.half_reduce && opt.stage < 2) add(MemCategory::comm, g.max_padded + g.max_piece, h);
  if (g.need_slots(opt))
    for (auto sz : g.slot_size) {
      add(MemCategory::gathered, sz, t);
      if (opt.stage == 3 && opt.half_params) add(MemCategory::gathered, sz, h);
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
      if (opt.half_reduce) add(MemCategory::comm, gsz + g.max_piece, h);
    }
  return b;
}

template <class T>
OffloadRecordBytes ZeroEngine<T>::plan_offload_records(const ParamLayout& layout, const GptSchedule& sched,
                                                       const ZeroOptions& opt, int shard_size, int shard_rank) {
  OffloadRecordBytes b;
  if (!opt.offload_nvme) return b;
  const Geometry g(layout, sched, opt, shard_size, shard_rank);
  for (const auto& c : offload_chunks(g.s_u, g.l_u, opt, sizeof(T)))
    b.chunks += OffloadFile::aligned(offload_kinds(opt) * c.count * static_cast<std::int64_t>(sizeof(T)));
  for (auto r : param_record_bytes(g.s_u, opt, sizeof(T))) b.param_records.push_back(OffloadFile::aligned(r));
  return b;
}

template <class T>
std::int64_t ZeroEngine<T>::plan_offload_bytes(const ParamLayout& layout, const GptSchedule& sched,
                                               const ZeroOptions& opt, int shard_size, int shard_rank) {
  const OffloadRecordBytes r = plan_offload_records(layout, sched, opt, shard_size, shard_rank);
  std::int64_t b = r.chunks;
  for (auto p : r.param_records) b += p;
  return b;
}

template <class T>
std::int64_t ZeroEngine<T>::plan_offload_staging_bytes(const ParamLayout& layout, const GptSchedule& sched,
                                                       const ZeroOptions& opt, int shard_size, int shard_rank) {
  if (!opt.offload_nvme) return 0;
  const Geometry g(layout, sched, opt, shard_size, shard_rank);
  return 2 * OffloadFile::aligned(offload_kinds(opt) * max_chunk(offload_chunks(g.s_u, g.l_u, opt, sizeof(T))) *
                                  static_cast<std::int64_t>(sizeof(T))) +
         3 * max_param_record(g.s_u, opt, sizeof(T));
}

template <class T>
HostOffloadBytes ZeroEngine<T>::plan_offload_host_split(const ParamLayout& layout,
                                                                              const GptSchedule& sched,
                                                                              const ZeroOptions& opt, int shard_size,
                                                                              int shard_rank, bool gpu) {
  HostOffloadBytes b;
  if (!opt.offload_host) return b;
  const Geometry g(layout, sched, opt, shard_size, shard_rank);
  const auto t = static_cast<std::int64_t>(sizeof(T));
  const std::vector<OffloadChunk> chunks = offload_chunks(g.s_u, g.l_u, opt, t);
  std::int64_t elems = 0;
  for (const auto& c : chunks) elems += offload_kinds(opt) * c.count;
  b.host = OffloadFile::aligned(elems * t);  // AlignedHostBuffer's rounding
  if (gpu) {
    b.host += OffloadFile::aligned(max_chunk(chunks) * t);         // the gradient chunk's host staging
    b.device = offload_kinds(opt) * max_chunk(chunks) * t;          // one chunk of state on the device
  }
  return b;
}

template <class T>
ZeroEngine<T>::HostPin::~HostPin() {
  unpin_host_memory(p);
}

template <class T>
ZeroEngine<T>::ZeroEngine(const ParamLayout& layout, const GptSchedule& sched, const TrainConfig& train,
                          const ZeroOptions& opt, Communicator& shard_comm, const ZeroComms& comms)
    : layout_(layout), sched_(sched), opt_(opt), shard_(shard_comm), comms_(comms), S_(shard_comm.size()),
      r_(shard_comm.rank()) {
  if (opt.stage < 0 || opt.stage > 3) throw ConfigError("ZeRO stage must be 0..3");
  if ((opt.half_params || opt.half_reduce) && !std::is_same_v<T, float>)
    throw ConfigError("16-bit (bf16, fp16) parameters or reduction need [train] dtype = float");
  const Geometry g(layout, sched, opt, S_, r_);
  s_u_ = g.s_u;
  l_u_ = g.l_u;
  owned_ = g.owned;
  local_size_ = g.local_size;
  slot_of_ = g.slot_of;
  const std::int64_t N = layout.numel();
  const std::int64_t p_elems = opt.stage == 3 ? local_size_ : N;
  if (opt.offload_params && !(opt.offload_nvme && opt.stage == 3))
    throw ConfigError("offload_params needs ZeRO stage 3 and offload_nvme");
  if (opt.offload_host && opt.offload_nvme) throw ConfigError("offload_host and offload_nvme exclude each other");
  if (opt.offload_params) {
    // The shard lives in the offload file's parameter records (below).
  } else if (opt.half_params) {
    params_h_ = TrackedBuffer<std::uint16_t>("trident::zero::params_16bit", p_elems, MemCategory::params);
  } else {
    params_T_ = TrackedBuffer<T>("trident::zero::params", p_elems, MemCategory::params);
  }
  if (separate_master(opt) && (opt.offload_nvme || opt.offload_host)) {
    master_ = nullptr;  // in the offload file or host block
  } else if (separate_master(opt)) {
    master_own_ = TrackedBuffer<T>("trident::zero::master", local_size_, MemCategory::optimizer);
    fill<T>(master_own_.all(), T(0));
    master_ = master_own_.data();
  } else {
    master_ = params_T_.data();  // stage 0 / 3 in the compute type: the working params are the master
  }
  if (!opt.half_params && !opt.offload_params) fill<T>(params_T_.all(), T(0));
  adam_ = std::make_unique<AdamW<T>>(layout, owned_, local_size_, train, !opt.offload_nvme && !opt.offload_host);
  if (opt.offload_host || opt.offload_nvme) {
    off_kinds_ = offload_kinds(opt);
    chunks_ = offload_chunks(s_u_, l_u_, opt, sizeof(T));
  }
  if (opt.offload_host) {
    std::int64_t total = 0;
    for (const auto& c : chunks_) {
      hrec_.push_back(total);
      total += off_kinds_ * c.count;
    }
    const std::int64_t t = sizeof(T), mc = max_chunk(chunks_);
    hstate_ = AlignedHostBuffer(total * t, MemCategory::optimizer);  // zeroed
    if (pin_host_memory(hstate_.data(), static_cast<size_t>(total * t))) hpin_.p = hstate_.data();
    if (!kStateOnHost) {
      hgrad_ = AlignedHostBuffer(mc * t, MemCategory::optimizer);
      if (pin_host_memory(hgrad_.data(), static_cast<size_t>(mc * t))) hgrad_pin_.p = hgrad_.data();
      odev_[0] = TrackedBuffer<T>("trident::zero::offload_stage", off_kinds_ * mc, MemCategory::optimizer);
      if (device_memory_possible() && (hpin_.p == nullptr || hgrad_pin_.p == nullptr) && total > 0)
        log::warn("offload_optimizer = host: the driver refused to page-lock %.1f MiB of host memory (cudaHostRegister; "
                  "see ulimit -l): the copies run from pageable memory, slower than [host] link_gbs assumes",
                  static_cast<double>((total + mc) * t) / (1024.0 * 1024.0));
    }
  }
  if (opt.offload_nvme) {
    std::vector<std::int64_t> records;
    for (const auto& c : chunks_) records.push_back(off_kinds_ * c.count * static_cast<std::int64_t>(sizeof(T)));
    for (auto r : param_record_bytes(s_u_, opt, sizeof(T))) records.push_back(r);  // unit u: chunks_.size() + u
    off_ = std::make_unique<OffloadFile>(opt.offload_file, records);
    if (opt.offload_params) {
      const std::int64_t pr = max_param_record(s_u_, opt, sizeof(T));
      pread_ = AlignedHostBuffer(pr, MemCategory::params);
      for (auto& b : pwrite_) {
        b = AlignedHostBuffer(pr, MemCategory::params);
        std::memset(b.data(), 0, static_cast<size_t>(pr));  // defined bytes (a record's tail is never read)
      }
      if (!kStateOnHost) {
        if (opt.half_params) pdev_h_ = TrackedBuffer<std::uint16_t>("trident::zero::param_record", g.max_piece, MemCategory::params);
      }
    }
    const std::int64_t rec = off_kinds_ * max_chunk(chunks_);
    for (size_t b = 0; b < 2; ++b) {
      obuf_[b] = AlignedHostBuffer(rec * static_cast<std::int64_t>(sizeof(T)), MemCategory::optimizer);
      if (!kStateOnHost) odev_[b] = TrackedBuffer<T>("trident::zero::offload_stage", rec, MemCategory::optimizer);
    }
  }
  if (opt.stage < 2) grads_full_ = TrackedBuffer<T>("trident::zero::grads", N, MemCategory::grads);
  if (opt.stage >= 1) {
    grads_shard_ = TrackedBuffer<T>("trident::zero::grad_shard", local_size_, MemCategory::grads);
    fill<T>(grads_shard_.all(), T(0));
  }
  if (opt.stage == 1 || opt.stage == 2) {
    if (opt.half_params) stage_h_ = TrackedBuffer<std::uint16_t>("trident::zero::refresh_16bit", g.max_padded, MemCategory::comm);
    else stage_T_ = TrackedBuffer<T>("trident::zero::refresh", g.max_padded, MemCategory::comm);
  }
  if (opt.stage == 1) grads_stage_ = TrackedBuffer<T>("trident::zero::rs_stage", g.max_padded, MemCategory::comm);
  if (opt.half_reduce && opt.stage < 2)
    reduce_h_ = TrackedBuffer<std::uint16_t>("trident::zero::reduce_16bit", g.max_padded + g.max_piece, MemCategory::comm);
  if (g.need_slots(opt)) {
    slots_.resize(g.slot_size.size());
    for (size_t s = 0; s < slots_.size(); ++s) {
      slots_[s].compute = TrackedBuffer<T>("trident::zero::slot", g.slot_size[s], MemCategory::gathered);
      if (opt.stage == 3 && opt.half_params)
        slots_[s].staging = TrackedBuffer<std::uint16_t>("trident::zero::slot_16bit", g.slot_size[s], MemCategory::gathered);
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
      if (opt.half_reduce) {
        gslots_[s].send_h = TrackedBuffer<std::uint16_t>("trident::zero::grad_slot_16bit", gsz, MemCategory::comm);
        gslots_[s].recv_h = TrackedBuffer<std::uint16_t>("trident::zero::grad_recv_16bit", g.max_piece, MemCategory::comm);
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
  // The owned piece of unit u (owned_[u], stored at local offset l_u) into `dst`, its first element.
  // Elements [first, first + count) of the piece (default: all of it) into dst, its element `first`.
  auto init_piece = [&](const Piece& p, T* dst, std::int64_t first = 0, std::int64_t count = -1) {
    const std::int64_t lo = p.flat_offset + first, hi = count < 0 ? p.flat_offset + p.count
                                                                  : std::min(p.flat_offset + p.count, lo + count);
    dst -= first;
    for (const TensorSpec& t : layout_.tensors()) {
      const std::int64_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.numel);
      if (a < b)
        init_tensor_range<T>(View1<T>(dst + (a - p.flat_offset), static_cast<size_t>(b - a)), t, a - t.offset,
                             layout_.part().tp_size, layout_.part().tp_rank, seed);
    }
  };
  if (master_ != nullptr) {
    fill<T>(View1<T>(master_, static_cast<size_t>(local_size_)), T(0));
    for (const Piece& p : owned_) init_piece(p, master_ + p.local_offset);
  }
  if (offloaded()) {
    // Zero moments, and the master weights where they are offloaded, written unit by unit.
    stream(false, true, false, [&](const OffloadChunk& c, T* mu, T*, T*, bool ok) {
      if (ok && off_kinds_ == 3) init_piece(owned_[static_cast<size_t>(c.unit)], mu, c.begin, c.count);
    });
  }
  refresh_params();
}

template <class T>
void ZeroEngine<T>::refresh_chunk(int ui, std::int64_t begin, std::int64_t count, const T* mu) {
  const auto u = static_cast<size_t>(ui);
  const std::int64_t s = s_u_[u];
  const auto n = static_cast<size_t>(count);
  if (params_offloaded()) {
    // The unit's parameter record, element `begin` on: written whole by finish_refresh_unit. The
    // buffer's previous write (two units ago) must be done before it is refilled.
    if (begin == 0) wait_kept(pw_ticket_[static_cast<size_t>(pw_idx_)]);
    const std::int64_t pe = param_elem_bytes(opt_, sizeof(T));
    auto* host = static_cast<unsigned char*>(pwrite_[static_cast<size_t>(pw_idx_)].data()) + begin * pe;
    if (opt_.half_params) {
      View1<std::uint16_t> dst = kStateOnHost ? View1<std::uint16_t>(reinterpret_cast<std::uint16_t*>(host), n)
                                              : pdev_h_.slice(0, count);
      convert_to_half<T>(opt_.param_format, dst, View1<const T>(mu, n));
      if (!kStateOnHost)
        Kokkos::deep_copy(host_view(reinterpret_cast<std::uint16_t*>(host), count), dst);
    } else {
      Kokkos::deep_copy(host_view(reinterpret_cast<T*>(host), count), View1<const T>(mu, n));
    }
    Kokkos::fence();
    return;
  }
  if (opt_.stage == 0 || opt_.stage == 3) {
    // Stage 0: l_u = the unit's offset and s_u = its size; stage 3: the shard's piece.
    if (opt_.half_params) convert_to_half<T>(opt_.param_format, params_h_.slice(l_u_[u] + begin, count), View1<const T>(mu, n));
    else if (separate_master(opt_)) Kokkos::deep_copy(params_T_.slice(l_u_[u] + begin, count), View1<const T>(mu, n));
    return;
  }
  // Stages 1-2: this rank's part of the unit's all-gather buffer, sent when the unit is complete.
  if (opt_.half_params)
    convert_to_half<T>(opt_.param_format, View1<std::uint16_t>(stage_h_.data() + r_ * s + begin, n), View1<const T>(mu, n));
  else Kokkos::deep_copy(View1<T>(stage_T_.data() + r_ * s + begin, n), View1<const T>(mu, n));
}

template <class T>
void ZeroEngine<T>::finish_refresh_unit(int ui) {
  if (params_offloaded()) {
    // Written behind (FIFO with the optimizer chunks): stream() drains at its end, refresh_params too.
    pw_ticket_[static_cast<size_t>(pw_idx_)] =
        off_->write_async(static_cast<int>(chunks_.size()) + ui, pwrite_[static_cast<size_t>(pw_idx_)].data());
    pw_idx_ ^= 1;
    return;
  }
  if (opt_.stage == 0 || opt_.stage == 3) return;
  const auto u = static_cast<size_t>(ui);
  const std::int64_t s = s_u_[u], n = layout_.units()[u].numel, off = layout_.units()[u].offset;
  if (opt_.half_params) {
    std::uint16_t* st = stage_h_.data();
    shard_.all_gather(st + r_ * s, st, static_cast<size_t>(s), param_dt());
    Kokkos::deep_copy(params_h_.slice(off, n), View1<std::uint16_t>(st, static_cast<size_t>(n)));
  } else {
    T* st = stage_T_.data();
    shard_.all_gather(st + r_ * s, st, static_cast<size_t>(s), dtype_of<T>());
    Kokkos::deep_copy(params_T_.slice(off, n), View1<T>(st, static_cast<size_t>(n)));
  }
}

template <class T>
void ZeroEngine<T>::refresh_unit(int u, const T* mu) {
  refresh_chunk(u, 0, s_u_[static_cast<size_t>(u)], mu);
  finish_refresh_unit(u);
}

template <class T>
void ZeroEngine<T>::refresh_params() {
  const auto& units = layout_.units();
  if (offloaded() && off_kinds_ == 3) {
    stream(true, false, false, [&](const OffloadChunk& c, T* mu, T*, T*, bool) {
      refresh_chunk(c.unit, c.begin, c.count, mu);
      if (c.last) finish_refresh_unit(c.unit);
    });
    // The parameter records written behind: on disk before any read (FIFO: the last covers all).
    if (params_offloaded()) wait_kept(std::max(pw_ticket_[0], pw_ticket_[1]));
  } else if (opt_.stage == 0) {
    if (opt_.half_params) convert_to_half<T>(opt_.param_format, params_h_.all(), View1<const T>(master_, static_cast<size_t>(local_size_)));
  } else if (opt_.stage == 3) {
    if (opt_.half_params) convert_to_half<T>(opt_.param_format, params_h_.all(), View1<const T>(master_, static_cast<size_t>(local_size_)));
  } else {
    // Stages 1-2: all-gather every unit's pieces into the replicated working params.
    for (size_t u = 0; u < units.size(); ++u) refresh_unit(static_cast<int>(u), master_ + l_u_[u]);
  }
  invalidate_slots();
}

template <class T>
void ZeroEngine<T>::invalidate_slots() {
  if (params_offloaded()) drop_read_ahead();  // read before the update: stale
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
  const std::int64_t piece = s_u_[static_cast<size_t>(u)], local = l_u_[static_cast<size_t>(u)];
  const auto n = static_cast<size_t>(piece);
  const bool from_disk = params_offloaded();
  if (from_disk) {
    // This rank's piece from its parameter record: read ahead while the previous unit computed
    // (ZeRO-Infinity sec. 6.2), or now when the pass went elsewhere.
    if (ahead_unit_ == u) {
      wait_kept(ahead_ticket_);
      ahead_unit_ = -1;
    } else {
      drop_read_ahead();
      param_record_read(u);
    }
  }
  if (opt_.half_params) {
    std::uint16_t* g = s.staging.data();
    View1<std::uint16_t> mine(g + r_ * piece, n);
    if (from_disk)
      Kokkos::deep_copy(mine, host_view(static_cast<const std::uint16_t*>(pread_.data()), piece));
    else Kokkos::deep_copy(mine, params_h_.slice(local, piece));
    s.req = shard_.iall_gather(g + r_ * piece, g, n, param_dt());
  } else {
    T* g = s.compute.data();
    View1<T> mine(g + r_ * piece, n);
    if (from_disk)
      Kokkos::deep_copy(mine, host_view(static_cast<const T*>(pread_.data()), piece));
    else Kokkos::deep_copy(mine, params_T_.slice(local, piece));
    s.req = shard_.iall_gather(g + r_ * piece, g, n, dtype_of<T>());
  }
  s.unit = u;
  s.pending = true;
  s.valid = false;
  if (from_disk) {
    Kokkos::fence();  // the piece left pread_ before the next read may refill it
    read_ahead_after(u);
  }
}

template <class T>
void ZeroEngine<T>::finish_gather(Slot& s) {
  s.req.wait();
  s.pending = false;
  if (opt_.half_params) {
    const std::int64_t n = padded(s.unit);
    convert_from_half<T>(opt_.param_format, s.compute.slice(0, n), View1<const std::uint16_t>(s.staging.data(), static_cast<size_t>(n)));
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
  if (opt_.stage < 3 && !opt_.half_params) return params_T_.data() + layout_.units()[su].offset;
  Slot& s = slots_[static_cast<size_t>(slot_of_[su])];
  if (s.held && s.unit != u) throw Error("ZeroEngine: slot of unit " + layout_.units()[su].name + " is in use");
  if (opt_.stage == 3) {
    if (s.unit != u || (!s.valid && !s.pending)) {
      if (s.pending) finish_gather(s);  // a gather of another unit: complete it before reusing the slot
      start_gather(s, u);
    }
    if (s.pending) finish_gather(s);
  } else if (s.unit != u || !s.valid) {  // 16-bit working params, stages 0-2: convert the unit
    const std::int64_t n = layout_.units()[su].numel;
    convert_from_half<T>(opt_.param_format, s.compute.slice(0, n),
                         View1<const std::uint16_t>(params_h_.data() + layout_.units()[su].offset, static_cast<size_t>(n)));
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
  if (opt_.half_reduce) {
    convert_to_half<T>(opt_.reduce_format, g.send_h.slice(0, padded(u)),
                       View1<const T>(g.buf.data(), static_cast<size_t>(padded(u))));
    g.req = shard_.ireduce_scatter(g.send_h.data(), g.recv_h.data(), static_cast<size_t>(piece), reduce_dt(),
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
  if (opt_.half_reduce) {
    convert_from_half<T>(opt_.reduce_format, g.recv.slice(0, piece),
                         View1<const std::uint16_t>(g.recv_h.data(), static_cast<size_t>(piece)));
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
    if (opt_.half_reduce) {
      for (size_t u = 0; u < units.size(); ++u) {
        View1<T> gu = grads_full_.slice(units[u].offset, units[u].numel);
        View1<std::uint16_t> h = reduce_h_.slice(0, units[u].numel);
        convert_to_half<T>(opt_.reduce_format, h, gu);
        shard_.all_reduce(h.data(), h.data(), h.extent(0), reduce_dt(), ReduceOp::sum);
        convert_from_half<T>(opt_.reduce_format, gu, h);
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
      if (opt_.half_reduce) {
        View1<std::uint16_t> h = reduce_h_.slice(0, s * S_), out = reduce_h_.slice(s * S_, s);
        convert_to_half<T>(opt_.reduce_format, h, st);
        shard_.reduce_scatter(h.data(), out.data(), static_cast<size_t>(s), reduce_dt(), ReduceOp::sum);
        convert_from_half<T>(opt_.reduce_format, grads_shard_.slice(l_u_[u], s), out);
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
  if (opt_.offload_host) {
    step_host(g, lr, grad_scale);
    invalidate_slots();
    return;
  }
  if (!off_) {
    adam_->step(master_, g, lr, grad_scale);
    refresh_params();
    return;
  }
  // Streamed: unit u is updated and its working params refreshed while unit u+1 is read and unit
  // u-1 written (ZeRO-Infinity sec. 6.2). The same elementwise update as above, unit by unit.
  adam_->begin_step();
  stream(true, true, false, [&](const OffloadChunk& c, T* mu, T* m, T* v, bool ok) {
    if (ok) adam_->update(c.local, c.local + c.count, c.local, mu, g + c.local, m, v, lr, grad_scale);
    refresh_chunk(c.unit, c.begin, c.count, mu);
    if (c.last) finish_refresh_unit(c.unit);  // collective at stages 1-2: on every rank, even after a failure
  });
  invalidate_slots();
}

// ---- offload -----------------------------------------------------------------------------

template <class T>
void ZeroEngine<T>::step_host(const T* g, double lr, double grad_scale) {
  // ZeRO-Offload (Ren et al. 2021, sec. 4): per chunk, the gradient down, AdamW on the host where
  // the state is, the fp32 master chunk up to refresh the working params (and at stages 1-2 the
  // unit's all-gather after its last chunk, on every rank).
  adam_->begin_step();
  const auto t = static_cast<std::int64_t>(sizeof(T));
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const OffloadChunk& c = chunks_[i];
    T* mu = static_cast<T*>(hstate_.data()) + hrec_[i];
    const T* gh = g + c.local;
    const T* mdev = mu;
    if (!kStateOnHost) {
      Kokkos::fence();  // the previous chunk's refresh kernels are not copy time
      Timer w;
      Kokkos::deep_copy(host_view(static_cast<T*>(hgrad_.data()), c.count), View1<const T>(g + c.local, static_cast<size_t>(c.count)));
      off_wait_s_ += w.seconds();
      host_written_ += c.count * t;
      gh = static_cast<const T*>(hgrad_.data());
    }
    adam_->update_host(c.local, c.local + c.count, c.local, mu, gh, mu + c.count, mu + 2 * c.count, lr, grad_scale);
    if (!kStateOnHost) {
      Timer w;
      Kokkos::deep_copy(odev_[0].slice(0, c.count), host_view(static_cast<const T*>(mu), c.count));
      off_wait_s_ += w.seconds();
      host_read_ += c.count * t;
      mdev = odev_[0].data();
    }
    refresh_chunk(c.unit, c.begin, c.count, mdev);
    if (c.last) finish_refresh_unit(c.unit);
  }
  Kokkos::fence();
}

template <class T>
void ZeroEngine<T>::stream(bool read, bool write, bool on_host,
                           const std::function<void(const OffloadChunk&, T*, T*, T*, bool)>& f) {
  const int R = static_cast<int>(chunks_.size());
  const auto t = static_cast<std::int64_t>(sizeof(T));
  if (opt_.offload_host) {
    // The host block: the records in place; on a GPU (unless on_host) each copied to the device
    // staging for f and back when written.
    const bool copy = !kStateOnHost && !on_host;
    for (int i = 0; i < R; ++i) {
      const OffloadChunk& c = chunks_[static_cast<size_t>(i)];
      const std::int64_t n = off_kinds_ * c.count;
      T* rec = static_cast<T*>(hstate_.data()) + hrec_[static_cast<size_t>(i)];
      if (!read) std::memset(rec, 0, static_cast<size_t>(n * t));
      T* base = rec;
      if (copy) {
        Kokkos::deep_copy(odev_[0].slice(0, n), host_view(rec, n));
        if (read) host_read_ += n * t;
        base = odev_[0].data();
      }
      f(c, base, base + c.count, base + 2 * c.count, true);  // [master | exp_avg | exp_avg_sq]: always 3 kinds here
      if (copy && write) {
        Kokkos::deep_copy(host_view(rec, n), odev_[0].slice(0, n));
        host_written_ += n * t;
      }
    }
    Kokkos::fence();
    return;
  }
  std::array<OffloadFile::Ticket, 2> rt{0, 0}, wt{0, 0};
  auto wait = [&](OffloadFile::Ticket tk) {
    wait_kept(tk);
    return off_error_.empty();
  };
  auto submit_read = [&](int i) {
    if (read) rt[static_cast<size_t>(i % 2)] = off_->read_async(i, obuf_[static_cast<size_t>(i % 2)].data());
  };
  submit_read(0);
  if (R > 1) submit_read(1);
  for (int i = 0; i < R; ++i) {
    const OffloadChunk& c = chunks_[static_cast<size_t>(i)];
    const auto b = static_cast<size_t>(i % 2);
    const std::int64_t n = off_kinds_ * c.count;
    T* host = static_cast<T*>(obuf_[b].data());
    bool ok;
    if (read) {
      ok = wait(rt[b]);
    } else {
      ok = wait(wt[b]);  // the buffer's previous write-behind must be done before it is refilled
      std::memset(host, 0, static_cast<size_t>(n * t));
    }
    T* base = host;
    if (!kStateOnHost && !on_host) {
      Kokkos::deep_copy(odev_[b].slice(0, n), host_view(host, n));
      base = odev_[b].data();
    }
    T* mu = off_kinds_ == 3 ? base : (on_host || master_ == nullptr ? nullptr : master_ + c.local);
    T* m = base + (off_kinds_ == 3 ? c.count : 0);
    f(c, mu, m, m + c.count, ok);
    if (write && ok) {
      if (!kStateOnHost && !on_host)
        Kokkos::deep_copy(host_view(host, n), odev_[b].slice(0, n));
      Kokkos::fence();
      wt[b] = off_->write_async(i, host);
    }
    if (i + 2 < R) submit_read(i + 2);  // FIFO: queued after this buffer's write
  }
  if (write) {
    Timer w;
    try {
      off_->drain();  // a snapshot or the next step reads what was written
    } catch (const Error& e) {
      if (off_error_.empty()) off_error_ = e.what();
    }
    off_wait_s_ += w.seconds();
  }
}

template <class T>
void ZeroEngine<T>::read_ahead_after(int u) {
  if (!opt_.prefetch) return;
  for (size_t i = cursor_; i < order_.size(); ++i) {
    const int v = order_[i];
    if (v == u) continue;
    const Slot& s = slots_[static_cast<size_t>(slot_of_[static_cast<size_t>(v)])];
    if (s.unit == v && (s.valid || s.pending)) continue;  // still gathered (the tied embedding): no read
    ahead_unit_ = v;
    ahead_ticket_ = off_->read_async(static_cast<int>(chunks_.size()) + ahead_unit_, pread_.data());
    return;
  }
}

template <class T>
void ZeroEngine<T>::drop_read_ahead() {
  if (ahead_unit_ < 0) return;
  wait_kept(ahead_ticket_);
  ahead_unit_ = -1;
}

template <class T>
void ZeroEngine<T>::wait_kept(OffloadFile::Ticket t) {
  if (t == 0) return;
  Timer w;
  try {
    off_->wait(t);
  } catch (const Error& e) {
    if (off_error_.empty()) off_error_ = e.what();
  }
  off_wait_s_ += w.seconds();
}

template <class T>
void ZeroEngine<T>::param_record_read(int u) {
  wait_kept(off_->read_async(static_cast<int>(chunks_.size()) + u, pread_.data()));
}

template <class T>
void ZeroEngine<T>::write_units_host(const std::function<void(int, std::int64_t, std::int64_t, T*, T*, T*)>& fill_chunk) {
  stream(false, true, true, [&](const OffloadChunk& c, T* mu, T* m, T* v, bool ok) {
    if (ok) fill_chunk(c.unit, c.begin, c.count, mu, m, v);
  });
}

template <class T>
void ZeroEngine<T>::read_state(int k, std::int64_t local_offset, std::int64_t count, T* dst) const {
  if (!kind_offloaded(k)) {
    const T* src = k == 0 ? master_ : k == 1 ? adam_->exp_avg().data() : adam_->exp_avg_sq().data();
    Kokkos::deep_copy(host_view(dst, count),
                      View1<const T>(src + local_offset, static_cast<size_t>(count)));
    return;
  }
  const int slot = off_kinds_ == 3 ? k : k - 1;
  const auto t = static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t pos = local_offset; pos < local_offset + count;) {
    // The chunk holding local offset pos: chunks are in local order.
    const auto it = std::upper_bound(chunks_.begin(), chunks_.end(), pos,
                                     [](std::int64_t x, const OffloadChunk& c) { return x < c.local; });
    if (it == chunks_.begin()) throw Error("ZeroEngine::read_state: offset before the local arrays");
    const OffloadChunk& c = *(it - 1);
    const std::int64_t n = std::min(local_offset + count, c.local + c.count) - pos;
    if (n <= 0) throw Error("ZeroEngine::read_state: offset beyond the local arrays");
    if (opt_.offload_host) {
      const T* rec = static_cast<const T*>(hstate_.data()) + hrec_[static_cast<size_t>(it - 1 - chunks_.begin())];
      std::memcpy(dst + (pos - local_offset), rec + slot * c.count + (pos - c.local), static_cast<size_t>(n * t));
      pos += n;
      continue;
    }
    off_->read_bytes(off_->record_offset(static_cast<int>(it - 1 - chunks_.begin())) + (slot * c.count + (pos - c.local)) * t,
                     n * t, dst + (pos - local_offset));
    pos += n;
  }
}

template <class T>
void ZeroEngine<T>::check_offload() const {
  if (!off_error_.empty()) throw IoError(off_error_);
}

template <class T>
OffloadCounters ZeroEngine<T>::offload_counters() const {
  OffloadCounters c;
  if (opt_.offload_host) {
    c.bytes_read = host_read_;
    c.bytes_written = host_written_;
    c.wait_seconds = off_wait_s_;
    return c;
  }
  if (!off_) return c;
  const OffloadStats s = off_->stats();
  c.bytes_read = s.bytes_read;
  c.bytes_written = s.bytes_written;
  c.wait_seconds = off_wait_s_;
  return c;
}

template <class T>
void ZeroEngine<T>::truncate_offload_for_test() {
  if (off_) off_->truncate_for_test();
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
