#include "parallel/runtime.hpp"

#include "core/log.hpp"
#include "parallel/mpi_communicator.hpp"

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <thread>

// OpenBLAS's thread-count setter; weak so that another BLAS (MKL, BLIS, cuBLAS builds) still links.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
// OpenMP's, for oneDNN's bf16 GEMMs (Debian's oneDNN threads with OpenMP); weak: a build without
// oneDNN does not link libgomp.
extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace trident {

namespace {

// One GPU per rank, the same for Kokkos and NCCL: with Kokkos' CUDA backend, "--kokkos-device-id=N"
// for N = node-local rank modulo the visible devices (so ranks beyond the GPU count share them,
// which the MPI collectives backend allows), unless the user chose a device through Kokkos' own
// options or environment. An option rather than InitializationSettings::set_device_id, so that
// the same code serves Kokkos 3 and 4 and Kokkos still reads the user's --kokkos-* options. The
// NCCL backend uses the device current after Kokkos' initialisation, i.e. this one. Empty without a
// CUDA Kokkos.
std::string kokkos_device_arg(const std::vector<char*>& kokkos_args, int node_rank) {
#ifdef KOKKOS_ENABLE_CUDA
  for (const char* a : kokkos_args)
    for (const char* opt : {"--kokkos-device-id", "--kokkos-map-device-id-by", "--kokkos-num-devices", "--kokkos-ndevices"})
      if (std::strncmp(a, opt, std::strlen(opt)) == 0) return "";
  for (const char* env : {"KOKKOS_DEVICE_ID", "KOKKOS_VISIBLE_DEVICES", "KOKKOS_MAP_DEVICE_ID_BY"})
    if (std::getenv(env) != nullptr) return "";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices <= 0) {
    (void)cudaGetLastError();
    return "";  // Kokkos reports the missing device itself
  }
  return "--kokkos-device-id=" + std::to_string(node_rank % devices);
#else
  (void)kokkos_args;
  (void)node_rank;
  return "";
#endif
}

}  // namespace

bool mpi_thread_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level == MPI_THREAD_MULTIPLE;
}

Runtime::Runtime(int& argc, char**& argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
  self_ = std::make_unique<MpiCommunicator>(MPI_COMM_SELF, "self");
  log::set_rank(world_->rank(), world_->size());

  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_->rank(), MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &node_size_);
  MPI_Comm_rank(node, &node_rank_);
  MPI_Comm_free(&node);

  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && openblas_set_num_threads != nullptr) {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    blas_threads_ = hw > node_size_ ? hw / node_size_ : 1;
    openblas_set_num_threads(blas_threads_);
  }
  // The same share of the node for OpenMP (oneDNN), unless the user set it.
  if (std::getenv("OMP_NUM_THREADS") == nullptr && omp_set_num_threads != nullptr) {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    omp_set_num_threads(hw > node_size_ ? hw / node_size_ : 1);
  }
  // Kokkos sees only its own --kokkos-* options (so `trident --help` does not print Kokkos's
  // help); a bad value there is a usage error, reported once, not an uncaught exception.
  std::vector<char*> kargs = {argv[0]};
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--kokkos-", 9) == 0) kargs.push_back(argv[i]);
  std::string device_arg = kokkos_device_arg(kargs, node_rank_);
  if (!device_arg.empty()) kargs.push_back(device_arg.data());
  int kargc = static_cast<int>(kargs.size());
  try {
    Kokkos::initialize(kargc, kargs.data());
  } catch (const std::exception& e) {
    if (world_->rank() == 0) {
      std::string opts;
      for (int i = 1; i < kargc; ++i) opts += std::string(" ") + kargs[static_cast<size_t>(i)];
      std::fprintf(stderr, "trident: error: Kokkos rejected its options%s (%s)\n", opts.c_str(), e.what());
    }
    world_.reset();
    self_.reset();
    MPI_Finalize();
    std::exit(2);
  }
  // Remove the --kokkos-* options from the program's arguments.
  int out = 1;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--kokkos-", 9) != 0) argv[out++] = argv[i];
  argc = out;
}

Runtime::~Runtime() {
  world_.reset();
  self_.reset();
  Kokkos::finalize();
  MPI_Finalize();
}

void Runtime::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace trident
