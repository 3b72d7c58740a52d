// core/kmath.hpp: device-safe math functions under one name for Kokkos 3.4 and 4.x.
//
// Layer: core (Kokkos only). Kokkos 3.4 (Debian's Trilinos) keeps sqrt/exp/log/erf/... in
// Kokkos::Experimental; Kokkos >= 3.7 moved them to Kokkos:: and 4.x removed the old names.
// Kernels call trident::kmath::sqrt etc. so one source builds against both.
#pragma once

#include <Kokkos_Core.hpp>

namespace trident::kmath {
#if KOKKOS_VERSION >= 30700
using Kokkos::cos;
using Kokkos::erf;
using Kokkos::exp;
using Kokkos::fabs;
using Kokkos::log;
using Kokkos::sin;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::erf;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sin;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif
}  // namespace trident::kmath
