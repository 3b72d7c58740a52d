// kernels/gemm.cpp: what both GEMM backends share (the shape checks).
#include "kernels/gemm.hpp"

#include "core/error.hpp"
#include "kernels/instantiate.hpp"

#include <atomic>
#include <string>
#include <tuple>
#include <type_traits>

namespace trident {

std::string GemmShape::text() const {
  return std::string{ta, tb} + " " + std::to_string(batch) + "x" + std::to_string(m) + "x" + std::to_string(n) + "x" +
         std::to_string(k);
}

bool GemmShape::operator<(const GemmShape& o) const {
  return std::tie(ta, tb, batch, m, n, k) < std::tie(o.ta, o.tb, o.batch, o.m, o.n, o.k);
}

namespace {
std::atomic<bool> g_reuse_alive{false};  // one GemmInputReuse at a time
}  // namespace

template <class T>
GemmInputReuse<T>::GemmInputReuse(GemmInputs inputs, const T* data, std::int64_t n) {
  bool used = false;
  if constexpr (std::is_same_v<T, float>) used = inputs == GemmInputs::bf16 && n > 0 && gemm_bf16_supported();
  // A scope that keeps nothing still refuses to nest (the mistake is the caller's in any dtype).
  bool expected = false;
  if (used ? !g_reuse_alive.compare_exchange_strong(expected, true) : g_reuse_alive.load())
    throw Error("gemm: GemmInputReuse scopes do not nest (one is alive already)");
  if (!used) return;
  try {
    if constexpr (std::is_same_v<T, float>) detail::gemm_reuse_keep(data, n);
  } catch (...) {
    detail::gemm_reuse_end();
    g_reuse_alive.store(false);
    throw;
  }
  active_ = true;
}

template <class T>
GemmInputReuse<T>::~GemmInputReuse() {
  if (!active_) return;
  detail::gemm_reuse_end();
  g_reuse_alive.store(false);
}

void gemm_bf16(char transA, char transB, float alpha, View2<const bf16_t> A, View2<const float> B, float beta,
               View2<float> C) {
  const auto d = detail::gemm_dims("gemm_bf16", transA, transB, A.extent(0), A.extent(1), B.extent(0), B.extent(1),
                                   C.extent(0), C.extent(1));
  detail::gemm_bf16_held(transA, transB, alpha, d, nullptr, A.data(), A.stride(0), static_cast<std::int64_t>(A.span()),
                         B.data(), nullptr, B.stride(0), static_cast<std::int64_t>(B.span()), beta, C);
}

void gemm_bf16(char transA, char transB, float alpha, View2<const float> A, View2<const bf16_t> B, float beta,
               View2<float> C) {
  const auto d = detail::gemm_dims("gemm_bf16", transA, transB, A.extent(0), A.extent(1), B.extent(0), B.extent(1),
                                   C.extent(0), C.extent(1));
  detail::gemm_bf16_held(transA, transB, alpha, d, A.data(), nullptr, A.stride(0), static_cast<std::int64_t>(A.span()),
                         nullptr, B.data(), B.stride(0), static_cast<std::int64_t>(B.span()), beta, C);
}

GemmBf16Room::GemmBf16Room(std::int64_t n) : n_(n) {
  if (!gemm_bf16_supported()) throw Error("gemm: bf16 inputs: " + gemm_bf16_unavailable_reason());
  bool expected = false;
  if (!g_reuse_alive.compare_exchange_strong(expected, true))
    throw Error("gemm: a GemmBf16Room does not nest with another one or a GemmInputReuse scope");
  try {
    data_ = detail::gemm_room_lend(n);
  } catch (...) {
    g_reuse_alive.store(false);
    throw;
  }
}

GemmBf16Room::~GemmBf16Room() {
  detail::gemm_room_end();
  g_reuse_alive.store(false);
}

void GemmBf16Room::round_from(const float* in, std::int64_t n) const {
  if (n > n_)
    throw Error("gemm: GemmBf16Room::round_from: " + std::to_string(n) + " elements into a room of " +
                std::to_string(n_));
  detail::gemm_round(data_, in, n);
}

void gemm_batched_bf16(char transA, char transB, float alpha, View3<const bf16_t> A, View3<const bf16_t> B,
                       float beta, View3<float> C) {
  detail::check_batch_sizes(A.extent(0), B.extent(0), C.extent(0));
  const auto d = detail::gemm_dims("gemm_batched_bf16", transA, transB, A.extent(1), A.extent(2), B.extent(1),
                                   B.extent(2), C.extent(1), C.extent(2));
  detail::gemm_batched_bf16_held(transA, transB, alpha, d, static_cast<std::int64_t>(C.extent(0)), A.data(),
                                 A.stride(1), A.stride(0), B.data(), B.stride(1), B.stride(0), beta, C.data(),
                                 C.stride(1), C.stride(0));
}

#define TRIDENT_INST(T) template class GemmInputReuse<T>;
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident

namespace trident::detail {

GemmDims gemm_dims(const char* what, char transA, char transB, std::int64_t a_rows, std::int64_t a_cols,
                   std::int64_t b_rows, std::int64_t b_cols, std::int64_t c_rows, std::int64_t c_cols) {
  auto shape = [](std::int64_t r, std::int64_t c) { return "(" + std::to_string(r) + ", " + std::to_string(c) + ")"; };
  if ((transA != 'N' && transA != 'T') || (transB != 'N' && transB != 'T'))
    throw Error(std::string(what) + ": trans must be 'N' or 'T', got '" + transA + "', '" + transB + "'");
  const bool ta = transA == 'T', tb = transB == 'T';
  const GemmDims d{ta ? a_cols : a_rows, tb ? b_rows : b_cols, ta ? a_rows : a_cols};
  const std::int64_t kb = tb ? b_cols : b_rows;
  if (kb != d.k || c_rows != d.m || c_cols != d.n)
    throw Error(std::string(what) + ": shapes do not agree: op(A) " + shape(d.m, d.k) + ", op(B) " + shape(kb, d.n) +
                ", C " + shape(c_rows, c_cols) + " (trans " + transA + transB + ")");
  return d;
}

void check_batch_sizes(std::int64_t a, std::int64_t b, std::int64_t c) {
  if (a != c || b != c)
    throw Error("gemm_batched: batch sizes differ (A " + std::to_string(a) + ", B " + std::to_string(b) + ", C " +
                std::to_string(c) + ")");
}

}  // namespace trident::detail
