// The collectives interface on GPU buffers, one test body for each backend (STYLE.md, "One test
// body, every backend"): the NCCL backend, and the MPI backend staging device buffers through host
// memory (mpi_communicator.hpp). Every collective, blocking and non-blocking, f32/f64/i64/bf16,
// sum/max/min, in-place forms, device, managed and host buffers, the point-to-point patterns of
// the trainer, split(), ordering after the compute stream, and byte counts; then the process grid
// on NCCL.
//
// Oracle: the MPI backend on the same inputs, compared bitwise. The inputs are multiples of 1/4
// small enough that every partial sum over up to 8 ranks is exact in f32, f64 and bf16, so the
// reduction orders of NCCL (rings, trees) and MPICH cannot differ. One bf16 case needs rounding:
// at <= 2 ranks both backends round a + b once to nearest even, so it is bitwise too. bf16 max/min,
// which the MPI backend does not offer, is checked against a host reduction of the gathered inputs.
//
// NCCL needs a CUDA device per rank (it refuses two ranks of a communicator on one GPU); the MPI
// backend's staging needs a device, which ranks may share. Without one the tests of a backend skip,
// saying why; tests/CMakeLists.txt makes ctest report the skip when there is no GPU at all.
// NcclSupport checks what needs no GPU (it runs as its own ctest entry).
#include "core/error.hpp"
#include "parallel/comm_backend.hpp"
#include "parallel/communicator.hpp"
#include "parallel/device_memory.hpp"
#include "parallel/nccl_communicator.hpp"
#include "parallel/process_grid.hpp"
#include "test_env.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace trident {
namespace {

using Bytes = std::vector<unsigned char>;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// ---- buffers in every kind of memory the backend must accept ---------------------------------

enum class Mem { device, pageable, pinned, managed };
const char* mem_name(Mem m) {
  switch (m) {
    case Mem::device: return "device";
    case Mem::pageable: return "pageable";
    case Mem::pinned: return "pinned";
    case Mem::managed: return "managed";
  }
  return "?";
}

class Buffer {
 public:
  Buffer(Mem m, std::size_t bytes) : mem_(m), bytes_(std::max<std::size_t>(bytes, 1)) {
    void* p = nullptr;
    switch (m) {
      case Mem::device: cuda_ok(cudaMalloc(&p, bytes_), "cudaMalloc"); break;
      case Mem::pageable: host_.resize(bytes_); p = host_.data(); break;
      case Mem::pinned: cuda_ok(cudaMallocHost(&p, bytes_), "cudaMallocHost"); break;
      case Mem::managed: cuda_ok(cudaMallocManaged(&p, bytes_), "cudaMallocManaged"); break;
    }
    ptr_ = static_cast<unsigned char*>(p);
  }
  ~Buffer() {
    if (mem_ == Mem::device || mem_ == Mem::managed) (void)cudaFree(ptr_);
    if (mem_ == Mem::pinned) (void)cudaFreeHost(ptr_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  unsigned char* data() { return ptr_; }
  void put(const Bytes& b, std::size_t offset = 0) {
    cuda_ok(cudaMemcpy(ptr_ + offset, b.data(), b.size(), cudaMemcpyDefault), "cudaMemcpy (put)");
  }
  Bytes get(std::size_t offset = 0, std::size_t bytes = SIZE_MAX) const {
    Bytes out(std::min(bytes, bytes_ - offset));
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // managed memory is read on the host
    cuda_ok(cudaMemcpy(out.data(), ptr_ + offset, out.size(), cudaMemcpyDefault), "cudaMemcpy (get)");
    return out;
  }

 private:
  Mem mem_;
  std::size_t bytes_;
  std::vector<unsigned char> host_;
  unsigned char* ptr_ = nullptr;
};

// ---- inputs and the oracle --------------------------------------------------------------------

std::uint16_t bf16_exact(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0xffffu) != 0) throw std::logic_error("test input not exact in bf16");
  return static_cast<std::uint16_t>(u >> 16);
}
float bf16_value(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// `count` elements of `t`, different per rank and salt: k/4 with |k| <= 30, so every partial sum
/// over up to 8 ranks is exact in f32, f64 and bf16 (|sum| <= 60 needs 8 significant bits). i64
/// values exceed 32 bits.
Bytes make_input(DataType t, std::size_t count, int rank, int salt) {
  Bytes b(count * dtype_size(t));
  for (std::size_t i = 0; i < count; ++i) {
    const long k = static_cast<long>((i * 7 + static_cast<std::size_t>(rank) * 13 + static_cast<std::size_t>(salt) * 5) % 61) - 30;
    unsigned char* at = b.data() + i * dtype_size(t);
    switch (t) {
      case DataType::f32: { const float v = 0.25f * static_cast<float>(k); std::memcpy(at, &v, 4); break; }
      case DataType::f64: { const double v = 0.25 * static_cast<double>(k); std::memcpy(at, &v, 8); break; }
      case DataType::i64: { const std::int64_t v = k * (std::int64_t(1) << 40) + rank; std::memcpy(at, &v, 8); break; }
      case DataType::bf16: { const std::uint16_t v = bf16_exact(0.25f * static_cast<float>(k)); std::memcpy(at, &v, 2); break; }
      default: throw std::logic_error("make_input: type not used by these tests");
    }
  }
  return b;
}

/// bf16 values whose sum over 2 ranks needs rounding (to nearest even, ties included): rank 0
/// holds 1 + j/128, rank 1 holds (128 + m)/256; both exact in bf16, their sum is not.
Bytes make_rounding_input(std::size_t count, int rank) {
  Bytes b(count * 2);
  for (std::size_t i = 0; i < count; ++i) {
    const float v = rank == 0 ? 1.0f + static_cast<float>(i % 128) / 128.0f
                              : static_cast<float>(128 + (i * 37) % 128) / 256.0f;
    const std::uint16_t h = bf16_exact(v);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}

const DataType kTypes[] = {DataType::f32, DataType::f64, DataType::i64, DataType::bf16};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min};

std::string label(const char* what, DataType t, ReduceOp op, Mem m, const char* form) {
  static const char* types[] = {"u8", "i32", "i64", "u64", "f32", "f64", "bf16"};
  static const char* ops[] = {"sum", "max", "min"};
  return std::string(what) + " " + types[static_cast<int>(t)] + " " + ops[static_cast<int>(op)] + " " + mem_name(m) +
         " " + form;
}

void expect_same(const Bytes& got, const Bytes& want, DataType t, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (got == want) return;
  const std::size_t es = dtype_size(t);
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      ADD_FAILURE() << what << ": first difference at element " << i / es << " of " << got.size() / es;
      return;
    }
}

/// The all-reduce of `in` over the MPI backend; bf16 max/min (not offered there) as a host
/// reduction of the inputs gathered by MPI.
Bytes oracle_all_reduce(Communicator& mpi, const Bytes& in, DataType t, ReduceOp op) {
  const std::size_t count = in.size() / dtype_size(t);
  Bytes out(in.size());
  if (t != DataType::bf16 || op == ReduceOp::sum) {
    mpi.all_reduce(in.data(), out.data(), count, t, op);
    return out;
  }
  Bytes all(in.size() * static_cast<std::size_t>(mpi.size()));
  mpi.all_gather(in.data(), all.data(), in.size(), DataType::u8);
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t best;
    std::memcpy(&best, all.data() + 2 * i, 2);
    for (int r = 1; r < mpi.size(); ++r) {
      std::uint16_t h;
      std::memcpy(&h, all.data() + static_cast<std::size_t>(r) * in.size() + 2 * i, 2);
      const bool better = op == ReduceOp::max ? bf16_value(h) > bf16_value(best) : bf16_value(h) < bf16_value(best);
      if (better) best = h;
    }
    std::memcpy(out.data() + 2 * i, &best, 2);
  }
  return out;
}

/// How a non-blocking operation is completed; the blocking form is one more.
enum class Form { blocking, wait, test_loop, stream_wait };
const char* form_name(Form f) {
  switch (f) {
    case Form::blocking: return "blocking";
    case Form::wait: return "wait";
    case Form::test_loop: return "test";
    case Form::stream_wait: return "stream_wait";
  }
  return "?";
}
const Form kForms[] = {Form::blocking, Form::wait, Form::test_loop, Form::stream_wait};

/// Where and how the reduce-scatter and all-gather tests run: every form on device memory, and the
/// forms that differ on staged host memory (whose non-blocking forms have completed on return).
struct Way {
  Mem mem;
  Form form;
};
const Way kWays[] = {{Mem::device, Form::blocking}, {Mem::device, Form::wait}, {Mem::device, Form::test_loop},
                     {Mem::device, Form::stream_wait}, {Mem::pageable, Form::blocking}, {Mem::pageable, Form::wait}};

/// Completes `r` as `f` says. `device_streams`: the backend completes requests on CUDA streams
/// (NCCL); without them (MPI) stream_wait() refuses and the host waits instead.
void finish(Request& r, Form f, bool device_streams) {
  switch (f) {
    case Form::blocking: break;
    case Form::wait: r.wait(); break;
    case Form::test_loop:
      while (!r.test()) {
      }
      break;
    case Form::stream_wait:  // the legacy default stream waits; the host then waits for it
      EXPECT_EQ(r.stream_wait(nullptr), device_streams);
      if (!device_streams) r.wait();
      cuda_ok(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
      break;
  }
  EXPECT_FALSE(r.pending());
}

/// Runs one operation in form `f`: `blocking()`, or `start()` and completing its Request as `f` says.
template <class Blocking, class Start>
void run_in_form(Form f, bool device_streams, Blocking&& blocking, Start&& start) {
  if (f == Form::blocking) {
    blocking();
    return;
  }
  Request r = start();
  finish(r, f, device_streams);
}

// ---- the suites: one communicator under test per backend, over the world, made once ------------

/// The communicator under test: NCCL, or MPI handed device buffers (staged through the host).
enum class Backend { nccl, mpi };

struct SuiteState {
  bool made = false;
  std::string skip;        // why every test of this backend skips; empty when they run
  std::string init_error;  // making the communicator failed although devices were there
  std::unique_ptr<Communicator> comm;
};
SuiteState& suite(Backend b) {
  static SuiteState s[2];
  return s[static_cast<int>(b)];
}

/// Why this job cannot run the tests of `b`, agreed by all ranks (empty: it can). "<backend> tests
/// skipped: no usable CUDA device" (what ctest's SKIP_REGULAR_EXPRESSION matches) only when rank 0
/// has no GPU at all, so that ctest never reports a skip for a run in which some tests ran. NCCL
/// also needs a GPU per rank (min_node_ranks == 0) or, for the refusal test, min_node_ranks ranks
/// on a node.
std::string agreed_skip_reason(Backend b, int min_node_ranks = 0) {
  Runtime& rt = test::runtime();
  const NcclSupport s = nccl_support();
  const char* who = b == Backend::nccl ? "NCCL tests skipped: " : "MPI device-buffer tests skipped: ";
  std::string local;
  if (!s.usable())
    local = who + s.reason;
  else if (b == Backend::nccl && rt.node_size() > s.device_count && min_node_ranks == 0)
    local = std::to_string(rt.node_size()) + " ranks on this node but " + std::to_string(s.device_count) +
            " CUDA device(s): NCCL cannot put two ranks of one communicator on one GPU";
  else if (rt.node_size() < min_node_ranks)
    local = "needs " + std::to_string(min_node_ranks) + " ranks on one node";
  if (rt.world().all_true(local.empty())) return "";
  return local.empty() ? "another rank cannot run these tests (its reason is in its output)" : local;
}
std::string agreed_skip_reason(int min_node_ranks) { return agreed_skip_reason(Backend::nccl, min_node_ranks); }

/// Makes the communicator under test of `b` on every rank. Collective over the world.
void make_suite(Backend b) {
  SuiteState& s = suite(b);
  s.made = true;
  s.skip = agreed_skip_reason(b);
  if (!s.skip.empty()) return;
  Communicator& world = test::runtime().world();
  try {
    if (b == Backend::nccl) {
      select_node_local_device(world);
      s.comm = make_nccl_communicator(world, "world");
    } else {  // ranks may share a GPU: the node-local rank modulo the devices, as Kokkos is told
      cuda_ok(cudaSetDevice(test::runtime().node_rank() % nccl_support().device_count), "cudaSetDevice");
      s.comm = world.split(0, world.rank(), "world");
    }
  } catch (const Error& e) {
    s.init_error = e.what();
  }
}

class DeviceCollectives : public ::testing::TestWithParam<Backend> {
 public:
  static void TearDownTestSuite() {
    for (Backend b : {Backend::nccl, Backend::mpi}) suite(b).comm.reset();
  }

 protected:
  void SetUp() override {
    SuiteState& s = suite(GetParam());
    if (!s.made) make_suite(GetParam());
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    ASSERT_TRUE(s.init_error.empty()) << s.init_error;
  }
  /// The communicator under test, and the MPI backend on host memory as the oracle.
  Communicator& comm() { return *suite(GetParam()).comm; }
  Communicator& mpi() { return test::runtime().world(); }
  bool is_nccl() const { return GetParam() == Backend::nccl; }
  /// Whether the backend under test offers `op` on `t` (the MPI backend sums bf16 only).
  bool offers(DataType t, ReduceOp op) const { return is_nccl() || t != DataType::bf16 || op == ReduceOp::sum; }
  int n() { return mpi().size(); }
  int rank() { return mpi().rank(); }
};

INSTANTIATE_TEST_SUITE_P(Backends, DeviceCollectives, ::testing::Values(Backend::nccl, Backend::mpi),
                         [](const ::testing::TestParamInfo<Backend>& i) {
                           return std::string(i.param == Backend::nccl ? "nccl" : "mpi_staged");
                         });

TEST_P(DeviceCollectives, AllReduceMatchesMpi) {
  const std::size_t count = 1031;  // not a multiple of anything NCCL splits by
  int salt = 0;
  for (DataType t : kTypes)
    for (ReduceOp op : kOps)
      for (Mem m : {Mem::device, Mem::pageable, Mem::pinned, Mem::managed})
        for (bool in_place : {false, true}) {
          if (!offers(t, op)) continue;
          const Form f = kForms[static_cast<std::size_t>(salt) % 4];
          const std::string what = label("all_reduce", t, op, m, form_name(f)) + (in_place ? " in place" : "");
          const Bytes in = make_input(t, count, rank(), ++salt);
          const Bytes want = oracle_all_reduce(mpi(), in, t, op);
          Buffer a(m, in.size()), b(m, in.size());
          a.put(in);
          void* out = in_place ? a.data() : b.data();
          run_in_form(
              f, is_nccl(), [&] { comm().all_reduce(a.data(), out, count, t, op); },
              [&] { return comm().iall_reduce(a.data(), out, count, t, op); });
          expect_same(in_place ? a.get() : b.get(), want, t, what);
          if (!in_place) expect_same(a.get(), in, t, what + " (input untouched)");
        }
}

TEST_P(DeviceCollectives, Bf16SumRoundsLikeMpi) {
  if (n() > 2) GTEST_SKIP() << "one rounding per element only with <= 2 ranks";
  const std::size_t count = 512;
  const Bytes in = make_rounding_input(count, rank());
  const Bytes want = oracle_all_reduce(mpi(), in, DataType::bf16, ReduceOp::sum);
  for (Mem m : {Mem::device, Mem::pageable}) {
    Buffer a(m, in.size());
    a.put(in);
    comm().all_reduce(a.data(), a.data(), count, DataType::bf16, ReduceOp::sum);
    expect_same(a.get(), want, DataType::bf16, std::string("bf16 rounding ") + mem_name(m));
  }
}

TEST_P(DeviceCollectives, ReduceScatterMatchesMpi) {
  const std::size_t k = 257;  // elements per rank
  const std::size_t nk = k * static_cast<std::size_t>(n());
  int salt = 0;
  for (DataType t : kTypes)
    for (ReduceOp op : kOps)
      for (const Way& w : kWays) {
        if (!offers(t, op)) continue;
        const std::string what = label("reduce_scatter", t, op, w.mem, form_name(w.form));
        const std::size_t es = dtype_size(t);
        const Bytes in = make_input(t, nk, rank(), ++salt);
        const Bytes full = oracle_all_reduce(mpi(), in, t, op);
        const Bytes want(full.begin() + static_cast<long>(static_cast<std::size_t>(rank()) * k * es),
                         full.begin() + static_cast<long>(static_cast<std::size_t>(rank() + 1) * k * es));
        if (t != DataType::bf16 || op == ReduceOp::sum) {  // the MPI backend's own reduce_scatter agrees
          Bytes block(k * es);
          mpi().reduce_scatter(in.data(), block.data(), k, t, op);
          expect_same(block, want, t, what + " (MPI vs all_reduce)");
        }
        Buffer a(w.mem, in.size()), b(w.mem, k * es);
        a.put(in);
        run_in_form(
            w.form, is_nccl(), [&] { comm().reduce_scatter(a.data(), b.data(), k, t, op); },
            [&] { return comm().ireduce_scatter(a.data(), b.data(), k, t, op); });
        expect_same(b.get(), want, t, what);
      }
}

TEST_P(DeviceCollectives, AllGatherMatchesMpi) {
  const std::size_t k = 333;
  int salt = 0;
  for (DataType t : kTypes)
    for (bool in_place : {false, true})
      for (const Way& w : kWays) {
        const std::string what =
            label("all_gather", t, ReduceOp::sum, w.mem, form_name(w.form)) + (in_place ? " in place" : "");
        const std::size_t es = dtype_size(t), mine = static_cast<std::size_t>(rank()) * k * es;
        const Bytes in = make_input(t, k, rank(), ++salt);
        Bytes want(in.size() * static_cast<std::size_t>(n()));
        mpi().all_gather(in.data(), want.data(), k, t);
        Buffer a(w.mem, in.size()), b(w.mem, want.size());
        b.put(Bytes(want.size(), 0xab));  // what in place must overwrite
        void* send = a.data();
        if (in_place) {
          b.put(in, mine);
          send = b.data() + mine;
        } else {
          a.put(in);
        }
        run_in_form(
            w.form, is_nccl(), [&] { comm().all_gather(send, b.data(), k, t); },
            [&] { return comm().iall_gather(send, b.data(), k, t); });
        expect_same(b.get(), want, t, what);
      }
}

TEST_P(DeviceCollectives, BroadcastMatchesMpi) {
  const std::size_t count = 1000;
  int salt = 0;
  for (DataType t : kTypes)
    for (Mem m : {Mem::device, Mem::pageable, Mem::managed})
      for (int root : {0, n() - 1}) {
        const std::string what = label("broadcast", t, ReduceOp::sum, m, "blocking") + " root " + std::to_string(root);
        const Bytes in = make_input(t, count, rank(), ++salt);
        Bytes want = in;
        mpi().broadcast(want.data(), count, t, root);
        Buffer a(m, in.size());
        a.put(in);
        comm().broadcast(a.data(), count, t, root);
        expect_same(a.get(), want, t, what);
      }
}

TEST_P(DeviceCollectives, HostScalarsOfTheTrainer) {
  // What the trainer does with host variables: sums of losses, agreement flags, small broadcasts.
  EXPECT_EQ(comm().all_reduce_value<double>(0.5 * rank()), mpi().all_reduce_value<double>(0.5 * rank()));
  EXPECT_EQ(comm().all_reduce_value<std::int64_t>(rank(), ReduceOp::max), n() - 1);
  EXPECT_EQ(comm().all_reduce_value<std::int32_t>(rank() + 5, ReduceOp::min), 5);
  EXPECT_TRUE(comm().all_true(true));
  EXPECT_FALSE(comm().all_true(rank() != n() - 1));
  char name[64] = {};
  if (rank() == n() - 1) std::strcpy(name, "from the last rank");
  comm().broadcast(name, sizeof name, n() - 1);
  EXPECT_STREQ(name, "from the last rank");
  // A host message larger than the first staging buffer (1 MiB) makes it grow.
  std::vector<float> big(std::size_t(1) << 20, 1.0f);
  comm().all_reduce(big.data(), big.size(), ReduceOp::sum);
  EXPECT_EQ(big.front(), static_cast<float>(n()));
  EXPECT_EQ(big.back(), static_cast<float>(n()));
  // NCCL: a non-blocking form on host memory has completed when it returns (MPI: after wait()).
  double v = 1.0, out = 0.0;
  Request r = comm().iall_reduce(&v, &out, 1, DataType::f64, ReduceOp::sum);
  EXPECT_EQ(r.pending(), !is_nccl());
  r.wait();
  EXPECT_EQ(out, static_cast<double>(n()));
}

TEST_P(DeviceCollectives, PointToPointPatternsOfTheTrainer) {
  const int left = (rank() + n() - 1) % n(), right = (rank() + 1) % n();
  const std::size_t count = 100000;  // larger than NCCL's eager buffers, so an unmatched order would hang
  for (DataType t : {DataType::f64, DataType::bf16})
    for (Mem m : {Mem::device, Mem::pageable}) {
      const std::string what = label("p2p", t, ReduceOp::sum, m, "");
      const std::size_t bytes = count * dtype_size(t);
      const Bytes mine = make_input(t, count, rank(), 1), from_left = make_input(t, count, left, 1);
      Buffer s(m, bytes), r(m, bytes);
      s.put(mine);
      // MPI's ring exchange: irecv from the left, then a blocking send to the right.
      Request q = comm().irecv(r.data(), count, t, left, 5);
      comm().send(s.data(), count, t, right, 5);
      q.wait();
      expect_same(r.get(), from_left, t, what + " irecv+send");
      // 1F1B: isend to the right, then a blocking recv from the left.
      r.put(Bytes(bytes, 0));
      Request q2 = comm().isend(s.data(), count, t, right, 6);
      comm().recv(r.data(), count, t, left, 6);
      q2.wait();
      expect_same(r.get(), from_left, t, what + " isend+recv");
      // Two messages to one peer arrive in the order posted (tags are not matched by NCCL).
      const Bytes second = make_input(t, count, rank(), 2), second_from_left = make_input(t, count, left, 2);
      Buffer s2(m, bytes), r2(m, bytes);
      s2.put(second);
      Request a = comm().isend(s.data(), count, t, right, 7);
      Request b = comm().isend(s2.data(), count, t, right, 3);
      Request c = comm().irecv(r.data(), count, t, left, 7);
      Request d = comm().irecv(r2.data(), count, t, left, 3);
      EXPECT_TRUE(d.pending());
      d.wait();  // starts the whole deferred group
      while (!c.test()) {
      }
      a.wait();
      finish(b, Form::stream_wait, is_nccl());
      expect_same(r.get(), from_left, t, what + " FIFO first");
      expect_same(r2.get(), second_from_left, t, what + " FIFO second");
    }
  if (n() >= 2 && (n() % 2 == 0 || rank() < n() - 1)) {  // pairs (0,1), (2,3), ...: blocking send/recv
    const int partner = rank() ^ 1;
    Buffer s(Mem::device, 8 * 10), r(Mem::device, 8 * 10);
    const Bytes mine = make_input(DataType::f64, 10, rank(), 3), theirs = make_input(DataType::f64, 10, partner, 3);
    s.put(mine);
    if (rank() % 2 == 0) {
      comm().send(s.data(), 10, DataType::f64, partner, 0);
      comm().recv(r.data(), 10, DataType::f64, partner, 0);
    } else {
      comm().recv(r.data(), 10, DataType::f64, partner, 0);
      comm().send(s.data(), 10, DataType::f64, partner, 0);
    }
    expect_same(r.get(), theirs, DataType::f64, "blocking pair");
  }
  comm().barrier();
}

TEST_P(DeviceCollectives, SplitMatchesMpi) {
  struct Case {
    int color, key;
    const char* axis;
  };
  for (const Case& c : {Case{rank() % 2, rank(), "parity"}, Case{0, n() - 1 - rank(), "reversed"}}) {
    auto m = mpi().split(c.color, c.key, c.axis);
    auto g = comm().split(c.color, c.key, c.axis);
    EXPECT_EQ(g->axis(), c.axis);
    EXPECT_EQ(g->size(), m->size());
    EXPECT_EQ(g->rank(), m->rank());
    const Bytes in = make_input(DataType::f32, 100, rank(), 9);
    Bytes want(in.size());
    m->all_reduce(in.data(), want.data(), 100, DataType::f32, ReduceOp::sum);
    Buffer a(Mem::device, in.size());
    a.put(in);
    g->all_reduce(a.data(), a.data(), 100, DataType::f32, ReduceOp::sum);
    expect_same(a.get(), want, DataType::f32, std::string("split ") + c.axis);
  }
}

TEST_P(DeviceCollectives, ByteCountsEqualTheMpiBackend) {
  auto m = mpi().split(0, rank(), "bytes");
  auto g = comm().split(0, rank(), "bytes");
  const int left = (rank() + n() - 1) % n(), right = (rank() + 1) % n();
  const std::size_t k = 1000, nk = k * static_cast<std::size_t>(n());
  // The same calls on both: MPI on host vectors, NCCL on device buffers.
  auto run = [&](Communicator& c, void* x, void* y) {
    c.all_reduce(x, x, nk, DataType::f32, ReduceOp::sum);
    c.reduce_scatter(x, y, k, DataType::f32, ReduceOp::max);
    c.all_gather(y, x, k, DataType::f32);
    c.broadcast(x, nk, DataType::bf16, 0);
    c.broadcast(x, 7, DataType::f64, n() - 1);
    Request a = c.iall_reduce(x, x, k, DataType::i64, ReduceOp::min);
    a.wait();
    Request b = c.ireduce_scatter(x, y, k, DataType::bf16, ReduceOp::sum);
    b.wait();
    Request d = c.iall_gather(y, x, k, DataType::f64);
    d.wait();
    Request e = c.irecv(y, 10, DataType::f64, left, 1);
    c.send(x, 10, DataType::f64, right, 1);
    e.wait();
    Request f = c.isend(x, 3, DataType::i64, right, 2);
    c.recv(y, 3, DataType::i64, left, 2);
    f.wait();
    c.barrier();
  };
  std::vector<double> hx(nk), hy(nk);
  run(*m, hx.data(), hy.data());
  Buffer dx(Mem::device, nk * 8), dy(Mem::device, nk * 8);
  dx.put(Bytes(nk * 8, 0));
  run(*g, dx.data(), dy.data());
  for (int op = 0; op < static_cast<int>(CommOp::count_); ++op) {
    EXPECT_EQ(g->stats().calls[op], m->stats().calls[op]) << comm_op_name(static_cast<CommOp>(op));
    EXPECT_EQ(g->stats().bytes[op], m->stats().bytes[op]) << comm_op_name(static_cast<CommOp>(op));
  }
  EXPECT_EQ(g->stats().bytes[static_cast<int>(CommOp::all_reduce)],
            modelled_bytes(CommOp::all_reduce, nk, DataType::f32, n(), false) +
                modelled_bytes(CommOp::all_reduce, k, DataType::i64, n(), false));
}

TEST_P(DeviceCollectives, OperationsWaitForTheComputeStream) {
  // A large memset enqueued (not waited for) on the compute stream must land before the
  // all-reduce reads the buffer. NCCL: the comm stream waits for an event on the compute stream.
  // MPI: the staging copy runs on the legacy default stream, which waits for work on blocking
  // streams (Kokkos' CUDA instance is one).
  const std::size_t count = std::size_t(64) << 20;  // 256 MiB of int32
  Buffer a(Mem::device, count * 4);
  auto element = [&](std::size_t i) {
    std::int32_t v = 0;
    std::memcpy(&v, a.get(i * 4, 4).data(), 4);
    return v;
  };
  if (!is_nccl()) {
    cudaStream_t blocking_stream = nullptr;
    cuda_ok(cudaStreamCreate(&blocking_stream), "cudaStreamCreate");
    for (bool blocking : {true, false}) {
      cuda_ok(cudaMemset(a.data(), 0, count * 4), "cudaMemset");
      cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      cuda_ok(cudaMemsetAsync(a.data(), 0x01, count * 4, blocking_stream), "cudaMemsetAsync");
      if (blocking) {
        comm().all_reduce(a.data(), a.data(), count, DataType::i32, ReduceOp::sum);
      } else {
        Request r = comm().iall_reduce(a.data(), a.data(), count, DataType::i32, ReduceOp::sum);
        r.wait();
      }
      EXPECT_EQ(element(0), 0x01010101 * n()) << (blocking ? "blocking" : "non-blocking");
      EXPECT_EQ(element(count - 1), 0x01010101 * n()) << (blocking ? "blocking" : "non-blocking");
    }
    cuda_ok(cudaStreamDestroy(blocking_stream), "cudaStreamDestroy");
    return;
  }
  auto& c = dynamic_cast<NcclCommunicator&>(comm());
  cudaStream_t s = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  struct Restore {
    NcclCommunicator& c;
    cudaStream_t s;
    ~Restore() {
      c.set_compute_stream(nullptr);
      (void)cudaStreamDestroy(s);
    }
  } restore{c, s};
  for (int pass = 0; pass < 2; ++pass) {
    cuda_ok(cudaMemset(a.data(), 0, count * 4), "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cudaStream_t compute = pass == 0 ? s : nullptr;  // a stream of its own, then the legacy default stream
    c.set_compute_stream(compute);
    EXPECT_EQ(c.compute_stream(), static_cast<void*>(compute));
    cuda_ok(cudaMemsetAsync(a.data(), 0x01, count * 4, compute), "cudaMemsetAsync");
    Request r = c.iall_reduce(a.data(), a.data(), count, DataType::i32, ReduceOp::sum);
    EXPECT_TRUE(r.stream_wait(compute));  // and the compute stream waits for the result
    std::int32_t first = 0, last = 0;
    cuda_ok(cudaMemcpyAsync(&first, a.data(), 4, cudaMemcpyDeviceToHost, compute), "cudaMemcpyAsync");
    cuda_ok(cudaMemcpyAsync(&last, a.data() + (count - 1) * 4, 4, cudaMemcpyDeviceToHost, compute), "cudaMemcpyAsync");
    cuda_ok(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
    EXPECT_EQ(first, 0x01010101 * n()) << "pass " << pass;
    EXPECT_EQ(last, 0x01010101 * n()) << "pass " << pass;
  }
}

TEST_P(DeviceCollectives, BadRanksAreErrorsNamingTheAxis) {
  if (!is_nccl()) GTEST_SKIP() << "MPI's error handler ends the job on a bad rank";
  double x = 0.0;
  try {
    comm().send(&x, 1, DataType::f64, n(), 0);
    ADD_FAILURE() << "send to rank n() did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'world'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm().broadcast(&x, 1, DataType::f64, -1), Error);
  // The communicator is still usable.
  EXPECT_EQ(comm().all_reduce_value<double>(1.0), static_cast<double>(n()));
}

// ---- the process grid on NCCL ------------------------------------------------------------------------

// [parallel] comm_backend = nccl: dp, tp, pp and mp become NCCL communicators of the same ranks,
// their splits stay NCCL, and the world stays MPI.
TEST(NcclGrid, AxesAreNcclAndTheWorldStaysMpi) {
  const std::string skip = agreed_skip_reason(Backend::nccl);
  if (!skip.empty()) GTEST_SKIP() << skip;
  Communicator& world = test::runtime().world();
  const int n = world.size();
  ProcessGrid g(world, {n, 1, 1}, CommBackend::nccl);
  EXPECT_EQ(g.comm_backend(), CommBackend::nccl);
  EXPECT_EQ(g.describe_comm_backends(), "dp nccl, tp nccl, pp nccl, mp nccl, world mpi");
  EXPECT_EQ(dynamic_cast<NcclCommunicator&>(g.dp_comm()).compute_stream(), kokkos_compute_stream());
  EXPECT_EQ(g.dp_comm().rank(), g.dp_rank());
  EXPECT_EQ(g.dp_comm().size(), n);
  // A device buffer summed over dp, and a host scalar over every axis (the trainer's loss).
  const Bytes in = make_input(DataType::f32, 1000, world.rank(), 4);
  Bytes want(in.size());
  world.all_reduce(in.data(), want.data(), 1000, DataType::f32, ReduceOp::sum);
  Buffer a(Mem::device, in.size());
  a.put(in);
  g.dp_comm().all_reduce(a.data(), a.data(), 1000, DataType::f32, ReduceOp::sum);
  expect_same(a.get(), want, DataType::f32, "grid dp all_reduce");
  for (Communicator* c : {&g.tp_comm(), &g.pp_comm(), &g.mp_comm()}) EXPECT_EQ(c->all_reduce_value(1.0), 1.0) << c->axis();
  // ModelState's splits: dp into shard and replicate groups, pp into the tied-embedding group.
  auto shard = g.dp_comm().split(0, g.dp_rank(), "dp_shard");
  auto tied = g.pp_comm().split(0, g.pp_rank(), "pp_tied");
  EXPECT_STREQ(shard->backend(), "nccl");
  EXPECT_STREQ(tied->backend(), "nccl");
  EXPECT_EQ(shard->all_reduce_value(1), n);
  EXPECT_EQ(tied->all_reduce_value(1), 1);
}

// Two ranks on one GPU: refused before NCCL would be, with the same error on every rank.
TEST(NcclInit, TwoRanksOnOneGpuAreRefusedWithAHint) {
  const std::string skip = agreed_skip_reason(2);
  if (!skip.empty()) GTEST_SKIP() << skip;
  int previous = 0;
  cuda_ok(cudaGetDevice(&previous), "cudaGetDevice");
  cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  try {
    auto c = make_nccl_communicator(test::runtime().world(), "dup");
    ADD_FAILURE() << "two ranks on device 0 were accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(e.collective());
    EXPECT_NE(msg.find("'dup'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("comm_backend = mpi"), std::string::npos) << msg;
  }
  cuda_ok(cudaSetDevice(previous), "cudaSetDevice");
}

// ---- what needs no GPU (its own ctest entry) ------------------------------------------------------

TEST(NcclSupport, ReportsBuildVersionAndDevices) {
  const NcclSupport s = nccl_support();
  EXPECT_TRUE(s.built);
  EXPECT_GE(s.nccl_version, 21000) << "NCCL with point-to-point (2.7) and bf16 (2.10) needed";
  EXPECT_EQ(s.usable(), s.device_count > 0);
  EXPECT_EQ(s.reason.empty(), s.usable()) << s.reason;
  EXPECT_EQ(nccl_available(), s.usable());
  if (!s.usable() && test::runtime().world_rank() == 0)
    std::printf("nccl_support(): NCCL %d built, not usable: %s\n", s.nccl_version, s.reason.c_str());
}

TEST(NcclSupport, FactoryFailsAlikeOnEveryRankWithoutAGpu) {
  Communicator& world = test::runtime().world();
  if (!world.all_true(!nccl_available())) GTEST_SKIP() << "a rank has a GPU";
  try {
    auto c = make_nccl_communicator(world, "dp");
    ADD_FAILURE() << "made an NCCL communicator without a GPU";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(e.collective()) << msg;
    EXPECT_NE(msg.find("'dp'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("comm_backend = mpi"), std::string::npos) << msg;
  }
  EXPECT_EQ(world.all_reduce_value<std::int32_t>(1), world.size());  // MPI still in step
}

}  // namespace
}  // namespace trident
