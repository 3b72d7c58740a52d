#include "model/family.hpp"

#include "core/error.hpp"
#include "model/gpt2/gpt2.hpp"
#include "model/llama/llama.hpp"

namespace trident {

const ModelFamily& family_of(ModelArch arch) {
  // The registry: one line per family.
  static const ModelFamily families[] = {gpt2_family(), llama_family()};
  for (const ModelFamily& f : families)
    if (f.arch == arch) return f;
  throw Error(std::string("no model family is registered for [model] arch = ") + name_of(arch));
}

double flops_per_token(const ModelConfig& m) {
  const ParamLayout L = ParamLayout::make(m);
  const ModelFamily& f = family_of(m.arch);
  double n = static_cast<double>(L.numel());
  if (f.position_embedding != nullptr) {
    const int p = L.find(f.position_embedding);
    if (p >= 0) n -= static_cast<double>(L.tensors()[static_cast<size_t>(p)].numel);
  }
  return 6.0 * n + 12.0 * m.n_layer * m.n_embd * static_cast<double>(m.block_size);
}

}  // namespace trident
