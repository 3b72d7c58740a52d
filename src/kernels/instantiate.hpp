// kernels/instantiate.hpp: explicit instantiation helper for kernel templates.
// Kernels are templates on the scalar type (double in the finite-difference tests, float in
// training) defined in .cpp files and instantiated here for exactly those types, so the Kokkos
// lambdas compile once per type instead of in every including file.
#pragma once

#define TRIDENT_INSTANTIATE_FLOATING(MACRO) \
  MACRO(float)                              \
  MACRO(double)
