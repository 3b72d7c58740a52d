#include "model/param_layout.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kernels/elementwise.hpp"

#include <algorithm>

#include <cmath>

namespace trident {

void ParamLayout::begin_unit(const std::string& name) {
  UnitSpec u;
  u.name = name;
  u.offset = numel_;
  u.first_tensor = static_cast<int>(tensors_.size());
  units_.push_back(u);
}

void ParamLayout::add(const std::string& name, std::vector<std::int64_t> shape, bool decay, InitKind init, double std_,
                      int split_dim, int split_groups) {
  TensorSpec t;
  t.name = name;
  t.shape = std::move(shape);
  t.numel = 1;
  for (auto d : t.shape) t.numel *= d;
  t.offset = numel_;
  t.unit = static_cast<int>(units_.size()) - 1;
  t.decay = decay;
  t.init = init;
  t.init_std = std_;
  t.split_dim = split_dim;
  t.split_groups = split_groups;
  numel_ += t.numel;
  UnitSpec& u = units_.back();
  u.numel += t.numel;
  u.n_tensors += 1;
  tensors_.push_back(std::move(t));
}

ParamLayout ParamLayout::gpt(const ModelConfig& m, int unit_blocks) {
  if (m.vocab_size <= 0) throw Error("ParamLayout::gpt: vocab_size is not resolved");
  ParamLayout L;
  const std::int64_t C = m.n_embd, V = m.vocab_size;
  const double s = 0.02, s_proj = 0.02 / std::sqrt(2.0 * m.n_layer);
  L.begin_unit(unit_blocks == 0 ? "model" : "embed");
  L.add("transformer.wte.weight", {V, C}, true, InitKind::normal, s, 0);
  L.add("transformer.wpe.weight", {m.block_size, C}, true, InitKind::normal, s, -1);
  for (int i = 0; i < m.n_layer; ++i) {
    if (unit_blocks > 0 && i % unit_blocks == 0) {
      const int last = std::min(m.n_layer, i + unit_blocks) - 1;
      L.begin_unit("h." + std::to_string(i) + (last > i ? "-" + std::to_string(last) : ""));
    }
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    L.add(p + "ln_1.weight", {C}, false, InitKind::ones, 0, -1);
    if (m.bias) L.add(p + "ln_1.bias", {C}, false, InitKind::zeros, 0, -1);
    L.add(p + "attn.c_attn.weight", {3 * C, C}, true, InitKind::normal, s, 0, 3);
    if (m.bias) L.add(p + "attn.c_attn.bias", {3 * C}, false, InitKind::zeros, 0, 0, 3);
    L.add(p + "attn.c_proj.weight", {C, C}, true, InitKind::normal, s_proj, 1);
    if (m.bias) L.add(p + "attn.c_proj.bias", {C}, false, InitKind::zeros, 0, -1);
    L.add(p + "ln_2.weight", {C}, false, InitKind::ones, 0, -1);
    if (m.bias) L.add(p + "ln_2.bias", {C}, false, InitKind::zeros, 0, -1);
    L.add(p + "mlp.c_fc.weight", {4 * C, C}, true, InitKind::normal, s, 0);
    if (m.bias) L.add(p + "mlp.c_fc.bias", {4 * C}, false, InitKind::zeros, 0, 0);
    L.add(p + "mlp.c_proj.weight", {C, 4 * C}, true, InitKind::normal, s_proj, 1);
    if (m.bias) L.add(p + "mlp.c_proj.bias", {C}, false, InitKind::zeros, 0, -1);
  }
  if (unit_blocks > 0) L.begin_unit("head");
  L.add("transformer.ln_f.weight", {C}, false, InitKind::ones, 0, -1);
  if (m.bias) L.add("transformer.ln_f.bias", {C}, false, InitKind::zeros, 0, -1);
  return L;
}

template <class T>
void init_tensor_range(View1<T> dst, const TensorSpec& t, std::int64_t begin, std::uint64_t seed) {
  switch (t.init) {
    case InitKind::normal:
      fill_normal<T>(dst, seed, stream_id(t.name), static_cast<std::uint64_t>(begin), t.init_std);
      break;
    case InitKind::ones: fill<T>(dst, T(1)); break;
    case InitKind::zeros: fill<T>(dst, T(0)); break;
  }
}
template void init_tensor_range<float>(View1<float>, const TensorSpec&, std::int64_t, std::uint64_t);
template void init_tensor_range<double>(View1<double>, const TensorSpec&, std::int64_t, std::uint64_t);

int ParamLayout::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return static_cast<int>(i);
  return -1;
}

int ParamLayout::at(const std::string& name) const {
  int i = find(name);
  if (i < 0) throw Error("parameter '" + name + "' does not exist in this model");
  return i;
}

double flops_per_token(const ModelConfig& m) {
  ParamLayout L = ParamLayout::gpt(m);
  const double n = static_cast<double>(L.numel() - L.tensors()[L.at("transformer.wpe.weight")].numel);
  return 6.0 * n + 12.0 * m.n_layer * m.n_embd * static_cast<double>(m.block_size);
}

}  // namespace trident
