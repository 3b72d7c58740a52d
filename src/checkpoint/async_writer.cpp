#include "checkpoint/async_writer.hpp"

#include "core/error.hpp"
#include "core/timer.hpp"
#include "io/checkpoint_file.hpp"

#include <algorithm>
#include <functional>

namespace trident {

AsyncCheckpointWriter::AsyncCheckpointWriter(const Communicator& world)
    : comm_(world.split(0, world.rank(), "checkpoint")) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void AsyncCheckpointWriter::start(const CheckpointDir& dir, std::int64_t step, CheckpointSnapshot snap,
                                  std::int64_t keep) {
  if (thread_.joinable()) throw Error("AsyncCheckpointWriter::start: a save is still in flight (call wait())");
  if (snap.live) throw Error("AsyncCheckpointWriter::start: a live view cannot be written while training goes on");
  snap_ = std::move(snap);
  error_ = nullptr;
  abandon_ = false;
  result_ = Result{};
  result_.step = step;
  result_.bytes = snap_.bytes();
  // The file writer gets the shard in blocks, each after a look at the abandon flag.
  CheckpointWrite& w = snap_.write;
  const std::int64_t block = std::max<std::int64_t>(1, kBlockBytes / static_cast<std::int64_t>(dtype_size(w.dtype)));
  std::function<std::int64_t(std::size_t, std::int64_t, std::int64_t, const void**)> inner = std::move(w.read_block);
  arrays_ = std::move(w.arrays);
  w.arrays.clear();
  if (!inner) {
    const std::size_t esize = dtype_size(w.dtype);
    inner = [this, block, esize](std::size_t k, std::int64_t first, std::int64_t max_count, const void** data) {
      *data = static_cast<const char*>(arrays_[k]) + static_cast<std::size_t>(first) * esize;
      return std::min(max_count, block);
    };
  }
  w.read_block = [this, block, inner](std::size_t k, std::int64_t first, std::int64_t max_count, const void** data) {
    if (abandon_) throw CheckpointError("abandoned: a stop was requested");
    return inner(k, first, std::min(max_count, block), data);
  };
  thread_ = std::thread([this, dir, step, keep] {
    try {
      Timer t;
      result_.path = dir.commit(step, *comm_, [this](const std::string& tmp) { write_checkpoint_file(tmp, *comm_, snap_.write); },
                                keep);
      result_.seconds = t.seconds();
      result_.done = true;
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

AsyncCheckpointWriter::Result AsyncCheckpointWriter::wait() {
  if (!thread_.joinable()) return Result{};
  thread_.join();
  if (error_ && abandon_) {
    // Every rank asked for it before waiting, so every rank classifies the failure alike.
    result_.abandoned = true;
    return result_;
  }
  if (error_) std::rethrow_exception(error_);
  return result_;
}

CheckpointSnapshot AsyncCheckpointWriter::release() {
  CheckpointSnapshot s = std::move(snap_);
  snap_ = CheckpointSnapshot{};
  s.write.read_block = nullptr;  // it refers to this writer
  s.write.arrays = std::move(arrays_);
  arrays_.clear();
  return s;
}

}  // namespace trident
