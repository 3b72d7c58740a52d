// The whole model's gradient against central finite differences in double on tiny configs of
// every family: GPT-2 with and without biases and dropout (the masks are counter-based, hence
// identical in every evaluation); Llama with grouped-query attention (2 query heads per key/value
// head), rotary embeddings, SwiGLU, RMSNorm, tied and untied heads.
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

ModelConfig tiny_llama(bool tied, double dropout) {
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 16;
  m.ffn_hidden = 12;
  m.block_size = 6;
  m.vocab_size = 11;
  m.rope_theta = 100.0;  // angles of order 1 over 5 positions, so the rotation matters
  m.norm_eps = 1e-5;
  m.tie_embeddings = tied;
  m.dropout = dropout;
  return m;
}

void check_model_gradient(const ModelConfig& m) {
  const ParamLayout layout = ParamLayout::make(m);
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

TEST(GptGradient, MatchesFiniteDifferencesNoBiasNoDropout) { check_model_gradient(tiny(false, 0.0)); }
TEST(GptGradient, MatchesFiniteDifferencesWithBiasAndDropout) { check_model_gradient(tiny(true, 0.2)); }
TEST(LlamaGradient, MatchesFiniteDifferencesUntied) { check_model_gradient(tiny_llama(false, 0.0)); }
TEST(LlamaGradient, MatchesFiniteDifferencesTiedWithDropout) { check_model_gradient(tiny_llama(true, 0.2)); }
TEST(LlamaGradient, MatchesFiniteDifferencesMultiHead) {
  ModelConfig m = tiny_llama(false, 0.0);
  m.n_kv_head = 0;  // = n_head: no grouping
  check_model_gradient(m);
}

}  // namespace
}  // namespace trident
