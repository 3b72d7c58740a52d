// The whole GPT's gradient against central finite differences in double on a tiny config with
// biases and dropout on (the masks are counter-based, hence identical in every evaluation).
#include "fd.hpp"
#include "kernels/elementwise.hpp"
#include "model/gpt.hpp"
#include "model/param_store.hpp"

#include <gtest/gtest.h>

namespace trident {
namespace {

ModelConfig tiny(bool bias, double dropout) {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 8;
  m.block_size = 6;
  m.vocab_size = 11;
  m.bias = bias;
  m.dropout = dropout;
  return m;
}

void check_model_gradient(bool bias, double dropout) {
  const ModelConfig m = tiny(bias, dropout);
  const ParamLayout layout = ParamLayout::gpt(m);
  ParamStore<double> store(layout);
  store.initialize(3);
  // Larger weights than GPT-2's 0.02 so that every path carries gradient well above the FD noise.
  scale<double>(store.params().all(), 10.0);
  const int B = 2, T = 5;
  std::vector<token_t> tok_h(B * T), tgt_h(B * T);
  for (int i = 0; i < B * T; ++i) {
    tok_h[i] = (i * 7 + 3) % m.vocab_size;
    tgt_h[i] = (i * 5 + 1) % m.vocab_size;
  }
  tgt_h[4] = -1;  // a position without loss
  const Buffer<token_t> tok = test::device_array(tok_h), tgt = test::device_array(tgt_h);
  Gpt<double> gpt(m, layout, B, m.block_size);
  FlatProvider<double> flat(layout, store.params().data(), store.grads().data());
  ForwardContext ctx;
  ctx.seed = 99;
  ctx.step = 4;
  ctx.sample_offset = 10;
  ctx.train = true;
  const double scale = 1.0 / (B * T);
  View1<const token_t> tokv(tok.data(), B * T), tgtv(tgt.data(), B * T);
  auto loss = [&] { return scale * gpt.forward(flat, tokv, tgtv, B, T, ctx); };
  const double l0 = loss();
  EXPECT_GT(l0, 0.0);
  store.zero_grads();
  gpt.backward(flat, scale);
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    const TensorSpec& t = layout.tensors()[i];
    test::expect_gradient(t.name, store.param(static_cast<int>(i)), store.grad(static_cast<int>(i)), loss, 1e-6, 64);
  }
}

TEST(GptGradient, MatchesFiniteDifferencesNoBiasNoDropout) { check_model_gradient(false, 0.0); }
TEST(GptGradient, MatchesFiniteDifferencesWithBiasAndDropout) { check_model_gradient(true, 0.2); }

}  // namespace
}  // namespace trident
