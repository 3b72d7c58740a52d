#include "kernels/linear.hpp"

#include "kernels/gemm.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/row_parallel.hpp"

#include <type_traits>

namespace trident {

namespace {

/// out(n, o) += bias(o) for every row: short rows (kernels/row_parallel.hpp), a team thread per
/// row and its vector lanes over the OC columns, so a GPU warp touches consecutive addresses.
template <class T>
void add_row_bias(const char* label, View2<T> out, View1<const T> bias) {
  const int OC = static_cast<int>(out.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(out.extent(0));
  Kokkos::parallel_for(
      label, short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t n) {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, OC), [&](const int o) { out(n, o) += bias(o); });
        });
      });
}

}  // namespace

template <class T>
void linear_forward(View2<T> out, View2<const T> inp, View2<const T> weight, View1<const T> bias, GemmInputs inputs) {
  gemm<T>('N', 'T', T(1), inp, weight, T(0), out, inputs);
  if (bias.extent(0) == 0) return;
  add_row_bias<T>("trident::linear_forward_bias", out, bias);
}

template <class T>
void add_bias(View2<T> out, View1<const T> bias) {
  if (bias.extent(0) == 0) return;
  add_row_bias<T>("trident::add_bias", out, bias);
}

namespace {

/// The GEMMs of linear_backward: inp float (gemm) or held in bf16 (gemm_bf16).
template <class T, class In>
void linear_backward_gemms(View2<T> dinp, View2<T> dweight, View2<const T> dout, View2<const In> inp,
                           View2<const T> weight, bool accumulate_dinp, GemmInputs inputs) {
  // Both GEMMs read dout: with bf16 inputs it is rounded once for the two.
  const bool both = dinp.extent(0) > 0;
  GemmInputReuse<T> reuse(both ? inputs : GemmInputs::native, dout.data(), static_cast<std::int64_t>(dout.span()));
  if (both) gemm<T>('N', 'N', T(1), dout, weight, accumulate_dinp ? T(1) : T(0), dinp, inputs);
  if constexpr (std::is_same_v<In, bf16_t>)
    gemm_bf16('T', 'N', 1.f, dout, inp, 1.f, dweight);
  else
    gemm<T>('T', 'N', T(1), dout, inp, T(1), dweight, inputs);
}

/// dbias += the column sums of dout.
template <class T>
void bias_backward(View1<T> dbias, View2<const T> dout) {
  if (dbias.extent(0) == 0) return;
  // dbias sums the N rows of dout: a column reduction (kernels/row_parallel.hpp; fixed order, no atomics).
  const std::int64_t N = static_cast<std::int64_t>(dout.extent(0));
  column_sums<T>(
      "trident::linear_backward_bias", static_cast<int>(dout.extent(1)),
      KOKKOS_LAMBDA(const int o, const std::int64_t first, const std::int64_t stride) {
        T acc = 0;
        for (std::int64_t n = first; n < N; n += stride) acc += dout(n, o);
        return acc;
      },
      KOKKOS_LAMBDA(const int o, const T& sum) { dbias(o) += sum; });
}

}  // namespace

template <class T>
void linear_backward(View2<T> dinp, View2<T> dweight, View1<T> dbias, View2<const T> dout, View2<const T> inp,
                     View2<const T> weight, bool accumulate_dinp, GemmInputs inputs) {
  linear_backward_gemms<T, T>(dinp, dweight, dout, inp, weight, accumulate_dinp, inputs);
  bias_backward<T>(dbias, dout);
}

void linear_forward_bf16(View2<float> out, View2<const bf16_t> inp, View2<const float> weight, View1<const float> bias) {
  gemm_bf16('N', 'T', 1.f, inp, weight, 0.f, out);
  if (bias.extent(0) == 0) return;
  add_row_bias<float>("trident::linear_forward_bias", out, bias);
}

void linear_backward_bf16(View2<float> dinp, View2<float> dweight, View1<float> dbias, View2<const float> dout,
                          View2<const bf16_t> inp, View2<const float> weight, bool accumulate_dinp) {
  linear_backward_gemms<float, bf16_t>(dinp, dweight, dout, inp, weight, accumulate_dinp, GemmInputs::bf16);
  bias_backward<float>(dbias, dout);
}

#define TRIDENT_INST(T)                                                                                   \
  template void linear_forward<T>(View2<T>, View2<const T>, View2<const T>, View1<const T>, GemmInputs); \
  template void add_bias<T>(View2<T>, View1<const T>);                                                     \
  template void linear_backward<T>(View2<T>, View2<T>, View1<T>, View2<const T>, View2<const T>,          \
                                   View2<const T>, bool, GemmInputs);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
