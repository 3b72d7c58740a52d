#include "kernels/convert.hpp"

#include "kernels/instantiate.hpp"

namespace trident {

template <class T>
void convert_to_bf16(View1<bf16_t> out, View1<const T> in) {
  Kokkos::parallel_for(
      "trident::convert_to_bf16", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { out(i) = to_bf16(static_cast<float>(in(i))); });
}

template <class T>
void convert_from_bf16(View1<T> out, View1<const bf16_t> in) {
  Kokkos::parallel_for(
      "trident::convert_from_bf16", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { out(i) = static_cast<T>(from_bf16(in(i))); });
}

template <class T>
void round_through_bf16(View1<T> x) {
  Kokkos::parallel_for(
      "trident::round_through_bf16", Kokkos::RangePolicy<ExecSpace>(0, x.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { x(i) = static_cast<T>(from_bf16(to_bf16(static_cast<float>(x(i))))); });
}

template <class T>
void convert_to_half(HalfFormat fmt, View1<std::uint16_t> out, View1<const T> in) {
  if (fmt == HalfFormat::bf16) return convert_to_bf16<T>(out, in);
  Kokkos::parallel_for(
      "trident::convert_to_fp16", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { out(i) = to_fp16(static_cast<float>(in(i))); });
}

template <class T>
void convert_from_half(HalfFormat fmt, View1<T> out, View1<const std::uint16_t> in) {
  if (fmt == HalfFormat::bf16) return convert_from_bf16<T>(out, in);
  Kokkos::parallel_for(
      "trident::convert_from_fp16", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { out(i) = static_cast<T>(from_fp16(in(i))); });
}

#define TRIDENT_INST(T)                                                         \
  template void convert_to_bf16<T>(View1<bf16_t>, View1<const T>);              \
  template void convert_from_bf16<T>(View1<T>, View1<const bf16_t>);            \
  template void round_through_bf16<T>(View1<T>);                               \
  template void convert_to_half<T>(HalfFormat, View1<std::uint16_t>, View1<const T>); \
  template void convert_from_half<T>(HalfFormat, View1<T>, View1<const std::uint16_t>);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
