// The whole model's gradient against central finite differences in double on tiny configs of
// every family: GPT-2 with and without biases and dropout (the masks are counter-based, hence
// identical in every evaluation); Llama with grouped-query attention (2 query heads per key/value
// head), rotary embeddings, SwiGLU, RMSNorm, tied and untied heads.
#include "fd.hpp"
#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/gemm.hpp"
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

// GEMM-only activations stored in bf16 (Block::gemm_only_saved; a Gpt constructed with bf16 GEMM
// inputs) against the same model storing them in float with bf16 GEMM inputs: the GEMMs see the
// same bf16 values, so losses and every gradient are bitwise equal, with and without recompute,
// for both attention kernels, with dropout, for GPT-2 and Llama; the activations are smaller by
// exactly half of the activations each family lists (`halved`: floats per token and block).
// GPT-2: ln_1, attention output, ln_2 (C each) and GELU output (4C); Llama: both RMSNorm outputs
// (C each), attention output (n_head * head size = C here) and the SwiGLU output (ffn_hidden).
// The micro-batch (B = 3) is smaller than the most the models are built for (max_B = 4), as the
// last micro-batch of a split can be.
void check_bf16_storage(ModelConfig m, bool recompute, std::int64_t halved) {
  if (!gemm_bf16_supported()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const ParamLayout layout = ParamLayout::make(m);
  ParamStore<float> store(layout);
  store.initialize(5);
  const int B = 3, max_B = 4, T = m.block_size;
  std::vector<token_t> tok_h(B * T), tgt_h(B * T);
  for (int i = 0; i < B * T; ++i) {
    tok_h[i] = (i * 7 + 3) % m.vocab_size;
    tgt_h[i] = (i * 5 + 1) % m.vocab_size;
  }
  const Buffer<token_t> tok = test::device_array(tok_h), tgt = test::device_array(tgt_h);
  View1<const token_t> tokv(tok.data(), B * T), tgtv(tgt.data(), B * T);
  ForwardContext ctx;
  ctx.seed = 7;
  ctx.step = 2;
  ctx.train = true;
  FlatProvider<float> flat(layout, store.params().data(), store.grads().data());
  auto run = [&](Gpt<float>& gpt, std::vector<float>& grads) {
    store.zero_grads();
    const double loss = gpt.forward(flat, tokv, tgtv, B, T, ctx);
    gpt.backward(flat, 1.f / (B * T));
    Kokkos::fence();
    grads = to_host_vector(View1<const float>(store.grads().data(), static_cast<size_t>(store.grads().size())));
    return loss;
  };
  Gpt<float> f32(m, layout, nullptr, max_B, T, recompute, 1);  // float storage, bf16 GEMM inputs
  f32.set_gemm_inputs(GemmInputs::bf16);
  Gpt<float> b16(m, layout, nullptr, max_B, T, recompute, 1, GemmInputs::bf16);
  EXPECT_THROW(b16.set_gemm_inputs(GemmInputs::native), Error);
  std::vector<float> g_f32, g_b16;
  const double l_f32 = run(f32, g_f32), l_b16 = run(b16, g_b16);
  EXPECT_EQ(l_f32, l_b16);
  ASSERT_EQ(g_f32.size(), g_b16.size());
  for (size_t i = 0; i < g_f32.size(); ++i) ASSERT_EQ(g_f32[i], g_b16[i]) << "gradient element " << i;
  // The path is really the bf16 one: float GEMM inputs give another loss.
  Gpt<float> native(m, layout, nullptr, max_B, T, recompute, 1);
  std::vector<float> g_native;
  EXPECT_NE(run(native, g_native), l_f32);
  const std::int64_t saved_blocks = recompute ? 1 : m.n_layer;  // recompute keeps one block's set
  EXPECT_EQ(f32.activation_bytes() - b16.activation_bytes(), saved_blocks * max_B * T * halved / 2 * 4);
  EXPECT_EQ(b16.activation_bytes(),
            Gpt<float>::activation_elements(m, layout, max_B, T, recompute, 1, GemmInputs::bf16) * 4);
}

ModelConfig small_gpt2(AttentionKernel attention) {
  ModelConfig m = tiny(true, 0.1);
  m.n_embd = 32;
  m.block_size = 16;
  m.vocab_size = 40;
  m.attention = attention;
  return m;
}

ModelConfig small_llama() {
  ModelConfig m = tiny_llama(false, 0.1);
  m.n_embd = 32;
  m.ffn_hidden = 48;
  m.block_size = 16;
  m.vocab_size = 40;
  return m;
}

TEST(GptBf16Storage, BitwiseTheFloatStorageGemmAttention) {
  check_bf16_storage(small_gpt2(AttentionKernel::gemm), false, 7 * 32);
}
TEST(GptBf16Storage, BitwiseTheFloatStorageWithRecompute) {
  check_bf16_storage(small_gpt2(AttentionKernel::gemm), true, 7 * 32);
}
TEST(GptBf16Storage, BitwiseTheFloatStorageFusedAttention) {
  check_bf16_storage(small_gpt2(AttentionKernel::fused), false, 7 * 32);
}
TEST(GptBf16Storage, BitwiseTheFloatStorageFusedAttentionRecompute) {
  check_bf16_storage(small_gpt2(AttentionKernel::fused), true, 7 * 32);
}
TEST(GptBf16Storage, BitwiseTheFloatStorageLlama) { check_bf16_storage(small_llama(), false, 3 * 32 + 48); }
TEST(GptBf16Storage, BitwiseTheFloatStorageLlamaRecompute) { check_bf16_storage(small_llama(), true, 3 * 32 + 48); }
TEST(GptBf16Storage, BitwiseTheFloatStorageLlamaFusedAttention) {
  ModelConfig m = small_llama();
  m.attention = AttentionKernel::fused;
  check_bf16_storage(m, false, 3 * 32 + 48);
}

}  // namespace
}  // namespace trident
