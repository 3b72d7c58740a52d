#include "model/param_layout.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kernels/elementwise.hpp"
#include "model/family.hpp"

#include <algorithm>
#include <cmath>

namespace trident {

ModelPart ModelPart::make(const ModelConfig& m, const ParallelConfig& p, int tp_rank, int pp_rank) {
  ModelPart part;
  part.tp_size = p.tp;
  part.tp_rank = tp_rank;
  part.pp_size = p.pp;
  part.pp_rank = pp_rank;
  const std::vector<int> counts = stage_layers(m, p);
  for (int s = 0; s < pp_rank; ++s) part.first_layer += counts[static_cast<size_t>(s)];
  part.n_layers = counts[static_cast<size_t>(pp_rank)];
  return part;
}

void ParamLayout::begin_unit(const std::string& name, bool alone) {
  current_alone_ = alone;
  UnitSpec u;
  u.name = name;
  u.offset = numel_;
  u.first_tensor = static_cast<int>(tensors_.size());
  units_.push_back(u);
}

void ParamLayout::begin_block(int layer, int unit_blocks, const std::string& unit_prefix) {
  const int first = part_.first_layer, end = part_.first_layer + part_.n_layers;
  if (unit_blocks > 0 && (layer - first) % unit_blocks == 0) {
    const int last = std::min(end, layer + unit_blocks) - 1;
    begin_unit(unit_prefix + std::to_string(layer) + (last > layer ? "-" + std::to_string(last) : ""));
  } else if (unit_blocks == 0 && (units_.empty() || current_alone_)) {
    begin_unit("model");
  }
  block_first_.push_back(static_cast<int>(tensors_.size()));
}

void ParamLayout::begin_head(int unit_blocks) {
  if (unit_blocks > 0 || units_.empty() || current_alone_) begin_unit(unit_blocks > 0 ? "head" : "model");
}

void ParamLayout::add(const std::string& name, std::vector<std::int64_t> shape, bool decay, InitKind init, double std_,
                      int split_dim, int split_groups, bool tied_copy) {
  TensorSpec t;
  t.name = name;
  t.global_shape = std::move(shape);
  t.shape = tp_partition_shape(t.global_shape, split_dim, split_groups, part_.tp_size);
  t.numel = 1;
  for (auto d : t.shape) t.numel *= d;
  t.valid = tp_partition_numel(t.global_shape, split_dim, split_groups, part_.tp_size, part_.tp_rank);
  t.offset = numel_;
  t.unit = static_cast<int>(units_.size()) - 1;
  t.decay = decay;
  t.init = init;
  t.init_std = std_;
  t.split_dim = split_dim;
  t.split_groups = split_groups;
  t.tied_copy = tied_copy;
  t.canonical = !tied_copy && (split_dim >= 0 || part_.tp_rank == 0);
  numel_ += t.numel;
  UnitSpec& u = units_.back();
  u.numel += t.numel;
  u.n_tensors += 1;
  tensors_.push_back(std::move(t));
}

ParamLayout ParamLayout::make(const ModelConfig& m, int unit_blocks, const ModelPart& part) {
  if (m.vocab_size <= 0) throw Error("ParamLayout::make: vocab_size is not resolved");
  ParamLayout L;
  L.part_ = part;
  if (L.part_.n_layers < 0) L.part_.n_layers = m.n_layer - L.part_.first_layer;
  family_of(m.arch).build_layout(L, m, unit_blocks);
  return L;
}

int ParamLayout::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return static_cast<int>(i);
  return -1;
}

int ParamLayout::at(const std::string& name) const {
  int i = find(name);
  if (i < 0) throw Error("parameter '" + name + "' does not exist in this part of the model");
  return i;
}

int ParamLayout::tied_unit() const {
  if (part_.pp_size == 1 || tied_name_.empty()) return -1;
  for (const TensorSpec& t : tensors_)
    if (t.name == tied_name_) return t.unit;
  return -1;
}

template <class T>
void init_tensor_range(View1<T> dst, const TensorSpec& t, std::int64_t begin, int tp_size, int tp_rank,
                       std::uint64_t seed) {
  const auto count = static_cast<std::int64_t>(dst.extent(0));
  fill<T>(dst, T(0));  // padding stays zero
  for (const Run& r : tp_runs(t.global_shape, t.split_dim, t.split_groups, tp_size, tp_rank)) {
    const std::int64_t a = std::max(begin, r.local), b = std::min(begin + count, r.local + r.count);
    if (a >= b) continue;
    View1<T> part(dst.data() + (a - begin), static_cast<size_t>(b - a));
    switch (t.init) {
      case InitKind::normal:
        fill_normal<T>(part, seed, stream_id(t.name), static_cast<std::uint64_t>(r.global + (a - r.local)), t.init_std);
        break;
      case InitKind::ones: fill<T>(part, T(1)); break;
      case InitKind::zeros: break;
    }
  }
}

template <class T>
void init_tensor(View1<T> dst, const TensorSpec& t, int tp_size, int tp_rank, std::uint64_t seed) {
  init_tensor_range<T>(dst, t, 0, tp_size, tp_rank, seed);
}

template void init_tensor_range<float>(View1<float>, const TensorSpec&, std::int64_t, int, int, std::uint64_t);
template void init_tensor_range<double>(View1<double>, const TensorSpec&, std::int64_t, int, int, std::uint64_t);
template void init_tensor<float>(View1<float>, const TensorSpec&, int, int, std::uint64_t);
template void init_tensor<double>(View1<double>, const TensorSpec&, int, int, std::uint64_t);

}  // namespace trident
