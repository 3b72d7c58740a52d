// Each kernel's backward against central finite differences in double (tests/fd.hpp gives the
// tolerance argument), plus the invariants of the counter-based RNG and the AdamW formula.
#include "core/error.hpp"
#include "core/memory.hpp"
#include "fd.hpp"
#include "core/rng.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/bf16_staging.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/embedding.hpp"
#include "kernels/convert.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#if TRIDENT_HAVE_ONEDNN && !TRIDENT_HAVE_CUDA
#include "kernels/gemm_onednn.hpp"
#endif
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/row_parallel.hpp"
#include "kernels/swiglu.hpp"
#include "kernels/vmath.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace trident {
namespace {
using test::device_array;
using test::expect_gradient;
using test::host;
using test::random_buffer;
using test::v1;
using test::v2;

/// Objective sum(out * R): its gradient wrt out is R, which becomes backward's dout.
double dot(const Buffer<double>& a_dev, const Buffer<double>& b_dev) {
  const auto a = host(a_dev), b = host(b_dev);
  double s = 0;
  for (size_t i = 0; i < a.extent(0); ++i) s += a(i) * b(i);
  return s;
}

TEST(Kernels, LayerNormBackwardMatchesFiniteDifferences) {
  const int N = 5, C = 7;
  auto inp = random_buffer(N * C, 1), w = random_buffer(C, 2), b = random_buffer(C, 3), R = random_buffer(N * C, 4);
  Buffer<double> out("out", N * C), mean("mean", N), rstd("rstd", N);
  auto loss = [&] {
    layernorm_forward<double>(v2(out, N, C), v1(mean), v1(rstd), v2(inp, N, C), v1(w), v1(b));
    return dot(out, R);
  };
  loss();
  Buffer<double> dinp("dinp", N * C), dw("dw", C), db("db", C);
  layernorm_backward<double>(v2(dinp, N, C), v1(dw), v1(db), v2(R, N, C), v2(inp, N, C), v1(w), v1(mean), v1(rstd));
  expect_gradient("layernorm dinp", v1(inp), v1(dinp), loss);
  expect_gradient("layernorm dweight", v1(w), v1(dw), loss);
  expect_gradient("layernorm dbias", v1(b), v1(db), loss);
}

TEST(Kernels, LayerNormForwardNormalises) {
  const int N = 3, C = 16;
  auto inp = random_buffer(N * C, 5, 3.0);
  Buffer<double> out_dev("out", N * C), mean("mean", N), rstd("rstd", N), w("w", C);
  Kokkos::deep_copy(w, 1.0);
  layernorm_forward<double>(v2(out_dev, N, C), v1(mean), v1(rstd), v2(inp, N, C), v1(w), View1<const double>());
  const auto out = host(out_dev);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out(n * C + c) / C;
    for (int c = 0; c < C; ++c) v += (out(n * C + c) - m) * (out(n * C + c) - m) / C;
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v, 1.0, 1e-4);  // eps = 1e-5 in the denominator biases the variance by ~1e-5/var
  }
}

// The row-wise kernels run as Kokkos teams (kernels/row_parallel.hpp): on a GPU 4 rows per team
// with 32 vector lanes over a row, 256 threads per vocabulary row, 16 threads x 32 columns per
// column sum. These shapes are ragged for all of those (70 rows, 37 columns, a 300-column
// vocabulary), so a row, column or lane that a team misses or takes twice shows. The oracle is the
// definition in serial double loops; only summation order differs (a few ulps of double), hence 1e-12.
constexpr int kRaggedRows = 70, kRaggedCols = 37;

/// The host row reductions of LayerNorm and cross entropy (kernels/row_parallel.hpp):
/// lane_max is the index-order loop's value (exact in any order; NaN never taken; lowest for an
/// empty row), lane_sum is the 16 lane partials (element i in lane i % 16, each in index order)
/// added in lane order, bit for bit, and within float rounding of the exact sum, for every row
/// length up to 70 (full blocks of 16 and every remainder).
TEST(Kernels, LaneMaxAndLaneSumAreTheStatedOrder) {
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> a(70);
  for (float& x : a) x = nd(gen);
  EXPECT_EQ(lane_max(a.data(), 0), std::numeric_limits<float>::lowest());
  for (int n = 1; n <= 70; ++n) {
    SCOPED_TRACE(n);
    float m = a[0];
    for (int i = 1; i < n; ++i) m = a[i] > m ? a[i] : m;
    EXPECT_EQ(lane_max(a.data(), n), m);
    float lanes[16] = {};
    double exact = 0;
    for (int i = 0; i < n; ++i) {
      lanes[i % 16] += a[i];
      exact += a[i];
    }
    float expect = 0;
    for (float l : lanes) expect += l;
    const float got = lane_sum<float>(n, [&](int i) { return a[i]; });
    EXPECT_EQ(got, expect);
    double mag = 0;
    for (int i = 0; i < n; ++i) mag += std::fabs(a[i]);
    EXPECT_NEAR(got, exact, 4e-7 * mag);
  }
  std::vector<float> b = a;
  b[20] = std::numeric_limits<float>::quiet_NaN();
  float m = std::numeric_limits<float>::lowest();
  for (int i = 0; i < 40; ++i)
    if (i != 20) m = std::max(m, b[i]);
  EXPECT_EQ(lane_max(b.data(), 40), m) << "a NaN is never the maximum";
}

TEST(Kernels, VectorExpMatchesStdExp) {
  // kernels/vmath.cpp (-ffast-math, libmvec): within 4 ulp of std::exp on softmax-like inputs
  // (every element minus the row's max, so <= 0), on every vector-tail length; -inf gives 0, and a
  // NaN stays NaN (a diverged run must still show its NaN loss).
  for (int n : {1, 7, 16, 17, 33, 257}) {
    std::vector<float> a(static_cast<size_t>(n)), want(a.size());
    std::vector<double> d(a.size());
    for (int i = 0; i < n; ++i) {
      a[static_cast<size_t>(i)] = 40.0f * std::sin(0.37f * static_cast<float>(i)) - 3.0f;
      d[static_cast<size_t>(i)] = a[static_cast<size_t>(i)];
      want[static_cast<size_t>(i)] = std::exp(a[static_cast<size_t>(i)] - 37.0f);
    }
    detail::exp_shifted_inplace(a.data(), n, 37.0f);
    detail::exp_shifted_inplace(d.data(), n, 37.0);
    for (int i = 0; i < n; ++i) {
      const float w = want[static_cast<size_t>(i)];
      EXPECT_NEAR(a[static_cast<size_t>(i)], w, 4 * std::numeric_limits<float>::epsilon() * w) << n << " " << i;
      const double wd = std::exp(static_cast<double>(40.0f * std::sin(0.37f * static_cast<float>(i)) - 3.0f) - 37.0);
      EXPECT_NEAR(d[static_cast<size_t>(i)], wd, 4 * std::numeric_limits<double>::epsilon() * wd) << n << " " << i;
    }
  }
  std::vector<float> special{-std::numeric_limits<float>::infinity(), 0.0f, std::numeric_limits<float>::quiet_NaN(), -1.0f};
  detail::exp_shifted_inplace(special.data(), 4, 0.0f);
  EXPECT_EQ(special[0], 0.0f);
  EXPECT_EQ(special[1], 1.0f);
  EXPECT_TRUE(std::isnan(special[2]));
  EXPECT_NEAR(special[3], std::exp(-1.0f), 4 * std::numeric_limits<float>::epsilon());
}

// kernels/vmath.cpp's Box-Muller (libmvec log and cos) against core/rng.hpp's scalar normal_from,
// on Philox words and on the extremes of the uniform words (u = 2^-32 gives the largest |z|, u = 1
// gives 0): within a few double ulps; and fill_normal on the host, which uses it, rounds to the
// same float as the scalar formula for (nearly) every element of 200k, and within 1 float ulp.
TEST(Kernels, VectorBoxMullerMatchesNormalFrom) {
  const int n = 200003;
  std::vector<std::uint32_t> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    const auto r = philox4(7u, 9u, static_cast<std::uint32_t>(i), 0u, 0x1A1A1A1Au, 0u);
    a[static_cast<size_t>(i)] = r.v[0];
    b[static_cast<size_t>(i)] = r.v[1];
  }
  for (std::uint32_t edge : {0u, 1u, 0x7fffffffu, 0xfffffffeu, 0xffffffffu}) {
    a.push_back(edge);
    b.push_back(0x3fffffffu ^ edge);
  }
  std::vector<double> z(a.size());
  detail::box_muller(z.data(), a.data(), b.data(), static_cast<std::int64_t>(a.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    const double want = normal_from(a[i], b[i]);
    ASSERT_NEAR(z[i], want, 16 * std::numeric_limits<double>::epsilon() * std::max(1.0, std::fabs(want)))
        << "words " << a[i] << ", " << b[i];
  }
  Buffer<float> x("x", n);
  fill_normal<float>(View1<float>(x.data(), n), 0x123456789abcdefull, 77u, 1000, 0.02);
  const std::vector<float> got = to_host_vector(View1<float>(x.data(), n));
  int differ = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t idx = 1000 + static_cast<std::uint64_t>(i), seed = 0x123456789abcdefull;
    const auto r = philox4(lo32(seed), hi32(seed) ^ 77u, lo32(idx), hi32(idx), 0x1A1A1A1Au, 0u);
    const float want = static_cast<float>(0.02 * normal_from(r.v[0], r.v[1]));
    const float g = got[static_cast<size_t>(i)];
    if (g != want) ++differ;
    ASSERT_LE(std::fabs(g - want), std::fabs(want) * std::numeric_limits<float>::epsilon() + 1e-30f) << i;
  }
  EXPECT_LE(differ, 3) << "elements whose float differs from the scalar formula's";

  // An element's value depends on (seed, stream, offset + i) only, not on how a tensor is split
  // into shards (the layouts that must equal one rank): double, where the last bits show, filled
  // whole and in three pieces whose ends fall mid-block and whose starts are unaligned.
  // Every split point from 1 to 40 and a few mid-block ones: the elements near a piece's end and
  // start take whatever path a tail or an alignment peel would.
  const int len = 1500;
  Buffer<double> whole("whole", len), parts("parts", len);
  fill_normal<double>(View1<double>(whole.data(), len), 42u, 3u, 70, 1.0);
  const std::vector<double> want = to_host_vector(View1<double>(whole.data(), len));
  std::vector<int> cuts;
  for (int c = 1; c <= 40; ++c) cuts.push_back(c);
  for (int c : {255, 333, 511, 513, 777, 1023, 1100, 1499}) cuts.push_back(c);
  for (int c : cuts) {
    fill(View1<double>(parts.data(), len), 0.0);
    fill_normal<double>(View1<double>(parts.data(), static_cast<size_t>(c)), 42u, 3u, 70, 1.0);
    fill_normal<double>(View1<double>(parts.data() + c, static_cast<size_t>(len - c)), 42u, 3u,
                        70 + static_cast<std::uint64_t>(c), 1.0);
    ASSERT_EQ(to_host_vector(View1<double>(parts.data(), len)), want) << "split at " << c;
  }
}

TEST(Kernels, LayerNormMatchesDefinitionOnRaggedShapes) {
  const int N = kRaggedRows, C = kRaggedCols;
  auto inp = random_buffer(N * C, 71, 2.0), w = random_buffer(C, 72), b = random_buffer(C, 73),
       dout = random_buffer(N * C, 74), dinp = random_buffer(N * C, 75), dw = random_buffer(C, 76),
       db = random_buffer(C, 77);
  const std::vector<double> dinp0 = to_host_vector(v1(dinp)), dw0 = to_host_vector(v1(dw)), db0 = to_host_vector(v1(db));
  Buffer<double> out("out", N * C), mean("mean", N), rstd("rstd", N);
  layernorm_forward<double>(v2(out, N, C), v1(mean), v1(rstd), v2(inp, N, C), v1(w), v1(b));
  layernorm_backward<double>(v2(dinp, N, C), v1(dw), v1(db), v2(dout, N, C), v2(inp, N, C), v1(w), v1(mean),
                             v1(rstd));
  const auto x = host(inp), wh = host(w), bh = host(b), g = host(dout), y = host(out), mh = host(mean),
             sh = host(rstd), dx = host(dinp), dwh = host(dw), dbh = host(db);
  std::vector<double> want_dw = dw0, want_db = db0;
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x(n * C + c) / C;
    for (int c = 0; c < C; ++c) v += (x(n * C + c) - m) * (x(n * C + c) - m) / C;
    const double s = 1 / std::sqrt(v + 1e-5);
    EXPECT_NEAR(mh(n), m, 1e-12) << n;
    EXPECT_NEAR(sh(n), s, 1e-12 * s) << n;
    double dm = 0, dnm = 0;  // llm.c's closed form: means of dnorm and dnorm * xhat
    for (int c = 0; c < C; ++c) {
      const double xhat = (x(n * C + c) - m) * s, dnorm = g(n * C + c) * wh(c);
      EXPECT_NEAR(y(n * C + c), xhat * wh(c) + bh(c), 1e-12) << n << "," << c;
      dm += dnorm / C;
      dnm += dnorm * xhat / C;
      want_dw[c] += g(n * C + c) * xhat;
      want_db[c] += g(n * C + c);
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = (x(n * C + c) - m) * s, dnorm = g(n * C + c) * wh(c);
      EXPECT_NEAR(dx(n * C + c), dinp0[n * C + c] + (dnorm - dm - xhat * dnm) * s, 1e-12) << n << "," << c;
    }
  }
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(dwh(c), want_dw[c], 1e-12) << c;
    EXPECT_NEAR(dbh(c), want_db[c], 1e-12) << c;
  }
}

TEST(Kernels, LinearBiasMatchesDefinitionOnRaggedShapes) {
  const int N = kRaggedRows, OC = kRaggedCols;
  auto out = random_buffer(N * OC, 81), b = random_buffer(OC, 82), dbias = random_buffer(OC, 83);
  const std::vector<double> out0 = to_host_vector(v1(out)), db0 = to_host_vector(v1(dbias));
  add_bias<double>(v2(out, N, OC), v1(b));
  const auto y = host(out), bh = host(b);
  for (int i = 0; i < N * OC; ++i) EXPECT_EQ(y(i), out0[i] + bh(i % OC)) << i;
  // dbias += sum over rows of dout (here the biased out); dinp skipped, dweight a scratch sink.
  Buffer<double> dW("dW", OC * 1), inp("inp", N * 1), W("W", OC * 1);
  linear_backward<double>(View2<double>(), v2(dW, OC, 1), v1(dbias), v2(out, N, OC), v2(inp, N, 1), v2(W, OC, 1));
  const auto dbh = host(dbias);
  for (int o = 0; o < OC; ++o) {
    double want = db0[o];
    for (int n = 0; n < N; ++n) want += y(n * OC + o);
    EXPECT_NEAR(dbh(o), want, 1e-12) << o;
  }
}

TEST(Kernels, CrossEntropyLongRowsMatchDefinitionAndSplitForm) {
  // 300 columns: more than a 256-thread team, not a multiple of it. Split form: two vocabulary
  // partitions of 150 columns, each padded to 160 (as tp pads V), combined as the model does.
  const int N = 9, V = 300, P = 150, Vpad = 160;
  auto logits = random_buffer(N * V, 91, 3.0);
  const std::vector<token_t> tgt = {3, 299, -1, 150, 149, 0, 77, 220, 5};
  const Buffer<token_t> tgt_dev = device_array(tgt);
  const View1<const token_t> tgtv(tgt_dev.data(), N);
  Buffer<double> losses("losses", N), dlogits("dlogits", N * V);
  const double dloss = 0.5;
  const double total = cross_entropy_forward<double>(v1(losses), v2(logits, N, V), tgtv);
  cross_entropy_backward<double>(v2(dlogits, N, V), v2(logits, N, V), tgtv, dloss);
  const auto lh = host(logits), loss_h = host(losses), dh = host(dlogits);
  double want_total = 0;
  std::vector<double> want_loss(N, 0.0), prob(N * V, 0.0);
  for (int n = 0; n < N; ++n) {
    double mx = lh(n * V), z = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, lh(n * V + v));
    for (int v = 0; v < V; ++v) z += std::exp(lh(n * V + v) - mx);
    for (int v = 0; v < V; ++v) prob[n * V + v] = std::exp(lh(n * V + v) - mx) / z;
    if (tgt[n] >= 0) want_loss[n] = std::log(z) + mx - lh(n * V + tgt[n]);
    want_total += want_loss[n];
    EXPECT_NEAR(loss_h(n), want_loss[n], 1e-12) << n;
    for (int v = 0; v < V; ++v) {
      const double want = tgt[n] < 0 ? 0.0 : (prob[n * V + v] - (v == tgt[n] ? 1.0 : 0.0)) * dloss;
      EXPECT_NEAR(dh(n * V + v), want, 1e-12) << n << "," << v;
    }
  }
  EXPECT_NEAR(total, want_total, 1e-11);
  // The vocab-parallel kernels on the two padded partitions, reduced by hand as the model's tp
  // all-reduces do (max of maxima, sums of sums).
  std::vector<double> part_logits[2];
  Buffer<double> row_max[2] = {Buffer<double>("m0", N), Buffer<double>("m1", N)};
  for (int k = 0; k < 2; ++k) {
    part_logits[k].assign(N * Vpad, 1e3);  // padding: large, so a kernel that reads it shows
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < P; ++v) part_logits[k][n * Vpad + v] = lh(n * V + k * P + v);
  }
  const Buffer<double> part_dev[2] = {device_array(part_logits[0]), device_array(part_logits[1])};
  std::vector<double> gmax(N, -1e300);
  for (int k = 0; k < 2; ++k) {
    cross_entropy_row_max<double>(v1(row_max[k]), v2(part_dev[k], N, Vpad), P);
    const auto m = host(row_max[k]);
    for (int n = 0; n < N; ++n) gmax[n] = std::max(gmax[n], m(n));
  }
  const Buffer<double> gmax_dev = device_array(gmax);
  std::vector<double> gsum(N, 0.0), gtarget(N, 0.0);
  for (int k = 0; k < 2; ++k) {
    Buffer<double> se("se", N), tl("tl", N);
    cross_entropy_partials<double>(v1(se), v1(tl), v2(part_dev[k], N, Vpad), v1(gmax_dev), tgtv, k * P, P);
    const auto seh = host(se), tlh = host(tl);
    for (int n = 0; n < N; ++n) {
      gsum[n] += seh(n);
      gtarget[n] += tlh(n);
    }
  }
  const Buffer<double> gsum_dev = device_array(gsum), gtarget_dev = device_array(gtarget);
  Buffer<double> split_losses("split_losses", N);
  const double split_total =
      cross_entropy_losses<double>(v1(split_losses), v1(gsum_dev), v1(gmax_dev), v1(gtarget_dev), tgtv);
  EXPECT_NEAR(split_total, want_total, 1e-11);
  const auto sl = host(split_losses);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(sl(n), want_loss[n], 1e-12) << n;
  for (int k = 0; k < 2; ++k) {
    Buffer<double> d("d", N * Vpad);
    cross_entropy_backward_split<double>(v2(d, N, Vpad), v2(part_dev[k], N, Vpad), v1(gmax_dev), v1(gsum_dev), tgtv,
                                         k * P, P, dloss);
    const auto dk = host(d);
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < Vpad; ++v) {
        const double want = v >= P ? 0.0 : dh(n * V + k * P + v);
        EXPECT_NEAR(dk(n * Vpad + v), want, 1e-12) << "partition " << k << " " << n << "," << v;
      }
    // In place, as the model calls it (dlogits = logits): the same values, bit for bit.
    const Buffer<double> inplace = device_array(part_logits[k]);
    cross_entropy_backward_split<double>(v2(inplace, N, Vpad), v2(inplace, N, Vpad), v1(gmax_dev), v1(gsum_dev),
                                         tgtv, k * P, P, dloss);
    EXPECT_EQ(to_host_vector(v1(inplace)), to_host_vector(v1(d))) << "partition " << k << " in place";
  }
  // A NaN logit in a row makes that row's loss NaN (a diverged run must show it), the others not.
  std::vector<double> with_nan = part_logits[0];
  with_nan[1 * Vpad + 2] = std::numeric_limits<double>::quiet_NaN();
  const Buffer<double> nan_dev = device_array(with_nan);
  Buffer<double> nmax("nmax", N), nse("nse", N), ntl("ntl", N), nloss("nloss", N);
  cross_entropy_row_max<double>(v1(nmax), v2(nan_dev, N, Vpad), P);
  cross_entropy_partials<double>(v1(nse), v1(ntl), v2(nan_dev, N, Vpad), v1(nmax), tgtv, 0, P);
  cross_entropy_losses<double>(v1(nloss), v1(nse), v1(nmax), v1(ntl), tgtv);
  const auto nl = host(nloss);
  EXPECT_TRUE(std::isnan(nl(1))) << nl(1);
  EXPECT_TRUE(std::isfinite(nl(0))) << nl(0);
}

TEST(Kernels, EmbeddingForwardMatchesDefinitionOnRaggedShapes) {
  const int B = 2, T = kRaggedRows / 2, C = kRaggedCols, V = 11, start = 3, rows = 6;
  auto wte = random_buffer(rows * C, 101), wpe = random_buffer(T * C, 102);
  std::vector<token_t> tok(B * T);
  for (int i = 0; i < B * T; ++i) tok[i] = (i * 7) % V;  // some ids outside this partition's rows
  const Buffer<token_t> tok_dev = device_array(tok);
  Buffer<double> out("out", B * T * C);
  embedding_forward<double>(v2(out, B * T, C), View1<const token_t>(tok_dev.data(), B * T), v2(wte, rows, C), start,
                            rows, v2(wpe, T, C), B, T);
  const auto y = host(out), e = host(wte), p = host(wpe);
  for (int n = 0; n < B * T; ++n)
    for (int c = 0; c < C; ++c) {
      const int r = tok[n] - start;
      const double want = (r >= 0 && r < rows ? e(r * C + c) : 0.0) + p((n % T) * C + c);
      EXPECT_EQ(y(n * C + c), want) << n << "," << c;
    }
}

TEST(Kernels, LinearBackwardMatchesFiniteDifferences) {
  const int N = 4, C = 6, OC = 5;
  auto inp = random_buffer(N * C, 11), W = random_buffer(OC * C, 12), b = random_buffer(OC, 13),
       R = random_buffer(N * OC, 14);
  Buffer<double> out("out", N * OC);
  auto loss = [&] {
    linear_forward<double>(v2(out, N, OC), v2(inp, N, C), v2(W, OC, C), v1(b));
    return dot(out, R);
  };
  loss();
  // Reference forward value from the definition.
  {
    const auto inp_h = host(inp), W_h = host(W), b_h = host(b), out_h = host(out);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        double s = b_h(o);
        for (int c = 0; c < C; ++c) s += inp_h(n * C + c) * W_h(o * C + c);
        EXPECT_NEAR(out_h(n * OC + o), s, 1e-12);
      }
  }
  Buffer<double> dinp("dinp", N * C), dW("dW", OC * C), db("db", OC);
  linear_backward<double>(v2(dinp, N, C), v2(dW, OC, C), v1(db), v2(R, N, OC), v2(inp, N, C), v2(W, OC, C));
  expect_gradient("linear dinp", v1(inp), v1(dinp), loss);
  expect_gradient("linear dweight", v1(W), v1(dW), loss);
  expect_gradient("linear dbias", v1(b), v1(db), loss);
}

/// C = alpha op(A) op(B) + beta C0 in double from the definition, with the inputs rounded through
/// `round` first (identity, or bf16).
template <class T, class Round>
std::vector<double> gemm_reference(char ta, char tb, double alpha, const std::vector<T>& A, int a_cols,
                                   const std::vector<T>& B, int b_cols, double beta, const std::vector<T>& C0, int M,
                                   int N, int K, Round round) {
  std::vector<double> C(static_cast<size_t>(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) {
        const double a = round(ta == 'N' ? A[m * a_cols + k] : A[k * a_cols + m]);
        const double b = round(tb == 'N' ? B[k * b_cols + n] : B[n * b_cols + k]);
        s += a * b;
      }
      C[m * N + n] = alpha * s + (beta == 0 ? 0.0 : beta * static_cast<double>(C0[m * N + n]));  // BLAS: beta 0 reads no C
    }
  return C;
}

/// gemm() of every trans combination against the definition: (M, N, K) = (5, 3, 4), alpha 0.5,
/// beta 2 (C is read), so rows and columns cannot be swapped unnoticed.
template <class T>
void check_gemm(GemmInputs inputs, double tol) {
  const int M = 5, N = 3, K = 4;
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      const int ar = ta == 'N' ? M : K, ac = ta == 'N' ? K : M, br = tb == 'N' ? K : N, bc = tb == 'N' ? N : K;
      std::vector<T> A(ar * ac), B(br * bc), C0(M * N);
      for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<T>(std::sin(1.0 + i));
      for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<T>(std::cos(2.0 + 3 * i));
      for (size_t i = 0; i < C0.size(); ++i) C0[i] = static_cast<T>(0.1 * i);
      const Buffer<T> a = device_array(A), b = device_array(B), c = device_array(C0);
      gemm<T>(ta, tb, T(0.5), as_matrix<const T>(a.data(), ar, ac), as_matrix<const T>(b.data(), br, bc), T(2),
              as_matrix(c.data(), M, N), inputs);
      const auto round = [inputs](T x) {
        return inputs == GemmInputs::bf16 ? static_cast<double>(from_bf16(to_bf16(static_cast<float>(x))))
                                          : static_cast<double>(x);
      };
      const std::vector<double> want = gemm_reference(ta, tb, 0.5, A, ac, B, bc, 2.0, C0, M, N, K, round);
      const std::vector<T> got = to_host_vector(v1(c));
      for (int i = 0; i < M * N; ++i) EXPECT_NEAR(got[i], want[i], tol) << "trans " << ta << tb << " element " << i;
    }
}

TEST(Kernels, GemmMatchesDefinition) {
  check_gemm<double>(GemmInputs::native, 1e-13);
  check_gemm<float>(GemmInputs::native, 1e-5);  // |C| < 10: a few float ulps
}

/// gemm_batched of a random batch (C1) against one gemm() per matrix (C2): op 'N', 'T', alpha 0.5,
/// beta 1.5 on the same random C; equal within 1e-5 relative. `between` runs after the batched call
/// (e.g. to switch the host GEMM library for the per-matrix ones).
void expect_batched_equals_per_matrix(int batch, int M, int N, int K, const std::function<void()>& between = [] {}) {
  Buffer<float> A("A", batch * M * K), B("B", batch * N * K), C1("C1", batch * M * N), C2("C2", batch * M * N);
  fill_normal<float>(v1(A), 3, 1, 0, 1.0);
  fill_normal<float>(v1(B), 3, 2, 0, 1.0);
  fill_normal<float>(v1(C1), 3, 3, 0, 1.0);
  Kokkos::deep_copy(C2, C1);
  gemm_batched<float>('N', 'T', 0.5f, View3<const float>(A.data(), batch, M, K), View3<const float>(B.data(), batch, N, K),
                      1.5f, View3<float>(C1.data(), batch, M, N));
  between();
  for (int i = 0; i < batch; ++i)
    gemm<float>('N', 'T', 0.5f, as_matrix<const float>(A.data() + i * M * K, M, K),
                as_matrix<const float>(B.data() + i * N * K, N, K), 1.5f, as_matrix(C2.data() + i * M * N, M, N));
  const std::vector<float> c1 = to_host_vector(v1(C1)), c2 = to_host_vector(v1(C2));
  for (size_t i = 0; i < c1.size(); ++i) EXPECT_NEAR(c1[i], c2[i], 1e-5f * (1 + std::fabs(c2[i]))) << i;
}

// oneDNN's fp32 matmul as the float GEMM library (HostGemm::onednn, what [train] host_gemm = auto
// picks where it is faster): every trans combination against the definition, and a batch against
// one GEMM per matrix; double GEMMs stay OpenBLAS's.
TEST(Kernels, GemmThroughOneDnnMatchesDefinition) {
  if (!host_gemm_available(HostGemm::onednn)) GTEST_SKIP() << "this build has no oneDNN";
  set_host_gemm(HostGemm::onednn);
  check_gemm<float>(GemmInputs::native, 1e-5);
  check_gemm<double>(GemmInputs::native, 1e-13);
  // the batch through oneDNN, each matrix through OpenBLAS
  expect_batched_equals_per_matrix(3, 40, 24, 36, [] { set_host_gemm(HostGemm::openblas); });
  EXPECT_EQ(host_gemm(), HostGemm::openblas);
}

// [train] host_gemm = shape: the seam asks the installed chooser once per new shape (the batch is
// part of the shape, strides are not) and runs each GEMM through the library it picked, bitwise as
// that library alone; removing the chooser forgets the choices. time_host_gemm() times either library.
TEST(Kernels, GemmPerShapeChooserRoutesEachShape) {
  if (!host_gemm_available(HostGemm::onednn)) GTEST_SKIP() << "this build has no oneDNN";
  const int M = 48, N = 40, K = 300;
  std::vector<float> A(M * K), B(N * K);
  for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(std::sin(0.37 * i));
  for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(std::cos(0.11 * i + 1));
  const Buffer<float> a = device_array(A), b = device_array(B);
  // C = A B^T with m rows of A (m <= M): the shape (NT, 1, m, N, K).
  const auto product = [&](int m) {
    Buffer<float> c("c", static_cast<size_t>(m) * N);
    gemm<float>('N', 'T', 1.f, as_matrix<const float>(a.data(), m, K), as_matrix<const float>(b.data(), N, K), 0.f,
                as_matrix(c.data(), m, N));
    return to_host_vector(View1<float>(c.data(), c.extent(0)));
  };
  set_host_gemm(HostGemm::openblas);
  const std::vector<float> ob48 = product(48), ob40 = product(40);
  set_host_gemm(HostGemm::onednn);
  const std::vector<float> od48 = product(48), od40 = product(40);
  ASSERT_NE(ob48, od48) << "the two libraries give the same bits here, so this test could not see the routing";
  ASSERT_NE(ob40, od40) << "the two libraries give the same bits here, so this test could not see the routing";

  std::map<std::string, int> asked;
  set_host_gemm(HostGemm::openblas);  // the process-wide library must not matter under a chooser
  set_host_gemm_chooser([&](const GemmShape& s) {
    ++asked[s.text()];
    return s.m == 48 ? HostGemm::onednn : HostGemm::openblas;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(product(48), od48) << "round " << r;
    EXPECT_EQ(product(40), ob40) << "round " << r;
  }
  // The batched call of the same matrices is another shape (batch 2).
  Buffer<float> a2("a2", 2 * A.size()), b2("b2", 2 * B.size()), c2("c2", 2 * M * N);
  for (int i = 0; i < 2; ++i) {
    Kokkos::deep_copy(View1<float>(a2.data() + i * A.size(), A.size()), View1<const float>(a.data(), A.size()));
    Kokkos::deep_copy(View1<float>(b2.data() + i * B.size(), B.size()), View1<const float>(b.data(), B.size()));
  }
  gemm_batched<float>('N', 'T', 1.f, View3<const float>(a2.data(), 2, M, K), View3<const float>(b2.data(), 2, N, K), 0.f,
                      View3<float>(c2.data(), 2, M, N));
  const std::vector<float> batched = to_host_vector(View1<float>(c2.data(), c2.extent(0)));
  EXPECT_EQ(std::vector<float>(batched.begin() + M * N, batched.end()), od48) << "batch 2 of shape m 48: oneDNN";
  EXPECT_EQ(asked, (std::map<std::string, int>{{"NT 1x40x40x300", 1}, {"NT 1x48x40x300", 1}, {"NT 2x48x40x300", 1}}));
  const auto choices = host_gemm_choices();
  ASSERT_EQ(choices.size(), 3u);
  EXPECT_EQ(choices[0].first.text(), "NT 1x40x40x300");
  EXPECT_EQ(choices[0].second, HostGemm::openblas);
  EXPECT_EQ(choices[1].second, HostGemm::onednn);
  set_host_gemm_chooser({});
  EXPECT_TRUE(host_gemm_choices().empty());
  EXPECT_EQ(product(48), ob48) << "without a chooser: the process-wide library again";

  for (const GemmShape& s : {GemmShape{'N', 'T', 1, 64, 48, 32}, GemmShape{'T', 'N', 3, 16, 8, 24}}) {
    const auto rate = time_host_gemm(s, {HostGemm::openblas, HostGemm::onednn}, 3);
    ASSERT_EQ(rate.size(), 2u);
    for (const auto& rounds : rate) {
      ASSERT_EQ(rounds.size(), 3u);
      for (double f : rounds) EXPECT_TRUE(std::isfinite(f) && f > 1e6) << s.text() << ": " << f << " FLOP/s";
    }
  }
  EXPECT_THROW(time_host_gemm(GemmShape{'N', 'N', 1, 0, 4, 4}, {HostGemm::openblas}, 1), Error);
  EXPECT_THROW(time_host_gemm(GemmShape{'N', 'N', 1, 4, 4, 4}, {HostGemm::openblas}, 0), Error);
}

TEST(Kernels, GemmRejectsWrongShapes) {
  Buffer<float> a("a", 6), b("b", 6), c("c", 4);
  EXPECT_THROW(gemm<float>('N', 'N', 1.f, as_matrix<const float>(a.data(), 2, 3), as_matrix<const float>(b.data(), 2, 3),
                           0.f, as_matrix(c.data(), 2, 2)),
               Error);
  EXPECT_THROW(gemm<float>('X', 'N', 1.f, as_matrix<const float>(a.data(), 2, 3), as_matrix<const float>(b.data(), 3, 2),
                           0.f, as_matrix(c.data(), 2, 2)),
               Error);
}

// bf16 inputs: where the build has them, the result is the definition on bf16-rounded inputs with
// fp32 accumulation (K = 4 products of |x| <= 1: error well under 1e-5); elsewhere an Error.
TEST(Kernels, GemmBf16InputsRoundThenAccumulateInFloat) {
  if (gemm_bf16_supported()) {
    check_gemm<float>(GemmInputs::bf16, 1e-5);
  } else {
    Buffer<float> a("a", 4), b("b", 4), c("c", 4);
    EXPECT_THROW(gemm<float>('N', 'N', 1.f, as_matrix<const float>(a.data(), 2, 2),
                             as_matrix<const float>(b.data(), 2, 2), 0.f, as_matrix(c.data(), 2, 2), GemmInputs::bf16),
                 Error);
  }
}

// bf16 inputs at the sizes training uses (the blocked kernels of oneDNN or cuBLAS, not a small-matrix
// path): every trans combination, gemm_batched over 3 matrices and gemm() on each of them, alpha 0.25
// and beta 1 (the accumulate of linear_backward), against the definition in double on the
// bf16-rounded inputs. fp32 accumulation over K = 320 products of |x| <= 1: within 1e-4.
TEST(Kernels, GemmBf16AtTrainingSizesMatchesDefinition) {
  if (!gemm_bf16_supported()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const int batch = 3, M = 70, N = 96, K = 320;
  // (alpha, beta): the accumulate of linear_backward, then plain C = A B over a C of NaNs (beta = 0
  // must not read C), on the same shapes, so a primitive cached without its alpha and beta fails.
  for (const auto& [alpha, beta] : {std::pair<float, float>{0.25f, 1.f}, std::pair<float, float>{1.f, 0.f}})
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      const int ar = ta == 'N' ? M : K, ac = ta == 'N' ? K : M, br = tb == 'N' ? K : N, bc = tb == 'N' ? N : K;
      const size_t na = static_cast<size_t>(ar) * ac, nb = static_cast<size_t>(br) * bc, nc = static_cast<size_t>(M) * N;
      std::vector<float> A(batch * na), B(batch * nb), C0(batch * nc);
      for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(std::sin(0.37 * i));
      for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(std::cos(0.11 * i + 1));
      for (size_t i = 0; i < C0.size(); ++i)
        C0[i] = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(std::sin(0.05 * i));
      const Buffer<float> a = device_array(A), b = device_array(B), c1 = device_array(C0), c2 = device_array(C0);
      gemm_batched<float>(ta, tb, alpha, View3<const float>(a.data(), batch, ar, ac),
                          View3<const float>(b.data(), batch, br, bc), beta, View3<float>(c1.data(), batch, M, N),
                          GemmInputs::bf16);
      for (int i = 0; i < batch; ++i)
        gemm<float>(ta, tb, alpha, as_matrix<const float>(a.data() + i * na, ar, ac),
                    as_matrix<const float>(b.data() + i * nb, br, bc), beta, as_matrix(c2.data() + i * nc, M, N),
                    GemmInputs::bf16);
      const std::vector<float> batched = to_host_vector(v1(c1)), single = to_host_vector(v1(c2));
      const auto round = [](float x) { return static_cast<double>(from_bf16(to_bf16(x))); };
      for (int i = 0; i < batch; ++i) {
        auto part = [i](const std::vector<float>& v, size_t n) {
          return std::vector<float>(v.begin() + static_cast<long>(i * n), v.begin() + static_cast<long>((i + 1) * n));
        };
        const std::vector<double> want =
            gemm_reference(ta, tb, alpha, part(A, na), ac, part(B, nb), bc, beta, part(C0, nc), M, N, K, round);
        for (size_t j = 0; j < nc; ++j) {
          ASSERT_NEAR(batched[i * nc + j], want[j], 1e-4) << "gemm_batched, trans " << ta << tb << " matrix " << i << " element " << j;
          ASSERT_NEAR(single[i * nc + j], want[j], 1e-4) << "gemm, trans " << ta << tb << " matrix " << i << " element " << j;
        }
      }
    }
}

// GemmInputReuse (kernels/gemm.hpp): an operand kept by a scope is rounded once and the GEMMs of the
// scope read that copy. Oracles: the same GEMMs without a scope (bitwise: rounding is elementwise),
// and the contract itself: an operand overwritten inside the scope still multiplies as it was when
// the scope began (proof that the copy is read), and as it is once the scope has ended.
TEST(Kernels, GemmInputReuseReadsOneRoundedCopyAndChangesNoBit) {
  if (!gemm_bf16_supported()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const int M = 48, N = 40, K = 72;
  std::vector<float> A0(2 * M * K), A1(2 * M * K), Bv(K * N);
  for (size_t i = 0; i < A0.size(); ++i) A0[i] = static_cast<float>(std::sin(0.31 * i));
  for (size_t i = 0; i < A1.size(); ++i) A1[i] = static_cast<float>(std::cos(0.17 * i));
  for (size_t i = 0; i < Bv.size(); ++i) Bv[i] = static_cast<float>(std::sin(0.07 * i + 2));
  // A's operand is the second half of a larger buffer: a kept range covers operands inside it.
  const Buffer<float> a = device_array(A0), a_new = device_array(A1), b = device_array(Bv);
  const float* op = a.data() + M * K;
  // 'N': (M x K) A times (K x N) B; 'T': A^T (K x M) times the first M x N of B.
  auto product = [&](char ta, Buffer<float>& c) {
    if (ta == 'N')
      gemm<float>('N', 'N', 1.f, as_matrix<const float>(op, M, K), as_matrix<const float>(b.data(), K, N), 0.f,
                  as_matrix(c.data(), M, N), GemmInputs::bf16);
    else
      gemm<float>('T', 'N', 1.f, as_matrix<const float>(op, M, K), as_matrix<const float>(b.data(), M, N), 0.f,
                  as_matrix(c.data(), K, N), GemmInputs::bf16);
  };
  Buffer<float> nn0("nn0", M * N), tn0("tn0", K * N), nn1("nn1", M * N), tn1("tn1", K * N), nn2("nn2", M * N),
      tn2("tn2", K * N), nn_new("nn_new", M * N);
  product('N', nn0);  // without a scope
  product('T', tn0);
  // From an empty scratch, so the scope's first GEMM grows it while a copy is kept.
  gemm_release_scratch();
  const std::int64_t scratch_before = MemoryLedger::current(MemCategory::activations);
  MemoryLedger::reset_peak(MemCategory::activations);
  {
    GemmInputReuse<float> reuse(GemmInputs::bf16, a.data(), 2 * M * K);
    EXPECT_THROW(GemmInputReuse<float>(GemmInputs::bf16, b.data(), K * N), Error);  // scopes do not nest
    product('N', nn1);
    product('T', tn1);
    Kokkos::deep_copy(a, a_new);  // against the contract, to see which copy the GEMMs read
    product('N', nn2);
    product('T', tn2);
  }
  EXPECT_EQ(to_host_vector(v1(nn1)), to_host_vector(v1(nn0)));
  EXPECT_EQ(to_host_vector(v1(tn1)), to_host_vector(v1(tn0)));
  EXPECT_EQ(to_host_vector(v1(nn2)), to_host_vector(v1(nn0))) << "the GEMM rounded the operand again";
  EXPECT_EQ(to_host_vector(v1(tn2)), to_host_vector(v1(tn0))) << "the GEMM rounded the operand again";
  product('N', nn_new);  // the scope has ended: the new values
  EXPECT_NE(to_host_vector(v1(nn_new)), to_host_vector(v1(nn0)));
  {  // native inputs keep nothing: a new scope is allowed after the first ended, and changes reach the GEMM
    GemmInputReuse<float> none(GemmInputs::native, a.data(), 2 * M * K);
    GemmInputReuse<double> other(GemmInputs::bf16, nullptr, 0);  // a no-op for double: it does not count as alive
  }
  // The scratch peaked at the kept range and one GEMM's other operand (bf16, 2 bytes each): the
  // largest A + B of a GEMM, as without a scope (the growth freed the first buffer before the next).
  const std::int64_t bound = 2 * (2 * M * K + K * N);
  EXPECT_EQ(MemoryLedger::current(MemCategory::activations) - scratch_before, bound);
  EXPECT_EQ(MemoryLedger::peak(MemCategory::activations) - scratch_before, bound);
}

#if !TRIDENT_HAVE_CUDA
// Bf16Staging itself (host memory): a growth while a copy is kept rounds the kept copy again into
// the new buffer and hands out pointers into that buffer, never the freed one.
namespace staging_test {
int g_rounded = 0;  // elements rounded
void count_round(bf16_t* out, const float* in, std::int64_t n) {
  g_rounded += static_cast<int>(n);
  for (std::int64_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}
}  // namespace staging_test

TEST(Kernels, Bf16StagingGrowthKeepsCopiesValid) {
  std::vector<float> x(400), y(1000);  // x[0, 300) kept
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.3 * i)) * 1.001f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(std::cos(0.7 * i)) * 1.003f;
  detail::Bf16Staging st(staging_test::count_round);
  st.keep(x.data(), 300);  // exactly 300: the next GEMM must grow
  EXPECT_EQ(staging_test::g_rounded, 300);
  // A GEMM reading y and a part of x: y rounded, x's part read from the kept copy.
  auto [a16, b16] = st.inputs(y.data(), 1000, x.data() + 100, 150);
  EXPECT_EQ(staging_test::g_rounded, 300 + 300 + 1000) << "the growth rounds the kept copy again, y once";
  const auto inside = [&st](const bf16_t* p, std::int64_t n) { return p >= st.data() && p + n <= st.data() + st.size(); };
  EXPECT_TRUE(inside(a16, 1000) && inside(b16, 150)) << "a pointer into the buffer the growth freed";
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a16[i], to_bf16(y[i])) << i;
  for (int i = 0; i < 150; ++i) ASSERT_EQ(b16[i], to_bf16(x[100 + i])) << i;
  // No growth now: nothing is rounded again, and the kept copy is still read.
  auto [c16, d16] = st.inputs(x.data(), 300, y.data(), 1000);
  EXPECT_EQ(staging_test::g_rounded, 1600 + 1000);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(c16[i], to_bf16(x[i])) << i;
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(d16[i], to_bf16(y[i])) << i;
  // x[200, 300) lies inside the kept range (read from it); x[200, 400) only partly (rounded on its own).
  st.inputs(x.data() + 200, 100, y.data(), 1);
  EXPECT_EQ(staging_test::g_rounded, 2600 + 1);
  auto [e16, f16] = st.inputs(x.data() + 200, 200, y.data(), 1);
  EXPECT_EQ(staging_test::g_rounded, 2601 + 201);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(e16[i], to_bf16(x[200 + i])) << i;
  (void)f16;
  st.end_keep();
  EXPECT_EQ(st.kept(), 0u);
  st.inputs(x.data(), 300, y.data(), 1);  // nothing kept: x rounded
  EXPECT_EQ(staging_test::g_rounded, 2802 + 301);
  st.release();
}
#endif

// linear_backward with bf16 inputs (dout kept for dX and dW) is bitwise the two GEMMs it stands for.
TEST(Kernels, LinearBackwardBf16EqualsItsTwoGemms) {
  if (!gemm_bf16_supported()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const int N = 33, C = 24, OC = 40;
  auto fill = [](int n, double f) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(f * i + 0.5));
    return v;
  };
  const Buffer<float> inp = device_array(fill(N * C, 0.13)), w = device_array(fill(OC * C, 0.29)),
                      dout = device_array(fill(N * OC, 0.41)), dw0 = device_array(fill(OC * C, 0.05));
  Buffer<float> dinp1("dinp1", N * C), dinp2("dinp2", N * C), dw1("dw1", OC * C), dw2("dw2", OC * C);
  Kokkos::deep_copy(dw1, dw0);
  Kokkos::deep_copy(dw2, dw0);
  linear_backward<float>(as_matrix(dinp1.data(), N, C), as_matrix(dw1.data(), OC, C), View1<float>(),
                         as_matrix<const float>(dout.data(), N, OC), as_matrix<const float>(inp.data(), N, C),
                         as_matrix<const float>(w.data(), OC, C), false, GemmInputs::bf16);
  gemm<float>('N', 'N', 1.f, as_matrix<const float>(dout.data(), N, OC), as_matrix<const float>(w.data(), OC, C), 0.f,
              as_matrix(dinp2.data(), N, C), GemmInputs::bf16);
  gemm<float>('T', 'N', 1.f, as_matrix<const float>(dout.data(), N, OC), as_matrix<const float>(inp.data(), N, C), 1.f,
              as_matrix(dw2.data(), OC, C), GemmInputs::bf16);
  EXPECT_EQ(to_host_vector(v1(dinp1)), to_host_vector(v1(dinp2)));
  EXPECT_EQ(to_host_vector(v1(dw1)), to_host_vector(v1(dw2)));
}

// gemm_bf16 with one operand held in bf16 is bitwise gemm() with bf16 inputs on the float operand
// that rounds to it, for the two shapes the model uses (the forward's inp W^T with inp held, the
// weight gradient's dout^T inp with inp held), also where the float operand is kept by a
// GemmInputReuse scope; and the linear layer's bf16 forms are bitwise the float ones. Where bf16
// GEMMs are missing, gemm_bf16 raises an Error.
TEST(Kernels, GemmBf16HeldOperandEqualsRoundingGemm) {
  const int N = 37, C = 48, OC = 40;
  auto fill = [](int n, double f) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(f * i + 0.5)) * 1.0009f;
    return v;
  };
  const std::vector<float> inp_h = fill(N * C, 0.13);
  std::vector<bf16_t> inp16_h(inp_h.size());
  for (size_t i = 0; i < inp_h.size(); ++i) inp16_h[i] = to_bf16(inp_h[i]);
  const Buffer<float> inp = device_array(inp_h), w = device_array(fill(OC * C, 0.29)),
                      dout = device_array(fill(N * OC, 0.41)), bias = device_array(fill(OC, 0.7)),
                      dw0 = device_array(fill(OC * C, 0.05));
  const Buffer<bf16_t> inp16 = device_array(inp16_h);
  const auto inp_m = as_matrix<const float>(inp.data(), N, C);
  const auto inp16_m = as_matrix<const bf16_t>(inp16.data(), N, C);
  const auto w_m = as_matrix<const float>(w.data(), OC, C);
  const auto dout_m = as_matrix<const float>(dout.data(), N, OC);
  if (!gemm_bf16_supported()) {
    Buffer<float> y("y", N * OC);
    EXPECT_THROW(gemm_bf16('N', 'T', 1.f, inp16_m, w_m, 0.f, as_matrix(y.data(), N, OC)), Error);
    return;
  }
  Buffer<float> y1("y1", N * OC), y2("y2", N * OC), y3("y3", N * OC), y4("y4", N * OC);
  gemm<float>('N', 'T', 1.f, inp_m, w_m, 0.f, as_matrix(y1.data(), N, OC), GemmInputs::bf16);
  gemm_bf16('N', 'T', 1.f, inp16_m, w_m, 0.f, as_matrix(y2.data(), N, OC));
  EXPECT_EQ(to_host_vector(v1(y2)), to_host_vector(v1(y1)));
  linear_forward<float>(as_matrix(y3.data(), N, OC), inp_m, w_m, View1<const float>(bias.data(), OC), GemmInputs::bf16);
  linear_forward_bf16(as_matrix(y4.data(), N, OC), inp16_m, w_m, View1<const float>(bias.data(), OC));
  EXPECT_EQ(to_host_vector(v1(y4)), to_host_vector(v1(y3)));
  Buffer<float> g1("g1", OC * C), g2("g2", OC * C);
  Kokkos::deep_copy(g1, dw0);
  Kokkos::deep_copy(g2, dw0);
  gemm<float>('T', 'N', 0.5f, dout_m, inp_m, 1.f, as_matrix(g1.data(), OC, C), GemmInputs::bf16);
  {
    GemmInputReuse<float> reuse(GemmInputs::bf16, dout.data(), N * OC);  // dout read from the kept copy
    gemm_bf16('T', 'N', 0.5f, dout_m, inp16_m, 1.f, as_matrix(g2.data(), OC, C));
  }
  EXPECT_EQ(to_host_vector(v1(g2)), to_host_vector(v1(g1)));
  Buffer<float> dx1("dx1", N * C), dx2("dx2", N * C), db1("db1", OC), db2("db2", OC);
  Kokkos::deep_copy(g1, dw0);
  Kokkos::deep_copy(g2, dw0);
  linear_backward<float>(as_matrix(dx1.data(), N, C), as_matrix(g1.data(), OC, C), v1(db1), dout_m, inp_m, w_m, false,
                         GemmInputs::bf16);
  linear_backward_bf16(as_matrix(dx2.data(), N, C), as_matrix(g2.data(), OC, C), v1(db2), dout_m, inp16_m, w_m, false);
  EXPECT_EQ(to_host_vector(v1(dx2)), to_host_vector(v1(dx1)));
  EXPECT_EQ(to_host_vector(v1(g2)), to_host_vector(v1(g1)));
  EXPECT_EQ(to_host_vector(v1(db2)), to_host_vector(v1(db1)));
  // A held operand of the wrong shape is refused as gemm() refuses it.
  EXPECT_THROW(gemm_bf16('N', 'N', 1.f, inp16_m, w_m, 0.f, as_matrix(y2.data(), N, OC)), Error);
}

// gemm_batched_bf16 (both operands held in bf16) is bitwise gemm_batched with bf16 inputs on the
// float operands that round to them, for every trans combination (the attention's four shapes
// among them), also with A written into a GemmBf16Room by round_from. The room's contract: GEMMs on
// held operands run inside it, one that would grow the scratch by staging float operands is
// refused (growing would move the room), rooms and GemmInputReuse scopes do not nest, round_from
// past the room is refused, and the scratch serves rounding GEMMs again once the room is returned.
TEST(Kernels, GemmBatchedBf16AndRoomEqualRoundingGemms) {
  const int batch = 3, M = 21, N = 19, K = 26;
  if (!gemm_bf16_supported()) {
    Buffer<bf16_t> a16("a16", batch * M * K), b16("b16", batch * K * N);
    Buffer<float> c("c", batch * M * N);
    EXPECT_THROW(gemm_batched_bf16('N', 'N', 1.f, View3<const bf16_t>(a16.data(), batch, M, K),
                                   View3<const bf16_t>(b16.data(), batch, K, N), 0.f,
                                   View3<float>(c.data(), batch, M, N)),
                 Error);
    EXPECT_THROW(GemmBf16Room(4), Error);
    return;
  }
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'}) {
      SCOPED_TRACE(testing::Message() << "trans " << ta << tb);
      const int ar = ta == 'N' ? M : K, ac = ta == 'N' ? K : M, br = tb == 'N' ? K : N, bc = tb == 'N' ? N : K;
      const std::int64_t na = static_cast<std::int64_t>(batch) * ar * ac, nb = static_cast<std::int64_t>(batch) * br * bc;
      std::vector<float> A(na), Bv(nb);
      for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(std::sin(0.37 * i)) * 1.0007f;
      for (size_t i = 0; i < Bv.size(); ++i) Bv[i] = static_cast<float>(std::cos(0.11 * i + 1)) * 1.0003f;
      std::vector<bf16_t> A16(A.size()), B16(Bv.size());
      for (size_t i = 0; i < A.size(); ++i) A16[i] = to_bf16(A[i]);
      for (size_t i = 0; i < Bv.size(); ++i) B16[i] = to_bf16(Bv[i]);
      const Buffer<float> a = device_array(A), b = device_array(Bv);
      const Buffer<bf16_t> a16 = device_array(A16), b16 = device_array(B16);
      Buffer<float> c1("c1", batch * M * N), c2("c2", batch * M * N), c3("c3", batch * M * N), c4("c4", batch * M * N);
      const View3<const float> af(a.data(), batch, ar, ac), bf(b.data(), batch, br, bc);
      const View3<const bf16_t> bh(b16.data(), batch, br, bc);
      gemm_batched<float>(ta, tb, 0.5f, af, bf, 0.f, View3<float>(c1.data(), batch, M, N), GemmInputs::bf16);
      gemm_batched_bf16(ta, tb, 0.5f, View3<const bf16_t>(a16.data(), batch, ar, ac), bh, 0.f,
                        View3<float>(c2.data(), batch, M, N));
      EXPECT_EQ(to_host_vector(v1(c2)), to_host_vector(v1(c1)));
      gemm_release_scratch();  // the room then is the whole scratch: staging more must grow it
      {
        GemmBf16Room room(na);
        room.round_from(a.data(), na);
        EXPECT_THROW(GemmInputReuse<float>(GemmInputs::bf16, b.data(), nb), Error);
        EXPECT_THROW(GemmBf16Room(1), Error);
        EXPECT_THROW(room.round_from(a.data(), na + 1), Error);
        gemm_batched_bf16(ta, tb, 0.5f, View3<const bf16_t>(room.data(), batch, ar, ac), bh, 0.f,
                          View3<float>(c3.data(), batch, M, N));
        EXPECT_THROW(gemm_batched<float>(ta, tb, 0.5f, af, bf, 0.f, View3<float>(c4.data(), batch, M, N),
                                         GemmInputs::bf16),
                     Error);
      }
      EXPECT_EQ(to_host_vector(v1(c3)), to_host_vector(v1(c1)));
      gemm_batched<float>(ta, tb, 0.5f, af, bf, 0.f, View3<float>(c4.data(), batch, M, N), GemmInputs::bf16);
      EXPECT_EQ(to_host_vector(v1(c4)), to_host_vector(v1(c1)));
    }
}

// The bf16 outputs of LayerNorm and GELU are bitwise the bf16 rounding of the float outputs, at
// every length from 1 to 70 (the vector loops' bodies and tails) and at lengths that cross GELU's
// blocks of 4096, on NaN, +-inf, +-0 and values at bf16 rounding ties, and with inputs and outputs
// at offsets of 0, 1 and 3 elements from a 64-byte boundary (a vectoriser that peels for
// alignment would give leading elements another path in one of the two).
TEST(Kernels, LayerNormAndGeluBf16OutputsAreTheRoundedFloatOutputs) {
  auto values = [](int n, double f) {
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = static_cast<float>(3.0 * std::sin(f * i + 0.3)) * 1.0011f;
    return v;
  };
  std::vector<int> lengths;
  for (int n = 1; n <= 70; ++n) lengths.push_back(n);
  lengths.insert(lengths.end(), {4096 + 37, 3 * 4096 + 5});
  for (int off : {0, 1, 3})
    for (int n : lengths) {
      std::vector<float> x = values(n + off, 0.77);
      if (n >= 6) {
        x[off + 0] = std::numeric_limits<float>::quiet_NaN();
        x[off + 1] = std::numeric_limits<float>::infinity();
        x[off + 2] = -std::numeric_limits<float>::infinity();
        x[off + 3] = -0.f;
        x[off + 4] = 1.f + 1.f / 256;  // a tie: rounds to even (1)
        x[off + 5] = 1.f + 3.f / 256;  // a tie: rounds to even (1 + 4/256)
      }
      const Buffer<float> in = device_array(x);
      Buffer<float> out("out", n + off);
      Buffer<bf16_t> out16("out16", n + off);
      const View1<const float> inv(in.data() + off, n);
      gelu_forward<float>(View1<float>(out.data() + off, n), inv);
      gelu_forward_bf16(View1<bf16_t>(out16.data() + off, n), inv);
      const std::vector<float> f = to_host_vector(v1(out));
      const std::vector<bf16_t> h = to_host_vector(View1<const bf16_t>(out16.data(), n + off));
      for (int i = off; i < n + off; ++i)
        ASSERT_EQ(h[i], to_bf16(f[i])) << "GELU, length " << n << ", offset " << off << ", element " << i - off;
    }
  for (int off : {0, 1, 3})
    for (int C : {1, 7, 16, 33, 64, 70}) {
      const int N = 5;
      const Buffer<float> in = device_array(values(N * C + off, 0.91)), w = device_array(values(C, 0.37)),
                          b = device_array(values(C, 0.53));
      Buffer<float> out("out", N * C + off), m1("m1", N), r1("r1", N), m2("m2", N), r2("r2", N);
      Buffer<bf16_t> out16("out16", N * C + off);
      const auto in_m = as_matrix<const float>(in.data() + off, N, C);
      layernorm_forward<float>(as_matrix(out.data() + off, N, C), v1(m1), v1(r1), in_m,
                               View1<const float>(w.data(), C), View1<const float>(b.data(), C));
      layernorm_forward_bf16(as_matrix(out16.data() + off, N, C), v1(m2), v1(r2), in_m,
                             View1<const float>(w.data(), C), View1<const float>(b.data(), C));
      const std::vector<float> f = to_host_vector(v1(out));
      const std::vector<bf16_t> h = to_host_vector(View1<const bf16_t>(out16.data(), N * C + off));
      for (int i = off; i < N * C + off; ++i)
        ASSERT_EQ(h[i], to_bf16(f[i])) << "LayerNorm, C " << C << ", offset " << off << ", element " << i - off;
      EXPECT_EQ(to_host_vector(v1(m2)), to_host_vector(v1(m1)));
      EXPECT_EQ(to_host_vector(v1(r2)), to_host_vector(v1(r1)));
    }
}

#if TRIDENT_HAVE_ONEDNN && !TRIDENT_HAVE_CUDA
// The host GEMM's vectorised rounding is bitwise to_bf16 (kernels/convert.hpp) on every class of
// input: ties (both parities), carries into the exponent, subnormals, +-0, +-inf, quiet and
// signalling NaNs, the largest finite float (rounds to inf), and a sweep of bit patterns.
TEST(Kernels, HostBf16RoundingEqualsToBf16) {
  std::vector<std::uint32_t> bits = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu,
                                     0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                     0xffbfffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u};
  for (std::uint64_t u = 0; u < 0xffff0000u; u += 0x00010001u * 97u) bits.push_back(static_cast<std::uint32_t>(u));
  std::vector<float> in(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(&in[i], &bits[i], sizeof(float));
  std::vector<bf16_t> out(in.size());
  detail::round_to_bf16_host(out.data(), in.data(), static_cast<std::int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], to_bf16(in[i])) << std::hex << "input bits 0x" << bits[i];
  // Blocks of 32 (the AVX512-BF16 path's unit) with one subnormal among normal values, at every
  // position of the block, and lengths that leave a tail.
  for (int pos = 0; pos < 32; ++pos)
    for (int n : {32, 45, 64 + 7}) {
      std::vector<float> x(n);
      for (int i = 0; i < n; ++i) x[i] = static_cast<float>(std::sin(0.7 * i + pos)) * 3.f;
      std::uint32_t sub = 0x00012345u + static_cast<std::uint32_t>(pos) * 0x1111u;
      if (pos % 2) sub |= 0x80000000u;
      std::memcpy(&x[pos], &sub, sizeof sub);
      std::vector<bf16_t> y(n);
      detail::round_to_bf16_host(y.data(), x.data(), n);
      for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], to_bf16(x[i])) << "length " << n << ", subnormal at " << pos << ", element " << i;
    }
}
#endif

TEST(Kernels, GemmBatchedEqualsOneGemmPerMatrix) { expect_batched_equals_per_matrix(3, 4, 5, 6); }

struct AttentionCase {
  static constexpr int B = 2, T = 5, NH = 2, C = 8;
  Buffer<double> qkv = random_buffer(B * T * 3 * C, 21), R = random_buffer(B * T * C, 22);
  Buffer<double> out{"out", B * T * C}, att{"att", B * NH * T * T}, ws{"ws", 7 * B * T * C + B * NH * T * T};
  AttentionDropout drop;
  AttentionScratch<double> scratch() {
    AttentionScratch<double> s;
    View1<double>* parts[] = {&s.q, &s.k, &s.v, &s.y, &s.dq, &s.dk, &s.dv};
    for (int i = 0; i < 7; ++i) *parts[i] = View1<double>(ws.data() + i * B * T * C, B * T * C);
    s.pdrop = View1<double>(ws.data() + 7 * B * T * C, B * NH * T * T);
    return s;
  }
  explicit AttentionCase(double p) {
    drop.key.seed = 7;
    drop.key.p = p;
    drop.sample_offset = 3;
    drop.n_head_total = NH;
  }
};

/// Checks one attention implementation against finite differences, causality and normalisation.
void check_attention(double p, bool fast) {
  AttentionCase a(p);
  const int B = a.B, T = a.T, NH = a.NH, C = a.C;
  const auto ws = a.scratch();
  auto loss = [&] {
    if (fast)
      attention_forward<double>(v2(a.out, B * T, C), v1(a.att), v2(a.qkv, B * T, 3 * C), B, T, NH, a.drop, ws);
    else
      attention_forward_ref<double>(v2(a.out, B * T, C), v1(a.att), v2(a.qkv, B * T, 3 * C), B, T, NH, a.drop);
    return dot(a.out, a.R);
  };
  loss();
  const auto att = host(a.att);
  for (int r = 0; r < B * NH * T; ++r) {
    const int t = r % T;
    double s = 0;
    for (int t2 = 0; t2 < T; ++t2) {
      if (t2 > t) {
        EXPECT_EQ(att(r * T + t2), 0.0);
      }
      s += att(r * T + t2);
    }
    EXPECT_NEAR(s, 1.0, 1e-12);
  }
  Buffer<double> dqkv("dqkv", B * T * 3 * C), dpre("dpre", B * NH * T * T);
  if (fast)
    attention_backward<double>(v2(dqkv, B * T, 3 * C), v1(dpre), v2(a.R, B * T, C), v2(a.qkv, B * T, 3 * C),
                               v1(a.att), B, T, NH, a.drop, ws);
  else
    attention_backward_ref<double>(v2(dqkv, B * T, 3 * C), v1(dpre), v2(a.R, B * T, C), v2(a.qkv, B * T, 3 * C),
                                   v1(a.att), B, T, NH, a.drop);
  expect_gradient(fast ? "attention (gemm) dqkv" : "attention (ref) dqkv", v1(a.qkv), v1(dqkv), loss);
}

TEST(Kernels, AttentionBackwardMatchesFiniteDifferences) {
  check_attention(0.0, false);
  check_attention(0.0, true);
}
TEST(Kernels, AttentionWithDropoutBackwardMatchesFiniteDifferences) {
  check_attention(0.3, false);
  check_attention(0.3, true);
}

/// The fast kernel against the loop reference on the same inputs, in float (the training type):
/// only summation order differs, so 1e-6 of the largest value.
void check_attention_equals_reference(int B, int T, int NH, int C) {
  SCOPED_TRACE(testing::Message() << "B " << B << " T " << T << " NH " << NH << " C " << C);
  Buffer<float> qkv("qkv", B * T * 3 * C), dout("dout", B * T * C);
  fill_normal<float>(View1<float>(qkv.data(), qkv.extent(0)), 1, 2, 0, 1.0);
  fill_normal<float>(View1<float>(dout.data(), dout.extent(0)), 1, 3, 0, 1.0);
  Buffer<float> o1("o1", B * T * C), o2("o2", B * T * C), a1("a1", B * NH * T * T), a2("a2", B * NH * T * T),
      d1("d1", B * T * 3 * C), d2("d2", B * T * 3 * C), pre("pre", B * NH * T * T),
      ws("ws", 7 * B * T * C + B * NH * T * T);
  AttentionScratch<float> s;
  View1<float>* parts[] = {&s.q, &s.k, &s.v, &s.y, &s.dq, &s.dk, &s.dv};
  for (int i = 0; i < 7; ++i) *parts[i] = View1<float>(ws.data() + i * B * T * C, B * T * C);
  s.pdrop = View1<float>(ws.data() + 7 * B * T * C, B * NH * T * T);
  AttentionDropout drop;
  drop.key.seed = 11;
  drop.key.p = 0.2;
  drop.n_head_total = NH;
  auto m = [](Buffer<float>& b, int r, int c) { return as_matrix(b.data(), r, c); };
  auto cm = [](Buffer<float>& b, int r, int c) { return as_matrix<const float>(b.data(), r, c); };
  auto f1 = View1<float>(a1.data(), a1.extent(0)), f2 = View1<float>(a2.data(), a2.extent(0));
  attention_forward_ref<float>(m(o1, B * T, C), f1, cm(qkv, B * T, 3 * C), B, T, NH, drop);
  attention_forward<float>(m(o2, B * T, C), f2, cm(qkv, B * T, 3 * C), B, T, NH, drop, s);
  attention_backward_ref<float>(m(d1, B * T, 3 * C), View1<float>(pre.data(), pre.extent(0)), cm(dout, B * T, C),
                                cm(qkv, B * T, 3 * C), f1, B, T, NH, drop);
  attention_backward<float>(m(d2, B * T, 3 * C), View1<float>(pre.data(), pre.extent(0)), cm(dout, B * T, C),
                            cm(qkv, B * T, 3 * C), f2, B, T, NH, drop, s);
  auto max_rel = [](const Buffer<float>& x_dev, const Buffer<float>& y_dev) {
    const auto x = host(x_dev), y = host(y_dev);
    double d = 0, mx = 0;
    for (size_t i = 0; i < x.extent(0); ++i) {
      d = std::max(d, static_cast<double>(std::fabs(x(i) - y(i))));
      mx = std::max(mx, static_cast<double>(std::fabs(x(i))));
    }
    return d / mx;
  };
  EXPECT_LE(max_rel(o1, o2), 1e-6);
  EXPECT_LE(max_rel(a1, a2), 1e-6);
  EXPECT_LE(max_rel(d1, d2), 1e-6);
}

TEST(Kernels, AttentionGemmEqualsReference) {
  check_attention_equals_reference(3, 7, 3, 12);
  // Rows of 37 scores and heads of 40 channels: more than a 32-lane row of the GPU shape, not a
  // multiple of it (kernels/row_parallel.hpp), for the softmax and the head packing.
  check_attention_equals_reference(2, 37, 2, 80);
}

/// The fused kernels (never storing (T, T)) against the GEMM kernels, which are checked against the
/// reference and finite differences above: output and dqkv equal up to summation order (fp32), with
/// dropout and with grouped-query attention; the saved row log-sum-exp reproduces the GEMM path's
/// probabilities, P(t, j) = exp(s_tj - lse_t); with bf16 inputs both paths round the same operands
/// (equal up to summation order as in fp32, measured ~1e-7; the fp32 fused kernel is ~3e-3 away).
void check_fused_attention(int B, int T, int NH, int NKV, int HS, double p, GemmInputs inputs, double tol) {
  SCOPED_TRACE(testing::Message() << "B " << B << " T " << T << " NH " << NH << " NKV " << NKV << " HS " << HS
                                  << " dropout " << p << (inputs == GemmInputs::bf16 ? " bf16" : " fp32"));
  const int C = NH * HS, W = (NH + 2 * NKV) * HS;
  Buffer<float> qkv("qkv", B * T * W), dout("dout", B * T * C);
  fill_normal<float>(View1<float>(qkv.data(), qkv.extent(0)), 1, 2, 0, 1.0);
  fill_normal<float>(View1<float>(dout.data(), dout.extent(0)), 1, 3, 0, 1.0);
  Buffer<float> o1("o1", B * T * C), o2("o2", B * T * C), att("att", B * NH * T * T), lse("lse", B * NH * T),
      d1("d1", B * T * W), d2("d2", B * T * W), pre("pre", B * NH * T * T),
      ws("ws", 7 * B * T * C + B * NH * T * T + AttentionScratch<float>::fused_elements(B, T, C, NH));
  AttentionScratch<float> s;
  View1<float>* parts[] = {&s.q, &s.k, &s.v, &s.y, &s.dq, &s.dk, &s.dv};
  for (int i = 0; i < 7; ++i) *parts[i] = View1<float>(ws.data() + i * B * T * C, B * T * C);
  s.pdrop = View1<float>(ws.data() + 7 * B * T * C, B * NH * T * T);
  s.fused = View1<float>(ws.data() + 7 * B * T * C + B * NH * T * T, AttentionScratch<float>::fused_elements(B, T, C, NH));
  AttentionDropout drop;
  drop.key.seed = 11;
  drop.key.p = p;
  drop.n_head_total = NH;
  auto m = [](Buffer<float>& b, int r, int c) { return as_matrix(b.data(), r, c); };
  auto cm = [](Buffer<float>& b, int r, int c) { return as_matrix<const float>(b.data(), r, c); };
  auto v = [](Buffer<float>& b) { return View1<float>(b.data(), b.extent(0)); };
  auto cv = [](Buffer<float>& b) { return View1<const float>(b.data(), b.extent(0)); };
  attention_forward<float>(m(o1, B * T, C), v(att), cm(qkv, B * T, W), B, T, NH, drop, s, inputs, NKV);
  attention_backward<float>(m(d1, B * T, W), v(pre), cm(dout, B * T, C), cm(qkv, B * T, W), cv(att), B, T, NH, drop, s,
                            inputs, NKV);
  // The GEMM kernels left near-equal results in the shared scratch: poison it, so a row or head the
  // fused kernels failed to write shows.
  Kokkos::deep_copy(ws, std::numeric_limits<float>::quiet_NaN());
  attention_forward_fused<float>(m(o2, B * T, C), v(lse), cm(qkv, B * T, W), B, T, NH, drop, s, inputs, NKV);
  attention_backward_fused<float>(m(d2, B * T, W), cm(dout, B * T, C), cm(qkv, B * T, W), cv(lse),
                                  B, T, NH, drop, s, inputs, NKV);
  auto max_rel = [](const Buffer<float>& x_dev, const Buffer<float>& y_dev) {
    const auto x = host(x_dev), y = host(y_dev);
    double d = 0, mx = 0;
    for (size_t i = 0; i < x.extent(0); ++i) {
      d = std::max(d, static_cast<double>(std::fabs(x(i) - y(i))));
      mx = std::max(mx, static_cast<double>(std::fabs(x(i))));
    }
    return d / mx;
  };
  EXPECT_LE(max_rel(o1, o2), tol) << "attention output";
  EXPECT_LE(max_rel(d1, d2), tol) << "dqkv";
  if (inputs == GemmInputs::bf16) {  // the fused kernel really rounds: fp32 fused is further from bf16 GEMM
    Buffer<float> o3("o3", B * T * C), d3("d3", B * T * W), lse3("lse3", B * NH * T);
    attention_forward_fused<float>(m(o3, B * T, C), v(lse3), cm(qkv, B * T, W), B, T, NH, drop, s,
                                   GemmInputs::native, NKV);
    attention_backward_fused<float>(m(d3, B * T, W), cm(dout, B * T, C), cm(qkv, B * T, W), cv(lse3), B, T, NH, drop, s, GemmInputs::native, NKV);
    EXPECT_LT(4 * max_rel(o1, o2), max_rel(o1, o3)) << "output";
    EXPECT_LT(4 * max_rel(d1, d2), max_rel(d1, d3)) << "dqkv";
  }
  // P(t, 0) = exp(s_t0 - lse_t): key 0 is visible to every query row. s in double from qkv, with the
  // bf16 rounding of q and k where the GEMM path has it.
  const auto qh = host(qkv), ah = host(att), lh = host(lse);
  const auto r16 = [inputs](float x) {
    return inputs == GemmInputs::bf16 ? static_cast<double>(from_bf16(to_bf16(x))) : static_cast<double>(x);
  };
  const int group = NH / NKV;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        double st0 = 0;
        for (int c = 0; c < HS; ++c)
          st0 += r16(qh((b * T + t) * W + h * HS + c)) * r16(qh((b * T + 0) * W + C + (h / group) * HS + c));
        st0 /= std::sqrt(static_cast<double>(HS));
        const long r = (static_cast<long>(b) * NH + h) * T + t;
        EXPECT_NEAR(std::exp(st0 - lh(r)), ah(r * T), 1e-5 * (1 + ah(r * T))) << "row " << r;
      }
}

TEST(Kernels, FusedAttentionEqualsGemmAttention) {
  check_fused_attention(3, 7, 3, 3, 4, 0.0, GemmInputs::native, 1e-5);
  check_fused_attention(2, 37, 2, 2, 40, 0.2, GemmInputs::native, 1e-5);
  check_fused_attention(2, 9, 4, 2, 3, 0.1, GemmInputs::native, 1e-5);  // grouped-query attention
  if (gemm_bf16_supported()) {
    check_fused_attention(2, 37, 2, 2, 40, 0.2, GemmInputs::bf16, 1e-5);
    check_fused_attention(2, 9, 4, 2, 8, 0.0, GemmInputs::bf16, 1e-5);
  }
}

// With bf16 inputs the GEMM attention writes every GEMM operand in bf16 where it is produced
// (packed q, k, v and dY; the probabilities and dS in a GemmBf16Room) instead of rounding float
// copies in each GEMM. Oracle: the GEMMs of the definition through gemm_batched with bf16 inputs,
// which round float operands themselves, on head-major copies the test makes: Y = P V and
// dV = P^T dY bitwise (P the probabilities the kernel saved), softmax(scale Q K^T) equal to them,
// and dQ = scale dS K, dK = scale dS^T Q from dS = P (dP - rowsum(P dP)) computed here in float
// (equal up to a bf16 rounding of dS that a last-bit difference of the test's float arithmetic may
// move: 1e-3 of the largest value).
TEST(Kernels, AttentionBf16OperandsAreTheRoundedGemmInputs) {
  if (!gemm_bf16_supported()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  const int B = 2, T = 9, NH = 3, HS = 8, C = NH * HS, W = 3 * C;
  const long heads = static_cast<long>(B) * NH;
  Buffer<float> qkv("qkv", B * T * W), dout("dout", B * T * C);
  fill_normal<float>(View1<float>(qkv.data(), qkv.extent(0)), 1, 4, 0, 1.0);
  fill_normal<float>(View1<float>(dout.data(), dout.extent(0)), 1, 5, 0, 1.0);
  Buffer<float> out("out", B * T * C), att("att", heads * T * T), dqkv("dqkv", B * T * W), pre("pre", heads * T * T),
      ws("ws", 7 * B * T * C);
  AttentionScratch<float> s;
  View1<float>* parts[] = {&s.q, &s.k, &s.v, &s.y, &s.dq, &s.dk, &s.dv};
  for (int i = 0; i < 7; ++i) *parts[i] = View1<float>(ws.data() + i * B * T * C, B * T * C);
  const AttentionDropout drop;  // p = 0
  attention_forward<float>(as_matrix(out.data(), B * T, C), v1(att), as_matrix<const float>(qkv.data(), B * T, W), B,
                           T, NH, drop, s, GemmInputs::bf16);
  {  // other layers' GEMMs use the scratch between forward and backward: poison it (bf16 NaN)
    GemmBf16Room poison(heads * T * T);
    Kokkos::deep_copy(View1<bf16_t>(poison.data(), heads * T * T), bf16_t{0x7fc0});
  }
  Kokkos::deep_copy(ws, std::numeric_limits<float>::quiet_NaN());
  attention_backward<float>(as_matrix(dqkv.data(), B * T, W), v1(pre), as_matrix<const float>(dout.data(), B * T, C),
                            as_matrix<const float>(qkv.data(), B * T, W), View1<const float>(att.data(), heads * T * T),
                            B, T, NH, drop, s, GemmInputs::bf16);
  const std::vector<float> qh = to_host_vector(v1(qkv)), dyh = to_host_vector(v1(dout)), P = to_host_vector(v1(att)),
                           outh = to_host_vector(v1(out)), dh = to_host_vector(v1(dqkv));
  // Head-major (B*NH, T, HS) copies of column block `col0` of a (B*T, ld) matrix.
  auto heads_of = [&](const std::vector<float>& m, int ld, int col0) {
    std::vector<float> r(static_cast<size_t>(heads) * T * HS);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < HS; ++c)
            r[((static_cast<size_t>(b) * NH + h) * T + t) * HS + c] = m[(static_cast<size_t>(b) * T + t) * ld + col0 + h * HS + c];
    return r;
  };
  const Buffer<float> Q = device_array(heads_of(qh, W, 0)), K = device_array(heads_of(qh, W, C)),
                      V = device_array(heads_of(qh, W, 2 * C)), dY = device_array(heads_of(dyh, C, 0)),
                      Pd = device_array(P);
  auto b3 = [&](const Buffer<float>& x, int r, int c) { return View3<const float>(x.data(), heads, r, c); };
  auto o3 = [&](Buffer<float>& x, int r, int c) { return View3<float>(x.data(), heads, r, c); };
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
  Buffer<float> S("S", heads * T * T), Y("Y", heads * T * HS), dV("dV", heads * T * HS), dP("dP", heads * T * T);
  gemm_batched<float>('N', 'T', scale, b3(Q, T, HS), b3(K, T, HS), 0.f, o3(S, T, T), GemmInputs::bf16);
  gemm_batched<float>('N', 'N', 1.f, b3(Pd, T, T), b3(V, T, HS), 0.f, o3(Y, T, HS), GemmInputs::bf16);
  gemm_batched<float>('T', 'N', 1.f, b3(Pd, T, T), b3(dY, T, HS), 0.f, o3(dV, T, HS), GemmInputs::bf16);
  gemm_batched<float>('N', 'T', 1.f, b3(dY, T, HS), b3(V, T, HS), 0.f, o3(dP, T, T), GemmInputs::bf16);
  const std::vector<float> Sh = to_host_vector(v1(S)), dPh = to_host_vector(v1(dP));
  std::vector<float> dS(P.size(), 0.f);
  for (long r = 0; r < heads * T; ++r) {
    const int t = static_cast<int>(r % T);
    double mx = -1e300, sum = 0;
    for (int j = 0; j <= t; ++j) mx = std::max(mx, static_cast<double>(Sh[r * T + j]));
    for (int j = 0; j <= t; ++j) sum += std::exp(Sh[r * T + j] - mx);
    for (int j = 0; j < T; ++j)
      ASSERT_NEAR(P[r * T + j], j <= t ? std::exp(Sh[r * T + j] - mx) / sum : 0.0, 1e-6) << "row " << r << " key " << j;
    float dot = 0;
    for (int j = 0; j <= t; ++j) dot += P[r * T + j] * dPh[r * T + j];
    for (int j = 0; j <= t; ++j) dS[r * T + j] = P[r * T + j] * (dPh[r * T + j] - dot);
  }
  const Buffer<float> dSd = device_array(dS);
  Buffer<float> dQ("dQ", heads * T * HS), dK("dK", heads * T * HS);
  gemm_batched<float>('N', 'N', scale, b3(dSd, T, T), b3(K, T, HS), 0.f, o3(dQ, T, HS), GemmInputs::bf16);
  gemm_batched<float>('T', 'N', scale, b3(dSd, T, T), b3(Q, T, HS), 0.f, o3(dK, T, HS), GemmInputs::bf16);
  const std::vector<float> Yh = to_host_vector(v1(Y)), dVh = to_host_vector(v1(dV)), dQh = to_host_vector(v1(dQ)),
                           dKh = to_host_vector(v1(dK));
  double dq_max = 0, dk_max = 0;
  for (float x : dQh) dq_max = std::max(dq_max, static_cast<double>(std::fabs(x)));
  for (float x : dKh) dk_max = std::max(dk_max, static_cast<double>(std::fabs(x)));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < HS; ++c) {
          const size_t hm = ((static_cast<size_t>(b) * NH + h) * T + t) * HS + c, row = static_cast<size_t>(b) * T + t;
          ASSERT_EQ(outh[row * C + h * HS + c], Yh[hm]) << "Y, sequence " << b << " head " << h << " t " << t;
          ASSERT_EQ(dh[row * W + 2 * C + h * HS + c], dVh[hm]) << "dV, sequence " << b << " head " << h << " t " << t;
          ASSERT_NEAR(dh[row * W + h * HS + c], dQh[hm], 1e-3 * dq_max) << "dQ, sequence " << b << " head " << h;
          ASSERT_NEAR(dh[row * W + C + h * HS + c], dKh[hm], 1e-3 * dk_max) << "dK, sequence " << b << " head " << h;
        }
}

// ---- the llama family's kernels ----------------------------------------------------------------

TEST(Kernels, RmsNormMatchesDefinitionAndFiniteDifferences) {
  const int N = 5, C = 7;
  auto x = random_buffer(N * C, 51), w = random_buffer(C, 52), R = random_buffer(N * C, 53);
  Buffer<double> y("y", N * C), rstd("rstd", N), dx("dx", N * C), dw("dw", C);
  auto loss = [&] {
    rmsnorm_forward<double>(v2(y, N, C), v1(rstd), v2(x, N, C), v1(w), 1e-5);
    return dot(y, R);
  };
  loss();
  const auto xh = host(x), wh = host(w), yh = host(y);
  for (int n = 0; n < N; ++n) {  // y = x / sqrt(mean(x^2) + eps) * w
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += xh(n * C + c) * xh(n * C + c);
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(yh(n * C + c), xh(n * C + c) / std::sqrt(ss / C + 1e-5) * wh(c), 1e-13);
  }
  rmsnorm_backward<double>(v2(dx, N, C), v1(dw), v2(R, N, C), v2(x, N, C), v1(w), v1(rstd));
  expect_gradient("rmsnorm dx", v1(x), v1(dx), loss);
  expect_gradient("rmsnorm dw", v1(w), v1(dw), loss);
}

TEST(Kernels, RopeRotatesByTheDefinitionAndItsBackwardIsTheTranspose) {
  const int B = 2, T = 5, heads = 3, HS = 6, ld = 4 * HS;  // 3 rotated heads of a 4-head-wide row
  const double theta = 50.0;
  auto x = random_buffer(B * T * ld, 61), y = random_buffer(B * T * ld, 62);
  Buffer<double> table("table", T * HS), rx("rx", B * T * ld), ry("ry", B * T * ld);
  rope_table<double>(v1(table), T, HS, theta);
  Kokkos::deep_copy(rx, x);
  Kokkos::deep_copy(ry, y);
  const View1<const double> tab(table.data(), table.extent(0));
  rope_forward<double>(v2(rx, B * T, ld), tab, T, heads, HS);
  rope_backward<double>(v2(ry, B * T, ld), tab, T, heads, HS);
  const auto xh = host(x), rxh = host(rx);
  for (int r = 0; r < B * T; ++r)
    for (int h = 0; h < 4; ++h)
      for (int i = 0; i < HS / 2; ++i) {
        const double a = std::fmod(r, T) * std::pow(theta, -2.0 * i / HS);
        const double x1 = xh(r * ld + h * HS + i), x2 = xh(r * ld + h * HS + i + HS / 2);
        const bool rotated = h < heads;  // the 4th head (v of a [q | k | v] row) is untouched
        EXPECT_NEAR(rxh(r * ld + h * HS + i), rotated ? x1 * std::cos(a) - x2 * std::sin(a) : x1, 1e-13);
        EXPECT_NEAR(rxh(r * ld + h * HS + i + HS / 2), rotated ? x2 * std::cos(a) + x1 * std::sin(a) : x2, 1e-13);
      }
  // <rope(x), y> = <x, rope_backward(y)>: the backward is the forward's transpose (a rotation's
  // inverse), which is what the gradient needs.
  EXPECT_NEAR(dot(rx, y), dot(x, ry), 1e-12 * std::fabs(dot(x, y)) + 1e-12);
}

TEST(Kernels, SwiGluMatchesDefinitionAndFiniteDifferences) {
  const int N = 4, F = 6;
  auto gu = random_buffer(N * 2 * F, 71, 2.0), R = random_buffer(N * F, 72);
  Buffer<double> h("h", N * F), dgu("dgu", N * 2 * F);
  auto loss = [&] {
    swiglu_forward<double>(v2(h, N, F), v2(gu, N, 2 * F));
    return dot(h, R);
  };
  loss();
  const auto g = host(gu), hh = host(h);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < F; ++c) {
      const double a = g(n * 2 * F + c), u = g(n * 2 * F + F + c);
      EXPECT_NEAR(hh(n * F + c), a / (1 + std::exp(-a)) * u, 1e-13);
    }
  swiglu_backward<double>(v2(dgu, N, 2 * F), v2(R, N, F), v2(gu, N, 2 * F));
  expect_gradient("swiglu", v1(gu), v1(dgu), loss);
}

/// Grouped-query attention equals multi-head attention on k and v heads repeated for their groups
/// (transformers' repeat_kv), forward exactly, and its k/v gradients are the sums of the repeated
/// heads' gradients over each group.
TEST(Kernels, GroupedQueryAttentionEqualsRepeatedKeyValueHeads) {
  const int B = 2, T = 5, NH = 4, NKV = 2, HS = 3, C = NH * HS, Ckv = NKV * HS, group = NH / NKV;
  const int W = C + 2 * Ckv;
  auto qkv = random_buffer(B * T * W, 81), dout = random_buffer(B * T * C, 82);
  // The repeated [q | k | v] of the multi-head oracle.
  const auto gq = host(qkv);
  std::vector<double> rep(static_cast<size_t>(B * T * 3 * C));
  for (int r = 0; r < B * T; ++r)
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < HS; ++k) {
        rep[static_cast<size_t>(r * 3 * C + h * HS + k)] = gq(r * W + h * HS + k);
        rep[static_cast<size_t>(r * 3 * C + C + h * HS + k)] = gq(r * W + C + (h / group) * HS + k);
        rep[static_cast<size_t>(r * 3 * C + 2 * C + h * HS + k)] = gq(r * W + C + Ckv + (h / group) * HS + k);
      }
  const Buffer<double> qkv_rep = device_array(rep);
  Buffer<double> o1("o1", B * T * C), o2("o2", B * T * C), a1("a1", B * NH * T * T), a2("a2", B * NH * T * T),
      d1("d1", B * T * W), d2("d2", B * T * 3 * C), pre("pre", B * NH * T * T), ws("ws", 7 * B * T * C);
  AttentionScratch<double> s;
  View1<double>* parts[] = {&s.q, &s.k, &s.v, &s.y, &s.dq, &s.dk, &s.dv};
  for (int i = 0; i < 7; ++i) *parts[i] = View1<double>(ws.data() + i * B * T * C, B * T * C);
  AttentionDropout drop;
  drop.n_head_total = NH;
  auto cm = [](const Buffer<double>& b, int r, int c) { return as_matrix<const double>(b.data(), r, c); };
  attention_forward<double>(v2(o1, B * T, C), v1(a1), cm(qkv, B * T, W), B, T, NH, drop, s, GemmInputs::native, NKV);
  attention_forward<double>(v2(o2, B * T, C), v1(a2), cm(qkv_rep, B * T, 3 * C), B, T, NH, drop, s);
  const auto h1 = host(o1), h2 = host(o2);
  for (int i = 0; i < B * T * C; ++i) EXPECT_EQ(h1(i), h2(i)) << "output " << i;
  attention_backward<double>(v2(d1, B * T, W), v1(pre), cm(dout, B * T, C), cm(qkv, B * T, W), v1(a1), B, T, NH, drop,
                             s, GemmInputs::native, NKV);
  attention_backward<double>(v2(d2, B * T, 3 * C), v1(pre), cm(dout, B * T, C), cm(qkv_rep, B * T, 3 * C), v1(a2), B,
                             T, NH, drop, s);
  const auto g1 = host(d1), g2 = host(d2);
  for (int r = 0; r < B * T; ++r) {
    for (int c = 0; c < C; ++c) EXPECT_EQ(g1(r * W + c), g2(r * 3 * C + c)) << "dq";
    for (int j = 0; j < NKV; ++j)
      for (int k = 0; k < HS; ++k) {
        double dk = 0, dv = 0;
        for (int g = 0; g < group; ++g) {
          dk += g2(r * 3 * C + C + (j * group + g) * HS + k);
          dv += g2(r * 3 * C + 2 * C + (j * group + g) * HS + k);
        }
        EXPECT_NEAR(g1(r * W + C + j * HS + k), dk, 1e-14) << "dk";
        EXPECT_NEAR(g1(r * W + C + Ckv + j * HS + k), dv, 1e-14) << "dv";
      }
  }
}

TEST(Kernels, GeluBackwardMatchesFiniteDifferences) {
  const int n = 40;
  auto x = random_buffer(n, 31, 2.0), R = random_buffer(n, 32);
  Buffer<double> y("y", n), dx("dx", n);
  auto loss = [&] {
    gelu_forward<double>(v1(y), v1(x));
    return dot(y, R);
  };
  loss();
  const double x0 = host(x)(0), y0 = host(y)(0);
  EXPECT_NEAR(y0, 0.5 * x0 * (1 + std::erf(x0 / std::sqrt(2.0))), 1e-15);
  gelu_backward<double>(v1(dx), v1(R), v1(x));
  expect_gradient("gelu", v1(x), v1(dx), loss);
}

TEST(Kernels, CrossEntropyMatchesDefinitionAndFiniteDifferences) {
  const int N = 4, V = 7;
  auto logits = random_buffer(N * V, 41, 2.0);
  const std::vector<token_t> tgt = {3, 0, -1, 6};  // -1: no loss at this position
  const Buffer<token_t> tgt_dev = device_array(tgt);
  const View1<const token_t> tgtv(tgt_dev.data(), N);
  Buffer<double> losses("losses", N);
  const double dloss = 0.25;
  auto loss = [&] {
    return dloss * cross_entropy_forward<double>(v1(losses), v2(logits, N, V), tgtv);
  };
  loss();
  {
    const auto logits_h = host(logits), losses_h = host(losses);
    for (int n = 0; n < N; ++n) {
      double z = 0;
      for (int v = 0; v < V; ++v) z += std::exp(logits_h(n * V + v));
      const double want = tgt[n] < 0 ? 0.0 : std::log(z) - logits_h(n * V + tgt[n]);
      EXPECT_NEAR(losses_h(n), want, 1e-12);
    }
  }
  Buffer<double> dlogits("dlogits", N * V);
  cross_entropy_backward<double>(v2(dlogits, N, V), v2(logits, N, V), tgtv, dloss);
  expect_gradient("cross entropy dlogits", v1(logits), v1(dlogits), loss);
  // In place gives the same result.
  Buffer<double> copy("copy", N * V);
  Kokkos::deep_copy(copy, logits);
  cross_entropy_backward<double>(v2(copy, N, V), v2(copy, N, V), tgtv, dloss);
  const auto copy_h = host(copy), dlogits_h = host(dlogits);
  for (int i = 0; i < N * V; ++i) EXPECT_EQ(copy_h(i), dlogits_h(i));
}

TEST(Kernels, EmbeddingBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 3, C = 4, V = 5, Tmax = 4;
  auto wte = random_buffer(V * C, 51), wpe = random_buffer(Tmax * C, 52), R = random_buffer(B * T * C, 53);
  const Buffer<token_t> tok = device_array<token_t>({1, 4, 1, 0, 1, 3});  // repeated ids exercise the accumulation
  Buffer<double> out("out", B * T * C);
  auto loss = [&] {
    embedding_forward<double>(v2(out, B * T, C), View1<const token_t>(tok.data(), B * T), v2(wte, V, C), 0, V,
                              v2(wpe, Tmax, C), B, T);
    return dot(out, R);
  };
  loss();
  Buffer<double> dwte("dwte", V * C), dwpe("dwpe", Tmax * C);
  embedding_backward<double>(v2(dwte, V, C), v2(dwpe, Tmax, C), v2(R, B * T, C),
                             View1<const token_t>(tok.data(), B * T), 0, V, B, T);
  expect_gradient("embedding dwte", v1(wte), v1(dwte), loss);
  expect_gradient("embedding dwpe", v1(wpe), v1(dwpe), loss);

  // A vocabulary shard (rows 1-3 of the table, as a tp rank holds them) without position
  // embeddings: token 1's three rows and token 3's one are summed in token order, ids 0 and 4
  // (outside the shard) skipped; exactly the plain loop.
  Buffer<double> shard("shard", 3 * C);
  embedding_backward<double>(v2(shard, 3, C), View2<double>(), v2(R, B * T, C), View1<const token_t>(tok.data(), B * T),
                             1, 3, B, T);
  const std::vector<token_t> ids = {1, 4, 1, 0, 1, 3};
  const auto rh = host(R);
  std::vector<double> want(3 * C, 0.0);
  for (int n = 0; n < B * T; ++n)
    if (ids[n] >= 1 && ids[n] < 4)
      for (int c = 0; c < C; ++c) want[(ids[n] - 1) * C + c] += rh(n * C + c);
  EXPECT_EQ(to_host_vector(v1(shard)), want);
}

TEST(Kernels, AdamWMatchesReferenceFormula) {
  const int n = 6;
  auto p = random_buffer(n, 61), g = random_buffer(n, 62);
  Buffer<double> m("m", n), v("v", n);
  std::vector<double> rp = to_host_vector(v1(p)), rm(n, 0.0), rv(n, 0.0);
  const std::vector<double> gh = to_host_vector(v1(g));
  AdamWStep s;
  s.lr = 0.01;
  s.beta1 = 0.9;
  s.beta2 = 0.95;
  s.eps = 1e-8;
  s.weight_decay = 0.1;
  s.grad_scale = 0.5;
  for (int step = 1; step <= 3; ++step) {
    s.step = step;
    adamw_update<double>(v1(p), v1(g), v1(m), v1(v), s);
    for (int i = 0; i < n; ++i) {  // Loshchilov & Hutter, Algorithm 2, with PyTorch's bias correction
      const double gi = gh[i] * 0.5;
      rp[i] *= 1 - s.lr * s.weight_decay;
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      const double mhat = rm[i] / (1 - std::pow(0.9, step)), vhat = rv[i] / (1 - std::pow(0.95, step));
      rp[i] -= s.lr * mhat / (std::sqrt(vhat) + s.eps);
    }
  }
  const auto p_h = host(p), m_h = host(m), v_h = host(v);
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(p_h(i), rp[i], 1e-12);
    EXPECT_NEAR(m_h(i), rm[i], 1e-15);
    EXPECT_NEAR(v_h(i), rv[i], 1e-15);
  }
}

// offload_optimizer = host runs the update on the host (adamw_update_host) where a resident run
// runs it on Kokkos' default space (the device in a CUDA build): the same bits, over values that
// exercise every term (moments near zero, the eps-dominated denominator, large gradients), both
// for weight-decayed ranges and not. On a host build both are the host, so this pins the shared
// element function; on a CUDA build (tools/device_check.sh) it is the host-vs-GPU check.
TEST(Kernels, AdamWHostIsBitwiseTheDeviceKernel) {
  const int n = 4099;
  for (const double wd : {0.1, 0.0}) {
    std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
    std::mt19937 gen(17);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int i = 0; i < n; ++i) {
      p[i] = d(gen);
      g[i] = d(gen) * (i % 7 == 0 ? 1e-6f : i % 11 == 0 ? 1e3f : 1.0f);
    }
    Buffer<float> pd = device_array(p), gd = device_array(g), md = device_array(m), vd = device_array(v);
    AdamWStep s;
    s.lr = 3e-3;
    s.beta1 = 0.9;
    s.beta2 = 0.95;
    s.weight_decay = wd;
    s.grad_scale = 0.37;
    for (int step = 1; step <= 3; ++step) {
      s.step = step;
      adamw_update<float>(v1(pd), View1<const float>(gd.data(), n), v1(md), v1(vd), s);
      adamw_update_host<float>(HostView1<float>(p.data(), n), HostView1<const float>(g.data(), n),
                               HostView1<float>(m.data(), n), HostView1<float>(v.data(), n), s);
    }
    const std::vector<float> pg = to_host_vector(v1(pd)), mg = to_host_vector(v1(md)), vg = to_host_vector(v1(vd));
    EXPECT_EQ(std::memcmp(pg.data(), p.data(), n * sizeof(float)), 0) << "param, weight_decay " << wd;
    EXPECT_EQ(std::memcmp(mg.data(), m.data(), n * sizeof(float)), 0) << "exp_avg, weight_decay " << wd;
    EXPECT_EQ(std::memcmp(vg.data(), v.data(), n * sizeof(float)), 0) << "exp_avg_sq, weight_decay " << wd;
    EXPECT_NE(pg[0], 0.0f);
  }
}

TEST(Kernels, DropoutKeepsExpectedFractionAndIsLayoutFree) {
  const int n = 100000;
  DropoutKey k;
  k.seed = 1234;
  k.site = 5;
  k.step = 9;
  k.p = 0.25;
  int kept = 0;
  for (int i = 0; i < n; ++i) kept += k.keep(i) ? 1 : 0;
  // Binomial(n, 0.75): standard deviation ~137; 6 sigma bound.
  EXPECT_NEAR(kept, 0.75 * n, 6 * std::sqrt(n * 0.75 * 0.25));
  // The mask of the second half, drawn as its own tensor with an offset, is the same bits.
  DropoutKey half = k;
  half.offset = n / 2;
  for (int i = 0; i < n / 2; ++i) ASSERT_EQ(half.keep(i), k.keep(i + n / 2));
  // Another step draws another mask.
  DropoutKey other = k;
  other.step = 10;
  int same = 0;
  for (int i = 0; i < 1000; ++i) same += other.keep(i) == k.keep(i) ? 1 : 0;
  EXPECT_LT(same, 800);  // independent masks agree with probability 0.625
}

TEST(Kernels, FillNormalIsSplitInvariantAndHasRightMoments) {
  const int n = 20000;
  Buffer<double> whole("whole", n), a("a", n / 2), b("b", n / 2);
  fill_normal<double>(v1(whole), 42, 7, 0, 0.02);
  fill_normal<double>(v1(a), 42, 7, 0, 0.02);
  fill_normal<double>(v1(b), 42, 7, n / 2, 0.02);
  const auto whole_h = host(whole), a_h = host(a), b_h = host(b);
  double s = 0, ss = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(whole_h(i), i < n / 2 ? a_h(i) : b_h(i - n / 2));
    s += whole_h(i);
    ss += whole_h(i) * whole_h(i);
  }
  EXPECT_NEAR(s / n, 0.0, 6 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(ss / n), 0.02, 0.02 * 0.03);  // relative error of a sample std ~ 1/sqrt(2n) = 0.5%
}

TEST(Kernels, SumSquaresAndFinite) {
  const Buffer<float> x = device_array<float>({1, 2, -2, 4});
  EXPECT_EQ(sum_squares<float>(View1<const float>(x.data(), 4)), 25.0);
  EXPECT_TRUE(all_finite<float>(View1<const float>(x.data(), 4)));
  Kokkos::deep_copy(Kokkos::subview(x, 2), std::nanf(""));
  EXPECT_FALSE(all_finite<float>(View1<const float>(x.data(), 4)));
}

}  // namespace
}  // namespace trident

// ---- fp16 (IEEE binary16) conversions --------------------------------------------------------
// Oracle: the binary16 definition evaluated in double (IEEE 754-2008 sec. 3.4: value of a
// (sign, exponent, mantissa) triple) and a nearest-even search over every finite half; plus values
// numpy's float16 gives (np.float16(x).view(np.uint16)).
namespace trident {
namespace {

double ref_fp16_value(std::uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 31 ? (m ? std::nan("") : HUGE_VAL) : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/// The half nearest to x (ties to the even mantissa), inf from 65520 on (half-way to 2^16).
std::uint16_t ref_to_fp16(float x) {
  if (std::isnan(x)) return static_cast<std::uint16_t>(std::signbit(x) ? 0xfe00 : 0x7e00);
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7c00;
  int lo = 0, hi = 0x7bff;  // largest k with value(k) <= a
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (ref_fp16_value(static_cast<std::uint16_t>(mid)) <= a) lo = mid;
    else hi = mid - 1;
  }
  const int k = lo;
  const double below = ref_fp16_value(static_cast<std::uint16_t>(k));
  const double above = k == 0x7bff ? 65536.0 : ref_fp16_value(static_cast<std::uint16_t>(k + 1));
  const double d1 = a - below, d2 = above - a;
  const int r = d1 < d2 ? k : d2 < d1 ? k + 1 : (k % 2 == 0 ? k : k + 1);
  return static_cast<std::uint16_t>(sign | r);
}

TEST(Fp16, EveryHalfDecodesExactlyAndRoundTrips) {
  for (int i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = from_fp16(h);
    const double want = ref_fp16_value(h);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_EQ(to_fp16(f), (h & 0x8000) | 0x7e00) << std::hex << i;  // a quiet NaN, sign kept
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << i;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
    ASSERT_EQ(to_fp16(f), h) << std::hex << i;
  }
}

TEST(Fp16, RoundsToNearestEvenAtEveryMidpointAndAround) {
  for (int k = 0; k < 0x7c00; ++k) {  // the midpoint above every finite half, and its float neighbours
    const double lo = ref_fp16_value(static_cast<std::uint16_t>(k));
    const double hi = k == 0x7bff ? 65536.0 : ref_fp16_value(static_cast<std::uint16_t>(k + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // 12 significant bits: exact in float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f)}) {
      ASSERT_EQ(to_fp16(x), ref_to_fp16(x)) << x;
      ASSERT_EQ(to_fp16(-x), ref_to_fp16(-x)) << -x;
    }
  }
  // Random float bit patterns across the whole range (NaN, inf, overflow, subnormals, underflow).
  std::uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    float x;
    std::memcpy(&x, &state, 4);
    const std::uint16_t want = ref_to_fp16(x);
    ASSERT_EQ(to_fp16(x), want) << std::hexfloat << x;
  }
}

TEST(Fp16, KnownValuesOfNumpyFloat16) {
  const std::pair<float, std::uint16_t> cases[] = {
      {0.1f, 0x2e66},        {1.0f / 3.0f, 0x3555}, {-2.0f, 0xc000},   {65504.f, 0x7bff},
      {65519.99f, 0x7bff},   {65520.f, 0x7c00},     {1e5f, 0x7c00},    {-1e30f, 0xfc00},
      {0x1p-14f, 0x0400},    {0x1p-24f, 0x0001},    {0x1p-25f, 0x0000}, {0x1.8p-25f, 0x0001},
      {0x3p-25f, 0x0002},    {1e-8f, 0x0000},       {-0.0f, 0x8000},   {HUGE_VALF, 0x7c00}};
  for (const auto& [x, h] : cases) EXPECT_EQ(to_fp16(x), h) << x;
}

TEST(Fp16, ConvertKernelsOnViewsAndTheHalfFormats) {
  const std::vector<float> in = {0.1f, -3.5f, 70000.f, 1e-6f, 0x1p-24f, 2.0f};
  Kokkos::View<float*, MemSpace> d("in", in.size()), back("back", in.size());
  Kokkos::View<std::uint16_t*, MemSpace> h("h", in.size());
  Kokkos::deep_copy(d, Kokkos::View<const float*, HostSpace, Unmanaged>(in.data(), in.size()));
  for (HalfFormat fmt : {HalfFormat::fp16, HalfFormat::bf16}) {
    convert_to_half<float>(fmt, View1<std::uint16_t>(h.data(), h.size()), View1<const float>(d.data(), d.size()));
    convert_from_half<float>(fmt, View1<float>(back.data(), back.size()), View1<const std::uint16_t>(h.data(), h.size()));
    auto hh = Kokkos::create_mirror_view_and_copy(HostSpace(), h);
    auto hb = Kokkos::create_mirror_view_and_copy(HostSpace(), back);
    for (size_t i = 0; i < in.size(); ++i) {
      const std::uint16_t want = fmt == HalfFormat::fp16 ? to_fp16(in[i]) : to_bf16(in[i]);
      EXPECT_EQ(hh(i), want) << i;
      EXPECT_EQ(to_half(fmt, in[i]), want);
      EXPECT_EQ(hb(i), from_half(fmt, want)) << i;
    }
  }
  EXPECT_TRUE(std::isinf(from_fp16(to_fp16(70000.f))));  // fp16 overflows where bf16 does not
  EXPECT_FALSE(std::isinf(from_bf16(to_bf16(70000.f))));
}

}  // namespace
}  // namespace trident
