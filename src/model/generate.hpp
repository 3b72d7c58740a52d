// model/generate.hpp: autoregressive sampling from a trained GPT (nanoGPT's generate()).
//
// Layer: model. Local.
#pragma once

#include "model/gpt.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace trident {

struct SampleOptions {
  int max_new_tokens = 200;
  double temperature = 0.8;  ///< 0: greedy (argmax)
  int top_k = 200;           ///< keep the k most likely tokens; 0: all
  std::uint64_t seed = 1337; ///< draws are Philox-keyed by (seed, position): reproducible
};

/// Extends `ids` by opt.max_new_tokens tokens, each drawn from softmax(logits / temperature) of
/// the last position, restricted to the top_k most likely, with the context cropped to the last
/// block_size tokens. `gpt` must be built with max_B >= 1 and max_T = block_size. Local.
/// Throws Error if `ids` is empty.
/// on_token, when given, is called with each new token as soon as it is drawn (streaming output).
template <class T>
std::vector<std::int32_t> generate(Gpt<T>& gpt, UnitProvider<T>& params, const ModelConfig& m,
                                   std::vector<std::int32_t> ids, const SampleOptions& opt,
                                   const std::function<void(std::int32_t)>& on_token = {});

}  // namespace trident
