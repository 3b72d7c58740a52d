#include "checkpoint/tensor_read.hpp"

#include "core/error.hpp"
#include "core/tp_partition.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace trident {

void read_tp_partition(const CheckpointReader& rd, const std::string& kind, const CkptTensor& t, int tp_size,
                       int tp_rank, std::int64_t begin, std::int64_t count, DataType type, void* out) {
  const int k = rd.find_tensor(t.name);
  if (k < 0) throw CheckpointError("checkpoint '" + rd.path() + "' has no tensor '" + t.name + "'");
  const CkptTensor& src = rd.tensors()[static_cast<size_t>(k)];
  if (src.shape != t.shape)
    throw CheckpointError("tensor '" + t.name + "' has another shape in checkpoint '" + rd.path() + "'");
  if (src.split_dim != t.split_dim || src.split_groups != t.split_groups)
    throw CheckpointError("tensor '" + t.name + "' is split differently in checkpoint '" + rd.path() + "'");
  const std::size_t es = dtype_size(type);
  char* dst = static_cast<char*>(out);
  std::memset(dst, 0, static_cast<std::size_t>(count) * es);  // padding, and what no run covers
  const std::int64_t end = begin + count;
  // The reader's runs restricted to [begin, end), in global order.
  std::vector<Run> want;
  for (const Run& r : tp_runs(t.shape, t.split_dim, t.split_groups, tp_size, tp_rank)) {
    const std::int64_t a = std::max(begin, r.local), b = std::min(end, r.local + r.count);
    if (a < b) want.push_back(Run{a, r.global + (a - r.local), b - a});
  }
  if (want.empty()) return;
  // The writer's tp: every tp rank of the writing grid has a row in /index/shards.
  int writer_tp = 1;
  if (src.split_dim >= 0)
    for (const CkptShard& sh : rd.shards()) writer_tp = std::max(writer_tp, sh.tp + 1);
  std::int64_t covered = 0;
  for (int w = 0; w < writer_tp; ++w) {
    const std::vector<Run> have = tp_runs(src.shape, src.split_dim, src.split_groups, writer_tp, w);
    // Two-pointer merge of two lists of disjoint runs sorted by global offset.
    size_t i = 0, j = 0;
    while (i < want.size() && j < have.size()) {
      const Run& a = want[i];
      const Run& h = have[j];
      const std::int64_t lo = std::max(a.global, h.global), hi = std::min(a.global + a.count, h.global + h.count);
      if (lo < hi) {
        rd.read(kind, k, w, h.local + (lo - h.global), hi - lo, type,
                dst + static_cast<std::size_t>(a.local - begin + (lo - a.global)) * es);
        covered += hi - lo;
      }
      if (a.global + a.count <= h.global + h.count) ++i;
      else ++j;
    }
  }
  std::int64_t needed = 0;
  for (const Run& r : want) needed += r.count;
  if (covered != needed)
    throw CheckpointError("checkpoint '" + rd.path() + "' does not cover all of tensor '" + t.name + "'");
}

}  // namespace trident
