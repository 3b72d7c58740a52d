// bench/bench_kernels.cpp: Google Benchmark micro-benchmarks of the hot kernels at the shapes of
// the example deck (and larger), fast version next to the reference where both exist
// (docs/benchmarks.md says what each case measures).
// Run: build/bin/bench_kernels [--host-gemm=openblas|onednn] [Google Benchmark options]
// (--host-gemm: the library of fp32 GEMMs, as [train] host_gemm; default openblas). Case names carry their arguments
// (BM_LinearForward/N:384/C:128/OC:384). One BLAS thread, as a training rank has one core, unless
// OPENBLAS_NUM_THREADS says otherwise (recorded in the output's context). Results go to stdout
// and to runs/bench/kernels.json (or wherever --benchmark_out=FILE says; --benchmark_out_format=csv).
// Under mpiexec -n N every rank runs the cases at the same time, each case started together (N
// cores loaded, as in training); world rank 0 reports (context ranks_at_once = N). One BLAS and
// one OpenMP thread per process unless OPENBLAS_NUM_THREADS / OMP_NUM_THREADS say otherwise.
// Counters: FLOP/s for GEMM-like kernels (model FLOPs of the operation), bytes/s for memory-bound ones.
#include "core/types.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"
#include "kernels/linear.hpp"
#include "parallel/runtime.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

extern "C" void openblas_set_num_threads(int) __attribute__((weak));  // absent without OpenBLAS (CUDA builds)
extern "C" void omp_set_num_threads(int) __attribute__((weak));       // oneDNN's threads (libgomp)

namespace trident {
namespace {

Buffer<float> randn(std::int64_t n, std::uint32_t stream) {
  Buffer<float> b("bench", static_cast<size_t>(n));
  fill_normal<float>(View1<float>(b.data(), b.extent(0)), 1, stream, 0, 1.0);
  return b;
}

// Linear forward (N, C) x (OC, C)^T: args N, C, OC.
void BM_LinearForward(benchmark::State& st) {
  const int N = static_cast<int>(st.range(0)), C = static_cast<int>(st.range(1)), OC = static_cast<int>(st.range(2));
  auto x = randn(static_cast<std::int64_t>(N) * C, 1), w = randn(static_cast<std::int64_t>(OC) * C, 2);
  Buffer<float> y("y", static_cast<size_t>(N) * OC);
  for (auto _ : st) {
    linear_forward<float>(as_matrix(y.data(), N, OC), as_matrix<const float>(x.data(), N, C),
                          as_matrix<const float>(w.data(), OC, C), View1<const float>());
    Kokkos::fence();
  }
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * N * C * OC, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LinearForward)->ArgNames({"N", "C", "OC"})->Args({384, 128, 384})->Args({384, 128, 512})->Args({768, 512, 2048})->Unit(benchmark::kMicrosecond);

// Linear backward: dX = dY W and dW += dY^T X for (N, C) inputs and (OC, C) weights, the
// transposed GEMMs of a layer's backward (no bias): args N, C, OC.
void BM_LinearBackward(benchmark::State& st) {
  const int N = static_cast<int>(st.range(0)), C = static_cast<int>(st.range(1)), OC = static_cast<int>(st.range(2));
  auto x = randn(static_cast<std::int64_t>(N) * C, 1), w = randn(static_cast<std::int64_t>(OC) * C, 2),
       dy = randn(static_cast<std::int64_t>(N) * OC, 3);
  Buffer<float> dx("dx", static_cast<size_t>(N) * C), dw("dw", static_cast<size_t>(OC) * C);
  for (auto _ : st) {
    linear_backward<float>(as_matrix(dx.data(), N, C), as_matrix(dw.data(), OC, C), View1<float>(),
                           as_matrix<const float>(dy.data(), N, OC), as_matrix<const float>(x.data(), N, C),
                           as_matrix<const float>(w.data(), OC, C));
    Kokkos::fence();
  }
  st.counters["FLOP/s"] = benchmark::Counter(4.0 * N * C * OC, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LinearBackward)->ArgNames({"N", "C", "OC"})->Args({384, 128, 384})->Args({384, 128, 512})->Args({768, 512, 2048})->Unit(benchmark::kMicrosecond);

// Attention forward + backward: args B, T, C, NH, fast (1) or reference (0).
void BM_Attention(benchmark::State& st) {
  const int B = static_cast<int>(st.range(0)), T = static_cast<int>(st.range(1)), C = static_cast<int>(st.range(2)),
            NH = static_cast<int>(st.range(3));
  const bool fast = st.range(4) != 0;
  const std::int64_t btc = static_cast<std::int64_t>(B) * T * C, att = static_cast<std::int64_t>(B) * NH * T * T;
  auto qkv = randn(3 * btc, 3), dout = randn(btc, 4);
  Buffer<float> out("out", btc), a("att", att), dpre("dpre", att), dqkv("dqkv", 3 * btc), ws("ws", 7 * btc);
  AttentionScratch<float> s;
  View1<float>* parts[] = {&s.q, &s.k, &s.v, &s.y, &s.dq, &s.dk, &s.dv};
  for (int i = 0; i < 7; ++i) *parts[i] = View1<float>(ws.data() + i * btc, static_cast<size_t>(btc));
  AttentionDropout drop;
  drop.n_head_total = NH;
  auto q = as_matrix<const float>(qkv.data(), static_cast<std::int64_t>(B) * T, 3 * C);
  auto o = as_matrix(out.data(), static_cast<std::int64_t>(B) * T, C);
  auto d = as_matrix(dqkv.data(), static_cast<std::int64_t>(B) * T, 3 * C);
  auto g = as_matrix<const float>(dout.data(), static_cast<std::int64_t>(B) * T, C);
  View1<float> av(a.data(), a.extent(0)), pv(dpre.data(), dpre.extent(0));
  for (auto _ : st) {
    if (fast) {
      attention_forward<float>(o, av, q, B, T, NH, drop, s);
      attention_backward<float>(d, pv, g, q, av, B, T, NH, drop, s);
    } else {
      attention_forward_ref<float>(o, av, q, B, T, NH, drop);
      attention_backward_ref<float>(d, pv, g, q, av, B, T, NH, drop);
    }
    Kokkos::fence();
  }
  // Model FLOPs of causal attention forward + backward: 3 x (2 matmuls of B*NH*T*T*HS, halved by the mask) x 2.
  st.counters["FLOP/s"] =
      benchmark::Counter(3.0 * 2.0 * 2.0 * static_cast<double>(B) * T * T * C / 2.0, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"B", "T", "C", "NH", "fast"})
    ->ArgsProduct({{6}, {64}, {128}, {4}, {0, 1}})
    ->ArgsProduct({{4}, {256}, {256}, {8}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// LayerNorm forward + backward: args N, C.
void BM_LayerNorm(benchmark::State& st) {
  const int N = static_cast<int>(st.range(0)), C = static_cast<int>(st.range(1));
  auto x = randn(static_cast<std::int64_t>(N) * C, 5), w = randn(C, 6), dy = randn(static_cast<std::int64_t>(N) * C, 7);
  Buffer<float> y("y", static_cast<size_t>(N) * C), dx("dx", static_cast<size_t>(N) * C), m("m", N), r("r", N),
      dw("dw", C), db("db", C);
  for (auto _ : st) {
    layernorm_forward<float>(as_matrix(y.data(), N, C), View1<float>(m.data(), N), View1<float>(r.data(), N),
                             as_matrix<const float>(x.data(), N, C), View1<const float>(w.data(), C), View1<const float>());
    layernorm_backward<float>(as_matrix(dx.data(), N, C), View1<float>(dw.data(), C), View1<float>(),
                              as_matrix<const float>(dy.data(), N, C), as_matrix<const float>(x.data(), N, C),
                              View1<const float>(w.data(), C), View1<const float>(m.data(), N),
                              View1<const float>(r.data(), N));
    Kokkos::fence();
  }
  st.counters["bytes/s"] =
      benchmark::Counter(4.0 * 6 * N * C, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}
BENCHMARK(BM_LayerNorm)->ArgNames({"N", "C"})->Args({384, 128})->Args({8192, 768})->Unit(benchmark::kMicrosecond);

// GELU forward + backward over n elements.
void BM_Gelu(benchmark::State& st) {
  const std::int64_t n = st.range(0);
  auto x = randn(n, 8), dy = randn(n, 9);
  Buffer<float> y("y", n), dx("dx", n);
  for (auto _ : st) {
    gelu_forward<float>(View1<float>(y.data(), n), View1<const float>(x.data(), n));
    gelu_backward<float>(View1<float>(dx.data(), n), View1<const float>(dy.data(), n), View1<const float>(x.data(), n));
    Kokkos::fence();
  }
  st.counters["elements/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Gelu)->ArgName("n")->Arg(384 * 512)->Unit(benchmark::kMicrosecond);

// The vocab-parallel cross entropy of one step as the model runs it (kernels/cross_entropy.hpp:
// row max, partial sums of exponentials, losses, then the logits' gradient in place) over N rows
// of V logits: GPT-2's padded vocabulary at N = 256, and the example deck's 65 characters.
void BM_CrossEntropy(benchmark::State& st) {
  const int N = static_cast<int>(st.range(0)), V = static_cast<int>(st.range(1));
  auto logits = randn(static_cast<std::int64_t>(N) * V, 11);
  Buffer<float> work("work", static_cast<size_t>(N) * V), rmax("rmax", N), se("se", N), tl("tl", N), loss("loss", N);
  Buffer<token_t> tgt("tgt", N);
  for (int n = 0; n < N; ++n) tgt(n) = static_cast<token_t>((n * 7919) % V);
  for (auto _ : st) {
    Kokkos::deep_copy(work, logits);
    const auto L = as_matrix(work.data(), N, V);
    const auto Lc = as_matrix<const float>(work.data(), N, V);
    const View1<const token_t> t(tgt.data(), N);
    cross_entropy_row_max<float>(View1<float>(rmax.data(), N), Lc, V);
    cross_entropy_partials<float>(View1<float>(se.data(), N), View1<float>(tl.data(), N), Lc,
                                  View1<const float>(rmax.data(), N), t, 0, V);
    benchmark::DoNotOptimize(cross_entropy_losses<float>(View1<float>(loss.data(), N), View1<const float>(se.data(), N),
                                                         View1<const float>(rmax.data(), N),
                                                         View1<const float>(tl.data(), N), t));
    cross_entropy_backward_split<float>(L, Lc, View1<const float>(rmax.data(), N), View1<const float>(se.data(), N), t,
                                        0, V, 1.f / N);
    Kokkos::fence();
  }
  st.counters["elements/s"] =
      benchmark::Counter(static_cast<double>(N) * V, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CrossEntropy)->ArgNames({"N", "V"})->Args({256, 50304})->Args({768, 65})->Unit(benchmark::kMicrosecond);

// The llama family's element-wise kernels, forward + backward, at the shapes of
// tools/bench_families.sh (B*T = 1024 rows): RMSNorm over C, RoPE over (NH + NKV) heads of HS, SwiGLU
// over F. Compare with BM_LayerNorm and BM_Gelu, GPT-2's counterparts.
void BM_RmsNorm(benchmark::State& st) {
  const int N = static_cast<int>(st.range(0)), C = static_cast<int>(st.range(1));
  auto x = randn(static_cast<std::int64_t>(N) * C, 5), w = randn(C, 6), dy = randn(static_cast<std::int64_t>(N) * C, 7);
  Buffer<float> y("y", static_cast<size_t>(N) * C), dx("dx", static_cast<size_t>(N) * C), r("r", N), dw("dw", C);
  for (auto _ : st) {
    rmsnorm_forward<float>(as_matrix(y.data(), N, C), View1<float>(r.data(), N), as_matrix<const float>(x.data(), N, C),
                           View1<const float>(w.data(), C), 1e-5);
    rmsnorm_backward<float>(as_matrix(dx.data(), N, C), View1<float>(dw.data(), C), as_matrix<const float>(dy.data(), N, C),
                            as_matrix<const float>(x.data(), N, C), View1<const float>(w.data(), C),
                            View1<const float>(r.data(), N));
    Kokkos::fence();
  }
  st.counters["bytes/s"] =
      benchmark::Counter(4.0 * 5 * N * C, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}
BENCHMARK(BM_RmsNorm)->ArgNames({"N", "C"})->Args({1024, 256})->Args({8192, 768})->Unit(benchmark::kMicrosecond);

void BM_Rope(benchmark::State& st) {
  const int N = static_cast<int>(st.range(0)), heads = static_cast<int>(st.range(1)), HS = static_cast<int>(st.range(2));
  const std::int64_t n = static_cast<std::int64_t>(N) * heads * HS;
  auto x = randn(n, 8);
  Buffer<float> table("table", static_cast<size_t>(128) * HS);
  rope_table<float>(View1<float>(table.data(), table.extent(0)), 128, HS, 10000.0);
  const View1<const float> tab(table.data(), table.extent(0));
  for (auto _ : st) {
    rope_forward<float>(as_matrix(x.data(), N, static_cast<std::int64_t>(heads) * HS), tab, 128, heads, HS);
    rope_backward<float>(as_matrix(x.data(), N, static_cast<std::int64_t>(heads) * HS), tab, 128, heads, HS);
    Kokkos::fence();
  }
  st.counters["elements/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Rope)->ArgNames({"N", "heads", "HS"})->Args({1024, 12, 32})->Unit(benchmark::kMicrosecond);

void BM_SwiGlu(benchmark::State& st) {
  const int N = static_cast<int>(st.range(0)), F = static_cast<int>(st.range(1));
  auto gu = randn(static_cast<std::int64_t>(N) * 2 * F, 8), dh = randn(static_cast<std::int64_t>(N) * F, 9);
  Buffer<float> h("h", static_cast<size_t>(N) * F), dgu("dgu", static_cast<size_t>(N) * 2 * F);
  for (auto _ : st) {
    swiglu_forward<float>(as_matrix(h.data(), N, F), as_matrix<const float>(gu.data(), N, 2 * F));
    swiglu_backward<float>(as_matrix(dgu.data(), N, 2 * F), as_matrix<const float>(dh.data(), N, F),
                           as_matrix<const float>(gu.data(), N, 2 * F));
    Kokkos::fence();
  }
  st.counters["elements/s"] =
      benchmark::Counter(static_cast<double>(N) * F, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SwiGlu)->ArgNames({"N", "F"})->Args({1024, 768})->Unit(benchmark::kMicrosecond);

// AdamW update + gradient norm over n parameters (the optimizer's share of a step).
void BM_AdamW(benchmark::State& st) {
  const std::int64_t n = st.range(0);
  auto p = randn(n, 10), g = randn(n, 11);
  Buffer<float> m("m", n), v("v", n);
  AdamWStep s;
  s.lr = 1e-3;
  for (auto _ : st) {
    benchmark::DoNotOptimize(sum_squares<float>(View1<const float>(g.data(), n)));
    adamw_update<float>(View1<float>(p.data(), n), View1<const float>(g.data(), n), View1<float>(m.data(), n),
                        View1<float>(v.data(), n), s);
    Kokkos::fence();
  }
  st.counters["params/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AdamW)->ArgName("params")->Arg(804096)->Arg(16 << 20)->Unit(benchmark::kMicrosecond);

// A copy of n floats beyond the caches, bytes written per second: the rate of the ZeRO engine's
// fills and copies of its gradient and parameter buffers (perf/step_model.hpp, engine_passes).
void BM_Copy(benchmark::State& st) {
  const std::int64_t n = st.range(0);
  auto src = randn(n, 12);
  Buffer<float> dst("dst", n);
  for (auto _ : st) {
    Kokkos::deep_copy(View1<float>(dst.data(), n), View1<const float>(src.data(), n));
    Kokkos::fence();
  }
  st.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(n) * sizeof(float), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Copy)->ArgName("floats")->Arg(16 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  trident::Runtime rt(argc, argv);
  // A training rank has one core (one rank per core): measure kernels the same way, unless the
  // user set OPENBLAS_NUM_THREADS (OpenBLAS then read it when it was loaded).
  const char* env = std::getenv("OPENBLAS_NUM_THREADS");
  if (env == nullptr && openblas_set_num_threads != nullptr) openblas_set_num_threads(1);
  benchmark::AddCustomContext("blas_threads", env != nullptr ? std::string(env) + " (OPENBLAS_NUM_THREADS)" : "1");
  // oneDNN's fp32 and bf16 matmuls run on OpenMP threads: one as well, unless the user says.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp == nullptr && omp_set_num_threads != nullptr) omp_set_num_threads(1);
  benchmark::AddCustomContext("omp_threads", omp != nullptr ? std::string(omp) + " (OMP_NUM_THREADS)" : "1");
  // --host-gemm=openblas|onednn: the library of fp32 GEMMs (kernels/gemm.hpp HostGemm), as [train]
  // host_gemm sets it for training; default openblas (the process default).
  std::vector<char*> args;
  std::string lib = "openblas";
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--host-gemm=", 12) == 0) lib = argv[i] + 12;
    else args.push_back(argv[i]);
  }
  if (lib != "openblas" && lib != "onednn") {
    std::fprintf(stderr, "bench_kernels: --host-gemm=%s: expected openblas or onednn\n", lib.c_str());
    return 2;
  }
  const trident::HostGemm which = lib == "onednn" ? trident::HostGemm::onednn : trident::HostGemm::openblas;
  if (!trident::host_gemm_available(which)) {
    std::fprintf(stderr, "bench_kernels: --host-gemm=%s: this build has no oneDNN\n", lib.c_str());
    return 2;
  }
  trident::set_host_gemm(which);
  benchmark::AddCustomContext("host_gemm", lib);
  benchmark::AddCustomContext("ranks_at_once", std::to_string(rt.world_size()));
  // Under mpiexec every rank runs the same cases at once (the cores loaded as in training, one rank
  // per core); world rank 0 reports, the others write nothing.
  if (rt.world_rank() != 0) {
    args.erase(std::remove_if(args.begin() + 1, args.end(),
                              [](const char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; }),
               args.end());
    if (std::freopen("/dev/null", "w", stdout) == nullptr || std::freopen("/dev/null", "w", stderr) == nullptr) return 1;
    args.push_back(const_cast<char*>("--benchmark_out=/dev/null"));
  }
  // Results also go to a file unless the user chose one (Google Benchmark writes it).
  std::string out_arg = "--benchmark_out=runs/bench/kernels.json";
  if (std::none_of(args.begin(), args.end(), [](const char* a) { return std::strncmp(a, "--benchmark_out=", 16) == 0; })) {
    std::filesystem::create_directories("runs/bench");
    args.push_back(out_arg.data());
    std::fprintf(stderr, "bench_kernels: results also in runs/bench/kernels.json (--benchmark_out=FILE to change)\n");
  }
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();
  argc = n;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Every rank reports each case once, in the same order: a barrier there starts the next case on
  // all ranks together, so the cores stay loaded case by case (Google Benchmark picks iteration
  // counts per rank, which would let the ranks drift apart).
  struct InStep : benchmark::ConsoleReporter {
    trident::Communicator& world;
    // Google Benchmark's own defaults: colour on a terminal only, counters not tabular.
    explicit InStep(trident::Communicator& w) : ConsoleReporter(isatty(fileno(stdout)) ? OO_Color : OO_None), world(w) {}
    void ReportRuns(const std::vector<Run>& runs) override {
      ConsoleReporter::ReportRuns(runs);
      world.barrier();
    }
  } reporter(rt.world());
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
