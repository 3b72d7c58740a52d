#include "checkpoint/async_writer.hpp"

#include "core/error.hpp"
#include "core/timer.hpp"
#include "io/checkpoint_file.hpp"

namespace trident {

AsyncCheckpointWriter::AsyncCheckpointWriter(const Communicator& world)
    : comm_(world.split(0, world.rank(), "checkpoint")) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void AsyncCheckpointWriter::start(const CheckpointDir& dir, std::int64_t step, CheckpointSnapshot snap,
                                  std::int64_t keep) {
  if (thread_.joinable()) throw Error("AsyncCheckpointWriter::start: a save is still in flight (call wait())");
  snap_ = std::move(snap);
  error_ = nullptr;
  result_ = Result{};
  result_.step = step;
  result_.bytes = snap_.bytes();
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
  if (error_) std::rethrow_exception(error_);
  return result_;
}

CheckpointSnapshot AsyncCheckpointWriter::release() {
  CheckpointSnapshot s = std::move(snap_);
  snap_ = CheckpointSnapshot{};
  return s;
}

}  // namespace trident
