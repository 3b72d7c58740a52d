// checkpoint/internal.hpp: small helpers shared by the checkpoint layer's .cpp files.
//
// Layer: checkpoint, private (included by src/checkpoint/*.cpp only; not part of the layer's
// interface). Problem lists, shape printing and the tp-partition counts of an index.
#pragma once

#include "core/tp_partition.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/communicator.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trident::ckpt_detail {

/// A list of problems that stops growing after kMax entries (a badly broken index would otherwise
/// produce one line per segment) and says how many were left out.
class Problems {
 public:
  static constexpr std::size_t kMax = 50;
  void add(std::string p) {
    if (list_.size() < kMax) list_.push_back(std::move(p));
    else ++dropped_;
  }
  void add_all(const std::vector<std::string>& ps) {
    for (const auto& p : ps) add(p);
  }
  std::vector<std::string> take() {
    if (dropped_ > 0) list_.push_back("... and " + std::to_string(dropped_) + " more problems of this kind");
    dropped_ = 0;
    return std::move(list_);
  }

 private:
  std::vector<std::string> list_;
  std::size_t dropped_ = 0;
};

/// "(3, 4)", "(5,)". Local.
inline std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

inline std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

/// Number of tp partitions tensor `t` is stored as in a file written at tp size `tp`.
inline int partitions_of(const CkptTensor& t, std::int64_t tp) { return t.split_dim >= 0 ? static_cast<int>(tp) : 1; }

/// The real elements of tp partition r of `t` (the vocabulary's last partitions are shorter when
/// V does not divide by tp; core/tp_partition.hpp).
inline std::int64_t partition_numel(const CkptTensor& t, std::int64_t tp, int r) {
  if (t.split_dim < 0) return numel_of(t.shape);
  return tp_partition_numel(t.shape, t.split_dim, t.split_groups, static_cast<int>(tp), r);
}

/// tp size of a checkpoint: its `tp` attribute, else one more than the largest shard tp coordinate.
std::int64_t tp_size_of(const CheckpointReader& rd);

/// resolve_checkpoint_path(), agreed over comm, refusing a path that does not exist. Collective.
std::string resolve_agreed(const std::string& path, Communicator& comm);

}  // namespace trident::ckpt_detail
