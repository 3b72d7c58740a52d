// parallel/nccl_communicator.cpp: the NCCL backend (see nccl_communicator.hpp for its rules).
//
// Plain C++ against the host APIs of the CUDA runtime and NCCL: no kernels, so no CUDA compiler.
// The state lives in NcclCommunicator::Impl, shared with the Requests of non-blocking operations
// so that a Request outliving its communicator still finds its stream and events.
#include "parallel/nccl_communicator.hpp"

#include "core/error.hpp"
#include "parallel/device_memory.hpp"
#include "parallel/mpi_communicator.hpp"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace trident {

namespace {

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::u8: return ncclUint8;
    case DataType::i32: return ncclInt32;
    case DataType::i64: return ncclInt64;
    case DataType::u64: return ncclUint64;
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::bf16: return ncclBfloat16;  // NCCL reduces bf16 natively (sum, max, min)
    case DataType::f16: return ncclFloat16;    // and IEEE half
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

std::string where(const std::string& axis) { return "NCCL communicator '" + axis + "'"; }

void check_cuda(cudaError_t e, const char* call, const std::string& axis) {
  if (e != cudaSuccess)
    throw Error(where(axis) + ": " + call + " failed: " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
}

std::string nccl_message(ncclResult_t r, const char* call, const std::string& axis, ncclComm_t comm) {
  std::string msg = where(axis) + ": " + call + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') msg += " (" + std::string(last) + ")";
  return msg;
}

// Why a process has no usable CUDA device, from the error of the call that found out.
std::string no_device(cudaError_t e) {
  const bool no_driver = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
  return std::string("no usable CUDA device (") + cudaGetErrorString(e) + (no_driver ? "; no NVIDIA driver or GPU here?)" : ")");
}

void check_nccl(ncclResult_t r, const char* call, const std::string& axis, ncclComm_t comm) {
  if (r != ncclSuccess) throw Error(nccl_message(r, call, axis, comm));
}

// The current CUDA device is per host thread: every entry point switches to the communicator's
// device (a background thread may call in) and restores the caller's device on exit.
class DeviceGuard {
 public:
  DeviceGuard(int device, const std::string& axis) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice", axis);
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice", axis);
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

constexpr std::size_t kAlign = 256;  // staging regions start on cudaMalloc's alignment
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
// NCCL accepts at most 2048 operations in one group (user guide, "Group Calls").
constexpr std::size_t kMaxGroupOps = 1024;

// One deferred point-to-point call.
struct P2p {
  bool is_send;
  void* buf;  // const for a send
  std::size_t count;
  DataType t;
  int peer;
};

// Completion of one enqueued batch: a non-blocking collective, or the point-to-point calls started
// in one group. `done` stays null while the batch is deferred, and after a failed start (whose
// error the starting call has thrown already).
struct Batch {
  bool started = false;
  cudaEvent_t inputs = nullptr;  // recorded on the compute stream by each deferred call
  cudaEvent_t done = nullptr;    // recorded on the comm stream after the batch
  ~Batch() {
    if (inputs != nullptr) (void)cudaEventDestroy(inputs);
    if (done != nullptr) (void)cudaEventDestroy(done);
  }
};

}  // namespace

struct NcclCommunicator::Impl : std::enable_shared_from_this<NcclCommunicator::Impl> {
  std::string axis;
  MPI_Comm mpi = MPI_COMM_NULL;  // owned duplicate
  int rank = 0;
  int size = 1;
  int device = 0;
  ncclComm_t nccl = nullptr;
  cudaStream_t stream = nullptr;   // the comm stream
  cudaStream_t compute = nullptr;  // 0: legacy default stream
  cudaEvent_t compute_ready = nullptr;
  char* scratch = nullptr;  // device staging buffer for host pointers
  std::size_t scratch_bytes = 0;
  std::vector<P2p> pending;  // deferred isend/irecv, in call order
  std::shared_ptr<Batch> pending_batch;

  /// Collective over `parent`. device < 0: the calling thread's current device.
  Impl(MPI_Comm parent, std::string axis_, cudaStream_t compute_, int device_) : axis(std::move(axis_)), compute(compute_) {
    MPI_Comm_dup(parent, &mpi);
    MPI_Comm_rank(mpi, &rank);
    MPI_Comm_size(mpi, &size);
    try {
      init(device_);
    } catch (...) {
      release();
      throw;
    }
  }
  ~Impl() { release(); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void cuda(cudaError_t e, const char* call) const { check_cuda(e, call, axis); }
  void check(ncclResult_t r, const char* call) const { check_nccl(r, call, axis, nccl); }

  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= size)
      throw Error(where(axis) + ": " + what + " rank " + std::to_string(r) + " is outside 0.." + std::to_string(size - 1));
  }

  // ---- set-up and tear-down -----------------------------------------------------------------
  void init(int device_) {
    agree_on_devices(device_);
    DeviceGuard guard(device, axis);
    // Rank 0 makes the id; its status travels first, so a failure there fails every rank alike.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    int status = ncclSuccess;
    if (rank == 0) status = ncclGetUniqueId(&id);
    MPI_Bcast(&status, 1, MPI_INT, 0, mpi);
    if (status != ncclSuccess)
      throw Error(nccl_message(static_cast<ncclResult_t>(status), "ncclGetUniqueId (on rank 0)", axis, nullptr),
                  /*collective=*/true);
    MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, mpi);
    const ncclResult_t r = ncclCommInitRank(&nccl, size, id, rank);
    if (r != ncclSuccess) {
      nccl = nullptr;
      throw Error(nccl_message(r, "ncclCommInitRank", axis, nullptr) + " on rank " + std::to_string(rank) + " of " +
                  std::to_string(size) + ", CUDA device " + std::to_string(device) +
                  ". NCCL needs one GPU per rank and working GPU-to-GPU transports (NCCL_DEBUG=INFO "
                  "says more); to run without NCCL, use [parallel] comm_backend = mpi");
    }
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    cuda(cudaEventCreateWithFlags(&compute_ready, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }

  // Every rank names its device by host and PCI bus id, or says why it has none; all ranks gather
  // the lists and fail alike when a rank has no device or two ranks share one (NCCL would refuse
  // it in ncclCommInitRank, on some ranks only, leaving the others waiting).
  void agree_on_devices(int device_) {
    constexpr int kLen = 512;
    std::vector<char> mine(kLen, '\0');
    std::string text;
    bool ok = true;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count == 0) e = cudaErrorNoDevice;
    if (e == cudaSuccess) e = device_ >= 0 ? cudaSuccess : cudaGetDevice(&device);
    if (device_ >= 0) device = device_;
    char bus[64] = {};
    if (e == cudaSuccess) e = cudaDeviceGetPCIBusId(bus, sizeof bus, device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      ok = false;
      text = no_device(e);
    } else {
      char host[MPI_MAX_PROCESSOR_NAME] = {};
      int len = 0;
      MPI_Get_processor_name(host, &len);
      text = std::string(host) + " PCI " + bus + " (CUDA device " + std::to_string(device) + ")";
    }
    mine[0] = ok ? '1' : '0';
    std::strncpy(mine.data() + 1, text.c_str(), kLen - 2);
    std::vector<char> all(static_cast<std::size_t>(kLen) * static_cast<std::size_t>(size));
    MPI_Allgather(mine.data(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, mpi);
    auto entry = [&](int r) { return std::string(all.data() + static_cast<std::size_t>(r) * kLen + 1); };
    auto good = [&](int r) { return all[static_cast<std::size_t>(r) * kLen] == '1'; };
    for (int r = 0; r < size; ++r) {
      if (!good(r))
        throw Error(where(axis) + ": rank " + std::to_string(r) + " has " + entry(r) +
                        "; use [parallel] comm_backend = mpi on machines without a GPU per rank",
                    /*collective=*/true);
      for (int q = 0; q < r; ++q)
        if (entry(q) == entry(r))
          throw Error(where(axis) + ": ranks " + std::to_string(q) + " and " + std::to_string(r) +
                          " would both use the GPU " + entry(r) +
                          "; NCCL needs one GPU per rank of a communicator. Run one rank per GPU "
                          "(each rank on its node-local device) or use [parallel] comm_backend = mpi",
                      /*collective=*/true);
    }
  }

  void release() noexcept {
    if (nccl != nullptr || stream != nullptr || scratch != nullptr || compute_ready != nullptr) {
      int previous = device;
      (void)cudaGetDevice(&previous);
      (void)cudaSetDevice(device);
      if (nccl != nullptr) {
        try {
          flush();
        } catch (...) {  // the error reached its caller already, or there is nobody left to tell
        }
        if (stream != nullptr) (void)cudaStreamSynchronize(stream);
        (void)ncclCommDestroy(nccl);
        nccl = nullptr;
      }
      if (stream != nullptr) (void)cudaStreamDestroy(stream);
      if (compute_ready != nullptr) (void)cudaEventDestroy(compute_ready);
      if (scratch != nullptr) (void)cudaFree(scratch);
      stream = nullptr;
      compute_ready = nullptr;
      scratch = nullptr;
      (void)cudaSetDevice(previous);
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (mpi != MPI_COMM_NULL && !finalized) MPI_Comm_free(&mpi);
    mpi = MPI_COMM_NULL;
  }

  // ---- buffers ------------------------------------------------------------------------------
  /// True for device and managed memory of this communicator's device, false for host memory
  /// (pageable or pinned), which is staged.
  bool on_device(const void* p) const {
    int holder = device;
    const MemoryKind kind = memory_kind(p, &holder);
    if (kind == MemoryKind::host) return false;
    if (kind == MemoryKind::device && holder != device)
      throw Error(where(axis) + ": a buffer lives on CUDA device " + std::to_string(holder) +
                  " but the communicator uses device " + std::to_string(device));
    return true;
  }

  /// Device scratch of at least `bytes`. Only staged operations use it, and they complete before
  /// they return, so it is idle whenever it is handed out.
  char* scratch_of(std::size_t bytes) {
    if (bytes > scratch_bytes) {
      if (scratch != nullptr) cuda(cudaFree(scratch), "cudaFree (staging buffer)");
      scratch = nullptr;
      scratch_bytes = 0;
      const std::size_t want = std::max(bytes, std::size_t(1) << 20);
      void* p = nullptr;
      cuda(cudaMalloc(&p, want), "cudaMalloc (staging buffer for host pointers)");
      scratch = static_cast<char*>(p);
      scratch_bytes = want;
    }
    return scratch;
  }

  // ---- ordering -----------------------------------------------------------------------------
  /// Makes the comm stream wait for everything enqueued so far on the compute stream.
  void after_compute() {
    cuda(cudaEventRecord(compute_ready, compute), "cudaEventRecord (compute stream)");
    cuda(cudaStreamWaitEvent(stream, compute_ready, 0), "cudaStreamWaitEvent (comm stream)");
  }

  void synchronize() { cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (comm stream)"); }

  /// A Request completed by an event recorded now on the comm stream.
  Request request_after_enqueued() {
    auto b = std::make_shared<Batch>();
    b->started = true;
    cuda(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    cuda(cudaEventRecord(b->done, stream), "cudaEventRecord (comm stream)");
    return request(std::move(b));
  }
  Request request(std::shared_ptr<Batch> b);

  // ---- collectives --------------------------------------------------------------------------
  /// Runs one collective: `in` (in_bytes) and `out` (out_bytes) are the caller's buffers and
  /// `enqueue(in, out)` issues the NCCL call on device-accessible pointers. Host buffers are staged;
  /// an `in` lying inside a host `out` (in-place forms) keeps its offset inside the staged copy.
  template <class F>
  Request collective(const void* in, std::size_t in_bytes, void* out, std::size_t out_bytes, bool blocking, F&& enqueue) {
    DeviceGuard guard(device, axis);
    flush();  // deferred point-to-point calls first: call order is stream order
    after_compute();
    const bool host_in = !on_device(in), host_out = !on_device(out);
    if (!host_in && !host_out) {
      enqueue(in, out);
      if (!blocking) return request_after_enqueued();
      synchronize();
      return Request();
    }
    const auto i = reinterpret_cast<std::uintptr_t>(in), o = reinterpret_cast<std::uintptr_t>(out);
    const bool nested = host_in && host_out && i >= o && i + in_bytes <= o + out_bytes;
    char* base = scratch_of(aligned(out_bytes) + (host_in && !nested ? in_bytes : 0));
    char* d_out = host_out ? base : static_cast<char*>(out);
    const void* d_in = in;
    if (host_in) {
      char* dst = nested ? d_out + (i - o) : base + aligned(out_bytes);
      cuda(cudaMemcpyAsync(dst, in, in_bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (stage in)");
      d_in = dst;
    }
    enqueue(d_in, d_out);
    if (host_out)
      cuda(cudaMemcpyAsync(out, d_out, out_bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (stage out)");
    synchronize();
    return Request();
  }

  Request all_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op, bool blocking) {
    if (count == 0) return Request();
    const std::size_t bytes = count * dtype_size(t);
    return collective(send, bytes, recv, bytes, blocking, [&](const void* s, void* r) {
      check(ncclAllReduce(s, r, count, nccl_type(t), nccl_op(op), nccl, stream), "ncclAllReduce");
    });
  }

  Request reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op, bool blocking) {
    if (recv_count == 0) return Request();
    const std::size_t bytes = recv_count * dtype_size(t);
    return collective(send, bytes * static_cast<std::size_t>(size), recv, bytes, blocking, [&](const void* s, void* r) {
      check(ncclReduceScatter(s, r, recv_count, nccl_type(t), nccl_op(op), nccl, stream), "ncclReduceScatter");
    });
  }

  Request all_gather(const void* send, void* recv, std::size_t send_count, DataType t, bool blocking) {
    if (send_count == 0) return Request();
    const std::size_t bytes = send_count * dtype_size(t);
    return collective(send, bytes, recv, bytes * static_cast<std::size_t>(size), blocking, [&](const void* s, void* r) {
      check(ncclAllGather(s, r, send_count, nccl_type(t), nccl, stream), "ncclAllGather");
    });
  }

  void broadcast(void* buf, std::size_t count, DataType t, int root) {
    check_rank(root, "broadcast root");
    if (count == 0) return;
    const std::size_t bytes = count * dtype_size(t);
    collective(buf, bytes, buf, bytes, /*blocking=*/true, [&](const void* s, void* r) {
      check(ncclBroadcast(s, r, count, nccl_type(t), root, nccl, stream), "ncclBroadcast");
    });
  }

  // ---- point-to-point -----------------------------------------------------------------------
  /// Queues one send or receive; a blocking one starts the queue at once and waits for it.
  Request p2p(P2p op, bool blocking) {
    check_rank(op.peer, op.is_send ? "send destination" : "recv source");
    if (op.count == 0) return Request();
    DeviceGuard guard(device, axis);
    if (!pending_batch) {
      pending_batch = std::make_shared<Batch>();
      cuda(cudaEventCreateWithFlags(&pending_batch->inputs, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    // The buffer is ready (send) or free (recv) after what the compute stream has now, not after
    // what it will have when the batch starts: record the event at call time.
    cuda(cudaEventRecord(pending_batch->inputs, compute), "cudaEventRecord (compute stream)");
    pending.push_back(op);
    std::shared_ptr<Batch> batch = pending_batch;
    if (blocking || pending.size() >= kMaxGroupOps) flush();
    if (blocking) {
      synchronize();
      return Request();
    }
    return request(std::move(batch));
  }

  /// Starts the deferred point-to-point calls in one NCCL group.
  void flush() {
    if (pending.empty()) return;
    DeviceGuard guard(device, axis);
    std::vector<P2p> ops;
    ops.swap(pending);
    std::shared_ptr<Batch> batch = std::move(pending_batch);
    pending_batch.reset();
    batch->started = true;  // also on failure: the requests must not start it again
    cuda(cudaStreamWaitEvent(stream, batch->inputs, 0), "cudaStreamWaitEvent (comm stream)");
    // Host buffers get a region of the scratch each: sends are copied in before the group,
    // receives copied out after it.
    std::vector<std::size_t> offset(ops.size(), SIZE_MAX);
    std::size_t staged = 0;
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (!on_device(ops[k].buf)) {
        offset[k] = staged;
        staged += aligned(ops[k].count * dtype_size(ops[k].t));
      }
    char* base = staged > 0 ? scratch_of(staged) : nullptr;
    auto device_buf = [&](std::size_t k) { return offset[k] == SIZE_MAX ? ops[k].buf : base + offset[k]; };
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (ops[k].is_send && offset[k] != SIZE_MAX)
        cuda(cudaMemcpyAsync(device_buf(k), ops[k].buf, ops[k].count * dtype_size(ops[k].t), cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync (stage in)");
    check(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t first = ncclSuccess;
    const char* failed = nullptr;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const P2p& op = ops[k];
      const ncclResult_t r = op.is_send ? ncclSend(device_buf(k), op.count, nccl_type(op.t), op.peer, nccl, stream)
                                        : ncclRecv(device_buf(k), op.count, nccl_type(op.t), op.peer, nccl, stream);
      if (r != ncclSuccess && first == ncclSuccess) {
        first = r;
        failed = op.is_send ? "ncclSend" : "ncclRecv";
      }
    }
    const ncclResult_t end = ncclGroupEnd();  // closes the group even after a failed call
    if (first != ncclSuccess) check(first, failed);
    check(end, "ncclGroupEnd");
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (!ops[k].is_send && offset[k] != SIZE_MAX)
        cuda(cudaMemcpyAsync(ops[k].buf, device_buf(k), ops[k].count * dtype_size(ops[k].t), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (stage out)");
    cuda(cudaEventCreateWithFlags(&batch->done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    cuda(cudaEventRecord(batch->done, stream), "cudaEventRecord (comm stream)");
    if (staged > 0) synchronize();  // the staged copies out must land before the host reads them
  }
};

namespace {

class NcclRequest final : public RequestImpl {
 public:
  NcclRequest(std::shared_ptr<NcclCommunicator::Impl> comm, std::shared_ptr<Batch> batch)
      : comm_(std::move(comm)), batch_(std::move(batch)) {}

  // A host wait: cudaEventSynchronize.
  void wait() override {
    if (!start()) return;
    DeviceGuard guard(comm_->device, comm_->axis);
    comm_->cuda(cudaEventSynchronize(batch_->done), "cudaEventSynchronize (wait)");
  }
  bool test() override {
    if (!start()) return true;
    DeviceGuard guard(comm_->device, comm_->axis);
    const cudaError_t e = cudaEventQuery(batch_->done);
    if (e == cudaErrorNotReady) return false;
    comm_->cuda(e, "cudaEventQuery (test)");
    return true;
  }
  bool stream_wait(void* stream) override {
    if (!start()) return true;
    DeviceGuard guard(comm_->device, comm_->axis);
    comm_->cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), batch_->done, 0), "cudaStreamWaitEvent (stream_wait)");
    return true;
  }

 private:
  /// Starts a deferred batch; false when there is nothing to wait for (its start failed).
  bool start() {
    if (!batch_->started) comm_->flush();
    return batch_->done != nullptr;
  }
  std::shared_ptr<NcclCommunicator::Impl> comm_;
  std::shared_ptr<Batch> batch_;
};

}  // namespace

Request NcclCommunicator::Impl::request(std::shared_ptr<Batch> b) {
  return Request(std::make_unique<NcclRequest>(shared_from_this(), std::move(b)));
}

// ---- NcclCommunicator ---------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(const Communicator& mpi_comm, std::string axis, void* compute_stream)
    : NcclCommunicator(std::make_shared<Impl>(native_mpi_comm(mpi_comm), axis, static_cast<cudaStream_t>(compute_stream), -1),
                       axis) {}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Impl> impl, std::string axis)
    : Communicator(std::move(axis)), impl_(std::move(impl)), rank_(impl_->rank), size_(impl_->size) {}

NcclCommunicator::~NcclCommunicator() {
  try {
    impl_->flush();  // a peer may wait for a deferred isend even if no Request is left
  } catch (...) {  // destructors do not throw; the communicator is going away
  }
}

void NcclCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) {
  const BlockingTime timed(*this);
  impl_->all_reduce(send, recv, count, t, op, /*blocking=*/true);
  record(CommOp::all_reduce, count, t);
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) {
  const BlockingTime timed(*this);
  impl_->reduce_scatter(send, recv, recv_count, t, op, /*blocking=*/true);
  record(CommOp::reduce_scatter, recv_count, t);
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t send_count, DataType t) {
  const BlockingTime timed(*this);
  impl_->all_gather(send, recv, send_count, t, /*blocking=*/true);
  record(CommOp::all_gather, send_count, t);
}

void NcclCommunicator::broadcast(void* buf, std::size_t count, DataType t, int root) {
  const BlockingTime timed(*this);
  impl_->broadcast(buf, count, t, root);
  record(CommOp::broadcast, count, t, root);
}

void NcclCommunicator::send(const void* buf, std::size_t count, DataType t, int dest, int /*tag*/) {
  const BlockingTime timed(*this);
  impl_->p2p(P2p{true, const_cast<void*>(buf), count, t, dest}, /*blocking=*/true);
  record(CommOp::send, count, t);
}

void NcclCommunicator::recv(void* buf, std::size_t count, DataType t, int source, int /*tag*/) {
  const BlockingTime timed(*this);
  impl_->p2p(P2p{false, buf, count, t, source}, /*blocking=*/true);
  record(CommOp::recv, count, t);
}

void NcclCommunicator::barrier() {
  const BlockingTime timed(*this);
  {
    DeviceGuard guard(impl_->device, impl_->axis);
    impl_->flush();
    impl_->synchronize();
  }
  MPI_Barrier(impl_->mpi);
  record(CommOp::barrier, 0, DataType::u8);
}

Request NcclCommunicator::iall_reduce(const void* send, void* recv, std::size_t count, DataType t, ReduceOp op) {
  Request r = impl_->all_reduce(send, recv, count, t, op, /*blocking=*/false);
  record(CommOp::all_reduce, count, t);
  return track(std::move(r));
}

Request NcclCommunicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType t, ReduceOp op) {
  Request r = impl_->reduce_scatter(send, recv, recv_count, t, op, /*blocking=*/false);
  record(CommOp::reduce_scatter, recv_count, t);
  return track(std::move(r));
}

Request NcclCommunicator::iall_gather(const void* send, void* recv, std::size_t send_count, DataType t) {
  Request r = impl_->all_gather(send, recv, send_count, t, /*blocking=*/false);
  record(CommOp::all_gather, send_count, t);
  return track(std::move(r));
}

Request NcclCommunicator::isend(const void* buf, std::size_t count, DataType t, int dest, int /*tag*/) {
  Request r = impl_->p2p(P2p{true, const_cast<void*>(buf), count, t, dest}, /*blocking=*/false);
  record(CommOp::send, count, t);
  return track(std::move(r));
}

Request NcclCommunicator::irecv(void* buf, std::size_t count, DataType t, int source, int /*tag*/) {
  Request r = impl_->p2p(P2p{false, buf, count, t, source}, /*blocking=*/false);
  record(CommOp::recv, count, t);
  return track(std::move(r));
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& axis) const {
  impl_->flush();
  MPI_Comm out = MPI_COMM_NULL;
  MPI_Comm_split(impl_->mpi, color, key, &out);
  std::shared_ptr<Impl> impl;
  try {
    impl = std::make_shared<Impl>(out, axis, impl_->compute, impl_->device);  // keeps a duplicate of `out`
  } catch (...) {
    MPI_Comm_free(&out);
    throw;
  }
  MPI_Comm_free(&out);
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(impl), axis));
}

void NcclCommunicator::set_compute_stream(void* stream) { impl_->compute = static_cast<cudaStream_t>(stream); }
void* NcclCommunicator::compute_stream() const { return impl_->compute; }
void* NcclCommunicator::comm_stream() const { return impl_->stream; }
int NcclCommunicator::device() const { return impl_->device; }

// ---- availability and factory ---------------------------------------------------------------------

NcclSupport nccl_support() {
  NcclSupport s;
  s.built = true;
  (void)ncclGetVersion(&s.nccl_version);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    s.reason = no_device(e);
    return s;
  }
  s.device_count = n;
  if (n == 0) s.reason = "no CUDA device visible to this process (cudaGetDeviceCount = 0)";
  return s;
}

bool nccl_available() { return nccl_support().usable(); }

int select_node_local_device(const Communicator& mpi_comm) {
  MPI_Comm comm = native_mpi_comm(mpi_comm);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  const NcclSupport s = nccl_support();
  const int fits = s.usable() && local_size <= s.device_count ? 1 : 0;
  int all_fit = 0;
  MPI_Allreduce(&fits, &all_fit, 1, MPI_INT, MPI_MIN, comm);
  if (all_fit == 0) {
    const std::string here = s.usable() ? std::to_string(local_size) + " ranks share " + std::to_string(s.device_count) +
                                              " CUDA device(s) on this node"
                                        : s.reason;
    throw Error("select_node_local_device: a node has more ranks than CUDA devices (here: " + here +
                    "); run one rank per GPU or use [parallel] comm_backend = mpi",
                /*collective=*/true);
  }
  check_cuda(cudaSetDevice(local_rank), "cudaSetDevice", mpi_comm.axis());
  return local_rank;
}

std::unique_ptr<Communicator> make_nccl_communicator(const Communicator& mpi_comm, const std::string& axis,
                                                     void* compute_stream) {
  return std::make_unique<NcclCommunicator>(mpi_comm, axis, compute_stream);
}

}  // namespace trident
