# Spack package recipe of Trident (docs/install.md, "Spack"). The dependency list is kept in step
# with CMake's find_package/find_path/find_library calls by tests/install/check_spack_recipe.py
# (ctest spack_recipe): a new dependency in cmake/ needs a depends_on here, and the reverse.
#
#   spack repo add <trident source>/spack
#   spack install trident                        # host build: MPI, parallel HDF5, Kokkos, KokkosKernels
#   spack install trident +cuda cuda_arch=90     # GPU build: Kokkos with CUDA, cuBLAS, NCCL
#   spack load trident   # or: module load trident (Spack's module files, or the Lmod one installed
#                        # under <prefix>/share/modulefiles)
import os

from spack.package import *


def _source_tree():
    """The Trident repository this recipe sits in (spack/packages/trident/package.py)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", ".."))


class Trident(CMakePackage, CudaPackage):
    """Trident: GPT-style transformer training across MPI ranks (data x tensor x pipeline
    parallelism, ZeRO/FSDP), Kokkos kernels, parallel-HDF5 checkpoints."""

    # The repository holding this recipe, so `spack install trident@main` needs no network; a
    # site that mirrors Trident elsewhere points `git` (and a `homepage`) there.
    git = "file://" + _source_tree()

    version("main", branch="main")

    variant("tests", default=False, description="Build the GoogleTest/ctest suite (TRIDENT_BUILD_TESTS)")
    variant("benchmarks", default=False, description="Build the Google Benchmark micro-benchmarks (TRIDENT_BUILD_BENCHMARKS)")
    variant("onednn", default=True, when="~cuda",
            description="bf16 GEMMs on the host through oneDNN: [train] compute_dtype = bf16 (TRIDENT_ENABLE_ONEDNN)")
    variant("nccl", default=True, when="+cuda", description="NCCL communicator backend for dp/tp/pp collectives (TRIDENT_ENABLE_NCCL)")

    # Build tool (cmake_minimum_required in CMakeLists.txt).
    depends_on("cmake@3.20:", type="build")

    # cmake/TridentDependencies.cmake, in its order.
    depends_on("mpi")
    depends_on("hdf5@1.10.7:+mpi")  # parallel HDF5: CMake stops on a serial one (HDF5_IS_PARALLEL)
    depends_on("kokkos@3.4:")
    # GPU build: a Kokkos 4 with CUDA for the same architecture; Trident compiles with its
    # nvcc_wrapper (cmake_args below). GEMMs go through cuBLAS then, not KokkosKernels.
    depends_on("kokkos@4:+cuda+cuda_lambda+wrapper", when="+cuda")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
    depends_on("kokkos-kernels@3.4:+blas", when="~cuda")  # host GEMMs (KokkosBlas over a BLAS)
    depends_on("boost@1.74:+program_options")
    depends_on("random123")
    depends_on("xxhash")
    depends_on("sentencepiece")  # the bpe tokenizer (trainer and processor libraries)
    depends_on("onednn@2.0:2", when="~cuda+onednn")  # host bf16 GEMMs (matmul; the 2.x API)
    depends_on("nccl", when="+nccl")
    depends_on("googletest@1.10:", when="+tests")
    depends_on("benchmark", when="+benchmarks")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("TRIDENT_BUILD_TESTS", "tests"),
            self.define_from_variant("TRIDENT_BUILD_BENCHMARKS", "benchmarks"),
            # Spack's compiler wrapper already compiles for the spec's target (target=...): no
            # -march of Trident's own. The start-up CPU check still tests what that target enabled.
            self.define("TRIDENT_CPU_TARGET", "default"),
        ]
        if spec.satisfies("+cuda"):
            args.append(self.define("CMAKE_CXX_COMPILER", spec["kokkos"].kokkos_cxx))
            args.append(self.define("CMAKE_CUDA_ARCHITECTURES", spec.variants["cuda_arch"].value))
            args.append(self.define("TRIDENT_ENABLE_NCCL", "ON" if spec.satisfies("+nccl") else "OFF"))
        else:
            args.append(self.define("TRIDENT_ENABLE_NCCL", "OFF"))
            args.append(self.define_from_variant("TRIDENT_ENABLE_ONEDNN", "onednn"))
        return args
