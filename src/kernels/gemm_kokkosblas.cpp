// kernels/gemm_kokkosblas.cpp: the host backend of kernels/gemm.hpp (host builds): KokkosBlas::gemm,
// which calls OpenBLAS sgemm/dgemm for LayoutRight views (docs/design.md, "Toolchain facts"), and
// oneDNN's matmul (kernels/gemm_onednn.hpp) for bf16 inputs (OpenBLAS 0.3.21 has none) and, under
// HostGemm::onednn, for fp32 ones too (double always goes to OpenBLAS).
#include "kernels/gemm.hpp"

#include "core/error.hpp"
#include "kernels/instantiate.hpp"
#if TRIDENT_HAVE_ONEDNN
#include "kernels/gemm_onednn.hpp"
#endif

#include <KokkosBlas3_gemm.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <type_traits>

namespace trident {

std::string gemm_bf16_unavailable_reason() {
#if TRIDENT_HAVE_ONEDNN
  return detail::onednn_bf16_unavailable_reason();
#else
  return "this host build has no oneDNN, the library of its bf16 GEMMs (Debian: libdnnl-dev; "
         "tools/install_deps.sh installs it, then configure again)";
#endif
}

bool gemm_bf16_supported() { return gemm_bf16_unavailable_reason().empty(); }

void gemm_release_scratch() {
#if TRIDENT_HAVE_ONEDNN
  detail::onednn_release_scratch();
#endif
}

namespace detail {
// GemmInputReuse (kernels/gemm.cpp) calls these only where gemm_bf16_supported(), i.e. with oneDNN.
void gemm_reuse_keep(const float* in, std::int64_t n) {
#if TRIDENT_HAVE_ONEDNN
  onednn_reuse_keep(in, n);
#else
  (void)in, (void)n;
#endif
}
void gemm_reuse_end() noexcept {
#if TRIDENT_HAVE_ONEDNN
  onednn_reuse_end();
#endif
}
// GemmBf16Room, likewise only where gemm_bf16_supported().
bf16_t* gemm_room_lend(std::int64_t n) {
#if TRIDENT_HAVE_ONEDNN
  return onednn_room_lend(n);
#else
  (void)n;
  throw Error("gemm: bf16 inputs: " + gemm_bf16_unavailable_reason());
#endif
}
void gemm_room_end() noexcept {
#if TRIDENT_HAVE_ONEDNN
  onednn_room_end();
#endif
}
void gemm_round(bf16_t* out, const float* in, std::int64_t n) {
#if TRIDENT_HAVE_ONEDNN
  round_to_bf16_host(out, in, n);
#else
  convert_to_bf16<float>(View1<bf16_t>(out, static_cast<size_t>(n)), View1<const float>(in, static_cast<size_t>(n)));
#endif
}
}  // namespace detail

namespace {
std::atomic<HostGemm> g_host_gemm{HostGemm::openblas};
}  // namespace

bool host_gemm_available(HostGemm lib) { return lib == HostGemm::openblas || TRIDENT_HAVE_ONEDNN; }

void set_host_gemm(HostGemm lib) {
  if (!host_gemm_available(lib))
    throw Error("gemm: this build has no oneDNN (Debian: libdnnl-dev): its fp32 GEMMs can only be OpenBLAS's");
  g_host_gemm = lib;
}

HostGemm host_gemm() { return g_host_gemm; }

namespace {

/// The per-shape choice ([train] host_gemm = shape): the chooser and what it decided so far.
std::atomic<bool> g_has_chooser{false};
std::mutex g_choice_mutex;
HostGemmChooser g_chooser;
std::map<GemmShape, HostGemm> g_choices;

/// The library of a native float GEMM of shape s under the installed chooser: the recorded
/// choice, or the chooser's, asked once per shape (outside the lock: it times GEMMs).
HostGemm chosen_library(const GemmShape& s) {
  HostGemmChooser chooser;
  {
    std::lock_guard<std::mutex> lock(g_choice_mutex);
    const auto it = g_choices.find(s);
    if (it != g_choices.end()) return it->second;
    chooser = g_chooser;
  }
  const HostGemm lib = chooser ? chooser(s) : g_host_gemm.load();
  std::lock_guard<std::mutex> lock(g_choice_mutex);
  return g_choices.emplace(s, lib).first->second;  // a concurrent first call may have won: use its choice
}

/// Whether a native float GEMM of this shape goes to oneDNN: set_host_gemm(HostGemm::onednn), or
/// the per-shape chooser's pick.
template <class T>
bool onednn_native(char ta, char tb, std::int64_t batch, const detail::GemmDims& d) {
  if constexpr (!std::is_same_v<T, float> || !TRIDENT_HAVE_ONEDNN) {
    (void)ta, (void)tb, (void)batch, (void)d;
    return false;
  } else {
    // An empty product (a zero extent) has nothing to time: the process-wide library.
    if (!g_has_chooser.load() || batch * d.m * d.n * d.k == 0) return g_host_gemm.load() == HostGemm::onednn;
    return chosen_library(GemmShape{ta, tb, batch, d.m, d.n, d.k}) == HostGemm::onednn;
  }
}

/// The oneDNN path of gemm() and gemm_batched(): bf16 inputs, or native float inputs under
/// HostGemm::onednn; float operands only.
template <class T>
void gemm_onednn(bool bf16, char transA, char transB, const detail::GemmDims& d, std::int64_t batch, T alpha,
                 const T* A, std::int64_t lda, std::int64_t sa, std::int64_t a_span, const T* B, std::int64_t ldb,
                 std::int64_t sb, std::int64_t b_span, T beta, T* C, std::int64_t ldc, std::int64_t sc) {
  if constexpr (!std::is_same_v<T, float>) {
    throw Error("gemm: bf16 inputs need float operands ([train] dtype = float)");
  } else {
#if TRIDENT_HAVE_ONEDNN
    detail::onednn_gemm(bf16, transA, transB, batch, d.m, d.n, d.k, alpha, A, lda, sa, a_span, B, ldb, sb, b_span,
                        beta, C, ldc, sc);
#else
    (void)bf16;
    (void)transA, (void)transB, (void)d, (void)batch, (void)alpha, (void)A, (void)lda, (void)sa, (void)a_span;
    (void)B, (void)ldb, (void)sb, (void)b_span, (void)beta, (void)C, (void)ldc, (void)sc;
    throw Error("gemm: bf16 inputs: " + gemm_bf16_unavailable_reason());
#endif
  }
}

}  // namespace

template <class T>
void gemm(char transA, char transB, T alpha, View2<const T> A, View2<const T> B, T beta, View2<T> C,
          GemmInputs inputs) {
  const auto d = detail::gemm_dims("gemm", transA, transB, A.extent(0), A.extent(1), B.extent(0), B.extent(1),
                                   C.extent(0), C.extent(1));
  if (inputs == GemmInputs::bf16 || onednn_native<T>(transA, transB, 1, d))
    return gemm_onednn<T>(inputs == GemmInputs::bf16, transA, transB, d, 1, alpha, A.data(), A.stride(0), 0,
                          static_cast<std::int64_t>(A.span()), B.data(), B.stride(0), 0,
                          static_cast<std::int64_t>(B.span()), beta, C.data(), C.stride(0), 0);
  const char ta[2] = {transA, '\0'}, tb[2] = {transB, '\0'};
  KokkosBlas::gemm(ta, tb, alpha, A, B, beta, C);
}

template <class T>
void gemm_batched(char transA, char transB, T alpha, View3<const T> A, View3<const T> B, T beta, View3<T> C,
                  GemmInputs inputs) {
  const auto d = detail::gemm_batched_dims<T>(transA, transB, A, B, C);
  const auto batch = static_cast<std::int64_t>(C.extent(0));
  if (inputs == GemmInputs::bf16 || onednn_native<T>(transA, transB, batch, d))
    return gemm_onednn<T>(inputs == GemmInputs::bf16, transA, transB, d, batch,
                          alpha, A.data(), A.stride(1), A.stride(0), static_cast<std::int64_t>(A.span()), B.data(),
                          B.stride(1), B.stride(0), static_cast<std::int64_t>(B.span()), beta, C.data(), C.stride(1),
                          C.stride(0));
  // KokkosKernels 3.4 has no batched GEMM on the host: one sgemm/dgemm per matrix (OpenBLAS
  // threads each of them).
  const char ta[2] = {transA, '\0'}, tb[2] = {transB, '\0'};
  const std::int64_t sa = A.extent(1) * A.extent(2), sb = B.extent(1) * B.extent(2), sc = C.extent(1) * C.extent(2);
  for (size_t i = 0; i < C.extent(0); ++i)
    KokkosBlas::gemm(ta, tb, alpha, as_matrix<const T>(A.data() + i * sa, A.extent(1), A.extent(2)),
                     as_matrix<const T>(B.data() + i * sb, B.extent(1), B.extent(2)), beta,
                     as_matrix(C.data() + i * sc, C.extent(1), C.extent(2)));
}

namespace detail {
/// gemm_bf16() on the host: oneDNN's bf16 matmul with A16 or B16 the operand held in bf16 (the
/// other one, A or B, rounded as gemm() rounds it).
void gemm_bf16_held(char transA, char transB, float alpha, const GemmDims& d, const float* A,
                    const bf16_t* A16, std::int64_t lda, std::int64_t a_span, const float* B, const bf16_t* B16,
                    std::int64_t ldb, std::int64_t b_span, float beta, View2<float> C) {
#if TRIDENT_HAVE_ONEDNN
  onednn_gemm(true, transA, transB, 1, d.m, d.n, d.k, alpha, A, lda, 0, a_span, B, ldb, 0, b_span, beta, C.data(),
              C.stride(0), 0, A16, B16);
#else
  (void)transA, (void)transB, (void)alpha, (void)d, (void)A, (void)A16, (void)lda, (void)a_span, (void)B, (void)B16;
  (void)ldb, (void)b_span, (void)beta, (void)C;
  throw Error("gemm: bf16 inputs: " + gemm_bf16_unavailable_reason());
#endif
}

/// gemm_batched_bf16() on the host: oneDNN's bf16 matmul on two operands held in bf16.
void gemm_batched_bf16_held(char transA, char transB, float alpha, const GemmDims& d, std::int64_t batch,
                            const bf16_t* A16, std::int64_t lda, std::int64_t sa, const bf16_t* B16, std::int64_t ldb,
                            std::int64_t sb, float beta, float* C, std::int64_t ldc, std::int64_t sc) {
#if TRIDENT_HAVE_ONEDNN
  onednn_gemm(true, transA, transB, batch, d.m, d.n, d.k, alpha, nullptr, lda, sa, 0, nullptr, ldb, sb, 0, beta, C,
              ldc, sc, A16, B16);
#else
  (void)transA, (void)transB, (void)alpha, (void)d, (void)batch, (void)A16, (void)lda, (void)sa, (void)B16;
  (void)ldb, (void)sb, (void)beta, (void)C, (void)ldc, (void)sc;
  throw Error("gemm: bf16 inputs: " + gemm_bf16_unavailable_reason());
#endif
}
}  // namespace detail

void set_host_gemm_chooser(HostGemmChooser chooser) {
  if (chooser && !host_gemm_available(HostGemm::onednn))
    throw Error("gemm: this build has no oneDNN: a per-shape choice of the fp32 GEMM library needs both libraries");
  std::lock_guard<std::mutex> lock(g_choice_mutex);
  g_choices.clear();
  g_has_chooser = static_cast<bool>(chooser);
  g_chooser = std::move(chooser);
}

std::vector<std::pair<GemmShape, HostGemm>> host_gemm_choices() {
  std::lock_guard<std::mutex> lock(g_choice_mutex);
  return {g_choices.begin(), g_choices.end()};
}

std::vector<std::vector<double>> time_host_gemm(const GemmShape& s, const std::vector<HostGemm>& libs, int rounds) {
  for (HostGemm lib : libs)
    if (!host_gemm_available(lib)) throw Error("time_host_gemm: this build has no oneDNN");
  if (s.batch <= 0 || s.m <= 0 || s.n <= 0 || s.k <= 0 || rounds <= 0)
    throw Error("time_host_gemm: shape " + s.text() + " or rounds " + std::to_string(rounds) + " is not positive");
  // Row-major operands stored as the call reads them: A is (k, m) for 'T', else (m, k); B likewise.
  // One set for every library and round.
  const std::int64_t a_rows = s.ta == 'T' ? s.k : s.m, a_cols = s.ta == 'T' ? s.m : s.k;
  const std::int64_t b_rows = s.tb == 'T' ? s.n : s.k, b_cols = s.tb == 'T' ? s.k : s.n;
  const std::int64_t sa = a_rows * a_cols, sb = b_rows * b_cols, sc = s.m * s.n;
  std::vector<float> a(static_cast<size_t>(s.batch * sa)), b(static_cast<size_t>(s.batch * sb)),
      c(static_cast<size_t>(s.batch * sc));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.02f * static_cast<float>(i % 13) - 0.12f;
  const char ta[2] = {s.ta, '\0'}, tb[2] = {s.tb, '\0'};
  const auto call = [&](HostGemm lib) {
    if (lib == HostGemm::onednn) {
#if TRIDENT_HAVE_ONEDNN
      detail::onednn_gemm(false, s.ta, s.tb, s.batch, s.m, s.n, s.k, 1.f, a.data(), a_cols, sa, s.batch * sa,
                          b.data(), b_cols, sb, s.batch * sb, 0.f, c.data(), s.n, sc);
#endif
      return;
    }
    for (std::int64_t i = 0; i < s.batch; ++i)
      KokkosBlas::gemm(ta, tb, 1.f, as_matrix<const float>(a.data() + i * sa, a_rows, a_cols),
                       as_matrix<const float>(b.data() + i * sb, b_rows, b_cols), 0.f,
                       as_matrix(c.data() + i * sc, s.m, s.n));
  };
  using clock = std::chrono::steady_clock;
  // Per library: a warm-up call (primitive creation, thread pools, page faults), then the
  // repetitions per timed round: enough for about a millisecond, so small shapes are not timer noise.
  std::vector<int> reps(libs.size());
  for (size_t l = 0; l < libs.size(); ++l) {
    call(libs[l]);
    const auto t0 = clock::now();
    call(libs[l]);
    const double once = std::chrono::duration<double>(clock::now() - t0).count();
    reps[l] = std::clamp(static_cast<int>(1e-3 / std::max(once, 1e-9)), 1, 1000);
  }
  const double flop = 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.m) * static_cast<double>(s.n) *
                      static_cast<double>(s.k);
  std::vector<std::vector<double>> rate(libs.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t l = 0; l < libs.size(); ++l) {
      const auto t = clock::now();
      for (int i = 0; i < reps[l]; ++i) call(libs[l]);
      rate[l].push_back(flop * reps[l] / std::chrono::duration<double>(clock::now() - t).count());
    }
  return rate;
}

TRIDENT_INSTANTIATE_FLOATING(TRIDENT_GEMM_INSTANTIATE)

}  // namespace trident
