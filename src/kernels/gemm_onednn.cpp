// kernels/gemm_onednn.cpp: see kernels/gemm_onednn.hpp. oneDNN 2.6 (Debian 12) has no public bf16
// GEMM function (dnnl_sgemm is fp32 only), so this is its matmul primitive with bf16 source and
// weights and an fp32 destination; alpha is the primitive's output scale and beta a sum post-op,
// so C = alpha (A B) + beta C in one pass, as BLAS defines it.
#include "kernels/gemm_onednn.hpp"

#include "core/error.hpp"
#include "core/memory.hpp"
#include "kernels/bf16_staging.hpp"
#include "kernels/convert.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace trident::detail {

namespace {

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_all: return "all";
    case dnnl_cpu_isa_sse41: return "SSE4.1";
    case dnnl_cpu_isa_avx: return "AVX";
    case dnnl_cpu_isa_avx2: return "AVX2";
    case dnnl_cpu_isa_avx2_vnni: return "AVX2_VNNI";
    case dnnl_cpu_isa_avx512_core: return "AVX512_CORE";
    case dnnl_cpu_isa_avx512_core_vnni: return "AVX512_CORE_VNNI";
    case dnnl_cpu_isa_avx512_core_bf16: return "AVX512_CORE_BF16";
    case dnnl_cpu_isa_avx512_core_amx: return "AVX512_CORE_AMX";
    default: return "another ISA";
  }
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// What a cached primitive depends on.
using Key = std::tuple<char, char, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                       std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::uint32_t, std::uint32_t, bool>;

/// A primitive and the memory descriptors of its operands.
struct Cached {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c;
};

/// The engine, stream, primitive cache and bf16 input scratch of the process, created at the first
/// GEMM and freed before Kokkos finalizes (the scratch is a Kokkos allocation).
struct OneDnn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Cached> primitives;
  Bf16Staging staging{round_to_bf16_host};
  std::mutex mutex;
};
OneDnn* g_onednn = nullptr;
std::mutex g_create;  // guards g_onednn's creation and release

OneDnn& onednn() {
  std::lock_guard<std::mutex> lock(g_create);
  if (g_onednn == nullptr) {
    g_onednn = new OneDnn();
    Kokkos::push_finalize_hook([] {
      std::lock_guard<std::mutex> lock(g_create);
      delete g_onednn;
      g_onednn = nullptr;
    });
  }
  return *g_onednn;
}

/// The (rows, cols) = (r, c) operand op(X) of a row-major X with row stride ld and batch stride
/// s: strides of op(X) as oneDNN wants them (outermost first).
dnnl::memory::desc operand(dnnl::memory::data_type dt, char trans, std::int64_t batch, std::int64_t r,
                           std::int64_t c, std::int64_t ld, std::int64_t s) {
  using dims = dnnl::memory::dims;
  const dims rc = trans == 'T' ? dims{1, ld} : dims{ld, 1};
  if (batch == 1) return dnnl::memory::desc(dims{r, c}, dt, rc);
  return dnnl::memory::desc(dims{batch, r, c}, dt, dims{s, rc[0], rc[1]});
}

Cached make_primitive(OneDnn& d, const Key& key) {
  const auto [ta, tb, batch, M, N, K, lda, ldb, ldc, sa, sb, sc, alpha_bits, beta_bits, bf16_inputs] = key;
  float alpha, beta;
  std::memcpy(&alpha, &alpha_bits, sizeof alpha);
  std::memcpy(&beta, &beta_bits, sizeof beta);
  using dt = dnnl::memory::data_type;
  const dt in = bf16_inputs ? dt::bf16 : dt::f32;
  const auto a = operand(in, ta, batch, M, K, lda, sa);
  const auto b = operand(in, tb, batch, K, N, ldb, sb);
  const auto c = operand(dt::f32, 'N', batch, M, N, ldc, sc);
  dnnl::primitive_attr attr;
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  if (beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  return Cached{dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, d.engine)), a, b, c};
}

}  // namespace

std::string onednn_bf16_unavailable_reason() {
  // Asked once: oneDNN fixes its effective ISA at its first use (DNNL_MAX_CPU_ISA is read then).
  static const std::string reason = [] {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((static_cast<unsigned>(isa) & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
      return std::string();
    return std::string("this CPU has no AVX512-BF16 dot-product instructions (oneDNN's effective ISA is ") +
           isa_name(isa) + (std::getenv("DNNL_MAX_CPU_ISA") != nullptr ? ", capped by DNNL_MAX_CPU_ISA" : "") + ")";
  }();
  return reason;
}

namespace {

/// to_bf16 of in[0, n) as a branch-free loop the compiler vectorises.
void round_portable(bf16_t* out, const float* in, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, in + i, sizeof u);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    out[i] = static_cast<bf16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
/// The same with AVX512-BF16's VCVTNE2PS2BF16, 32 floats per instruction. The instruction rounds
/// to nearest even and quiets NaNs (bit 6) as to_bf16 does, but reads subnormal inputs as zero
/// (Intel SDM, "convert_fp32_to_bfloat16"), so a block of 32 holding a subnormal goes through
/// round_portable. Only called where the CPU has the instruction.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void round_avx512bf16(bf16_t* out, const float* in,
                                                                              std::int64_t n) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1),
                below_normal = _mm512_set1_epi32(0x007fffff);
  // Lanes with 0 < |x| < the smallest normal: (|x| - 1) < 0x007fffff, unsigned.
  const auto subnormal = [&](__m512 x) {
    const __m512i m = _mm512_and_si512(_mm512_castps_si512(x), magnitude);
    return _mm512_cmplt_epu32_mask(_mm512_sub_epi32(m, one), below_normal);
  };
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(in + i), hi = _mm512_loadu_ps(in + i + 16);
    if ((subnormal(lo) | subnormal(hi)) != 0) {
      round_portable(out + i, in + i, 32);
      continue;
    }
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  round_portable(out + i, in + i, n - i);
}
#endif

}  // namespace

void round_to_bf16_host(bf16_t* out, const float* in, std::int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool bf16_instructions = __builtin_cpu_supports("avx512bf16");
  if (bf16_instructions) return round_avx512bf16(out, in, n);
#endif
  round_portable(out, in, n);
}

void onednn_release_scratch() {
  std::lock_guard<std::mutex> create(g_create);
  if (g_onednn == nullptr) return;
  std::lock_guard<std::mutex> lock(g_onednn->mutex);
  g_onednn->staging.release();
}

void onednn_reuse_keep(const float* in, std::int64_t n) {
  OneDnn& d = onednn();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.staging.keep(in, n);
}

void onednn_reuse_end() noexcept {
  std::lock_guard<std::mutex> create(g_create);
  if (g_onednn == nullptr) return;  // released at finalize: nothing is kept
  std::lock_guard<std::mutex> lock(g_onednn->mutex);
  g_onednn->staging.end_keep();
}

bf16_t* onednn_room_lend(std::int64_t n) {
  OneDnn& d = onednn();
  std::lock_guard<std::mutex> lock(d.mutex);
  return d.staging.lend(n);
}

void onednn_room_end() noexcept {
  std::lock_guard<std::mutex> create(g_create);
  if (g_onednn == nullptr) return;
  std::lock_guard<std::mutex> lock(g_onednn->mutex);
  g_onednn->staging.end_lend();
}

void onednn_gemm(bool bf16_inputs, char transA, char transB, std::int64_t batch, std::int64_t M, std::int64_t N,
                 std::int64_t K, float alpha, const float* A, std::int64_t lda, std::int64_t sa, std::int64_t a_span,
                 const float* B, std::int64_t ldb, std::int64_t sb, std::int64_t b_span, float beta, float* C,
                 std::int64_t ldc, std::int64_t sc, const bf16_t* A16, const bf16_t* B16) {
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // C = beta C (oneDNN has no empty reduction)
    for (std::int64_t i = 0; i < batch; ++i)
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n) {
          float& c = C[i * sc + m * ldc + n];
          c = beta == 0.f ? 0.f : beta * c;
        }
    return;
  }
  if (!bf16_inputs && (A16 != nullptr || B16 != nullptr))
    throw Error("gemm: an operand held in bf16 needs bf16 inputs (onednn_gemm)");
  if (bf16_inputs) {
    const std::string why = onednn_bf16_unavailable_reason();
    if (!why.empty()) throw Error("gemm: bf16 inputs: " + why);
  }
  OneDnn& d = onednn();
  std::lock_guard<std::mutex> lock(d.mutex);
  void* a_in = const_cast<float*>(A);  // oneDNN's memory takes a non-const handle; it only reads
  void* b_in = const_cast<float*>(B);
  if (bf16_inputs) {
    const auto [a16, b16] = d.staging.inputs(A16 != nullptr ? nullptr : A, a_span, B16 != nullptr ? nullptr : B, b_span);
    a_in = const_cast<bf16_t*>(A16 != nullptr ? A16 : a16);
    b_in = const_cast<bf16_t*>(B16 != nullptr ? B16 : b16);
  }
  const auto positive = [](std::int64_t v) { return v > 1 ? v : std::int64_t{1}; };
  const Key key{transA, transB, batch, M, N, K, positive(lda), positive(ldb), positive(ldc),
                batch == 1 ? 0 : sa, batch == 1 ? 0 : sb, batch == 1 ? 0 : sc, bits(alpha), bits(beta), bf16_inputs};
  try {
    auto it = d.primitives.find(key);
    if (it == d.primitives.end()) it = d.primitives.emplace(key, make_primitive(d, key)).first;
    const Cached& p = it->second;
    dnnl::memory a(p.a, d.engine, a_in), b(p.b, d.engine, b_in), c(p.c, d.engine, C);
    p.matmul.execute(d.stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    d.stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("oneDNN: ") + (bf16_inputs ? "bf16" : "fp32") + " matmul (trans " + std::string{transA, transB} + ", batch " + std::to_string(batch) +
                ", M " + std::to_string(M) + ", N " + std::to_string(N) + ", K " + std::to_string(K) +
                ") failed: " + e.what() + " (status " + std::to_string(static_cast<int>(e.status)) + ")");
  }
}

}  // namespace trident::detail
