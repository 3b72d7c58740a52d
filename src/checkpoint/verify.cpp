#include "checkpoint/verify.hpp"

#include "checkpoint/commit.hpp"
#include "checkpoint/internal.hpp"
#include "checkpoint/metadata.hpp"
#include "core/error.hpp"
#include "data/tokenizer.hpp"
#include "parallel/agree.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace fs = std::filesystem;

namespace trident {

namespace ckpt_detail {

std::int64_t tp_size_of(const CheckpointReader& rd) {
  const CheckpointMeta meta = CheckpointMeta::read(rd);
  if (meta.has("tp")) return std::max<std::int64_t>(1, meta.tp);
  std::int64_t tp = 1;
  for (const CkptShard& s : rd.shards()) tp = std::max<std::int64_t>(tp, s.tp + 1);
  return tp;
}

std::string resolve_agreed(const std::string& path, Communicator& comm) {
  std::string file;
  run_agreed(comm, "", [&] {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw CheckpointError("'" + path + "' does not exist");
    file = resolve_checkpoint_path(path);
  });
  return file;
}

}  // namespace ckpt_detail

using namespace ckpt_detail;

std::string resolve_checkpoint_path(const std::string& path) {
  std::error_code ec;
  if (fs::path(path).filename() == "latest" && fs::is_regular_file(path, ec) && fs::file_size(path, ec) < 4096 && !ec) {
    // A checkpoint directory's `latest` pointer (one line naming a step_*.h5 beside it), not an
    // HDF5 file: the checkpoint it names, as for its directory -- the directory it really lies in
    // (a link run/latest -> checkpoints/latest names the run's checkpoints), else the one named.
    for (const fs::path& p : {fs::canonical(path, ec), fs::path(path)}) {
      if (p.empty()) continue;
      const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
      for (const fs::path& d : {parent, parent / "checkpoints"})
        if (const auto latest = CheckpointDir(d.string()).latest()) return *latest;
    }
    throw CheckpointError("'" + path + "' is a `latest` pointer, but no checkpoint is beside it");
  }
  if (!fs::is_directory(path, ec)) return path;
  for (const fs::path& d : {fs::path(path) / "checkpoints", fs::path(path)}) {
    auto latest = CheckpointDir(d.string()).latest();
    if (latest) return *latest;
  }
  throw CheckpointError("no checkpoint found in directory '" + path + "'");
}

void require_intact(const CheckpointReader& rd, Communicator& comm, const std::string& hint, const ModelSchema& schema) {
  run_agreed(comm, "", [&] {
    const std::vector<std::string> problems = checkpoint_problems(rd, comm, schema);  // what `ckpt verify` checks
    if (problems.empty()) return;
    std::string more;
    if (problems.size() > 1) more = "; " + std::to_string(problems.size() - 1) + " more problem(s)";
    throw CheckpointError("checkpoint '" + rd.path() + "' is damaged: " + problems.front() + more +
                          (hint.empty() ? "" : " (" + hint + ")"));
  });
}

std::vector<std::string> check_checkpoint_index(const CheckpointReader& rd) {
  Problems p;
  const auto& tensors = rd.tensors();
  const auto& shards = rd.shards();
  const auto& segments = rd.segments();
  const std::int64_t tp = tp_size_of(rd);
  const CheckpointMeta meta = CheckpointMeta::read(rd);
  const std::int64_t dp = meta.has("dp") ? meta.dp : 0;
  const std::int64_t pp = meta.has("pp") ? meta.pp : 0;

  if (tensors.empty()) p.add("/index/tensors is empty");
  std::set<std::string> names;
  for (const CkptTensor& t : tensors) {
    if (!names.insert(t.name).second) p.add("tensor '" + t.name + "' appears twice in /index/tensors");
    for (auto d : t.shape)
      if (d <= 0) p.add("tensor '" + t.name + "' has the impossible shape " + shape_str(t.shape));
    if (t.split_dim >= static_cast<int>(t.shape.size()))
      p.add("tensor '" + t.name + "' has split_dim " + std::to_string(t.split_dim) + " but only " +
            std::to_string(t.shape.size()) + " dimensions");
    else if (t.split_dim >= 0 && t.split_groups > 0 && (t.split_groups > 1 || t.split_dim > 0) &&
             t.shape[t.split_dim] % (tp * t.split_groups) != 0)
      p.add("tensor '" + t.name + "' dimension " + std::to_string(t.split_dim) + " (" +
            std::to_string(t.shape[t.split_dim]) + ") does not split into tp = " + std::to_string(tp) + " x " +
            std::to_string(t.split_groups) + " groups");
  }

  std::set<std::string> shard_names;
  for (size_t s = 0; s < shards.size(); ++s) {
    const CkptShard& sh = shards[s];
    if (!shard_names.insert(sh.name()).second) p.add("shard " + sh.name() + " appears twice in /index/shards");
    if (sh.length < 0) p.add("shard " + sh.name() + " has a negative length");
    if (sh.tp < 0 || sh.tp >= tp || sh.dp < 0 || (dp > 0 && sh.dp >= dp) || sh.pp < 0 || (pp > 0 && sh.pp >= pp))
      p.add("shard " + sh.name() + " lies outside the layout dp x tp x pp = " + std::to_string(dp) + " x " +
            std::to_string(tp) + " x " + std::to_string(pp));
  }

  // (tensor, tp partition) -> (tensor_offset, count); shard -> (shard_offset, count)
  std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> by_partition;
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> by_shard(shards.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    const CkptSegment& g = segments[i];
    const std::string row = "/index/segments row " + std::to_string(i);
    if (g.tensor < 0 || g.tensor >= static_cast<int>(tensors.size()) || g.shard < 0 ||
        g.shard >= static_cast<int>(shards.size())) {
      p.add(row + " names a tensor or shard that does not exist");
      continue;
    }
    const CkptTensor& t = tensors[g.tensor];
    const CkptShard& sh = shards[g.shard];
    if (g.tp_rank < 0 || g.tp_rank >= partitions_of(t, tp)) {
      p.add(row + " names tp partition " + std::to_string(g.tp_rank) + " of tensor '" + t.name + "', which has " +
            std::to_string(partitions_of(t, tp)) + (partitions_of(t, tp) == 1 ? " partition" : " partitions"));
      continue;
    }
    if (g.count < 0 || g.shard_offset < 0 || g.shard_offset + g.count > sh.length) {
      p.add(row + " (tensor '" + t.name + "') points past the end of shard " + sh.name() + " (" +
            std::to_string(sh.length) + " elements)");
      continue;
    }
    if (g.tensor_offset < 0 || g.tensor_offset + g.count > partition_numel(t, tp, g.tp_rank)) {
      p.add(row + " points past the end of tensor '" + t.name + "' (" + std::to_string(partition_numel(t, tp, g.tp_rank)) +
            " elements per partition)");
      continue;
    }
    by_partition[{g.tensor, g.tp_rank}].emplace_back(g.tensor_offset, g.count);
    by_shard[static_cast<size_t>(g.shard)].emplace_back(g.shard_offset, g.count);
  }

  // Every tp partition of every tensor covered exactly once.
  for (size_t i = 0; i < tensors.size(); ++i) {
    const CkptTensor& t = tensors[i];
    for (int r = 0; r < partitions_of(t, tp); ++r) {
      const std::string what = "tensor '" + t.name + "'" + (partitions_of(t, tp) > 1 ? " (tp partition " + std::to_string(r) + ")" : "");
      auto it = by_partition.find({static_cast<int>(i), r});
      const std::int64_t n = partition_numel(t, tp, r);
      if (it == by_partition.end()) {
        p.add(what + " has no segment in the index");
        continue;
      }
      auto segs = it->second;
      std::sort(segs.begin(), segs.end());
      std::int64_t pos = 0;
      for (const auto& [off, count] : segs) {
        if (off > pos) p.add(what + ": elements [" + std::to_string(pos) + ", " + std::to_string(off) + ") are not indexed");
        if (off < pos)
          p.add(what + ": elements [" + std::to_string(off) + ", " + std::to_string(std::min(pos, off + count)) +
                ") are indexed twice");
        pos = std::max(pos, off + count);
      }
      if (pos < n) p.add(what + ": elements [" + std::to_string(pos) + ", " + std::to_string(n) + ") are not indexed");
    }
  }
  // No two segments share shard elements; no shard data that nothing points to.
  for (size_t s = 0; s < shards.size(); ++s) {
    auto segs = by_shard[s];
    std::sort(segs.begin(), segs.end());
    std::int64_t pos = 0, covered = 0;
    for (const auto& [off, count] : segs) {
      if (off < pos)
        p.add("shard " + shards[s].name() + ": elements [" + std::to_string(off) + ", " +
              std::to_string(std::min(pos, off + count)) + ") belong to two segments");
      covered += std::max<std::int64_t>(0, off + count - std::max(pos, off));
      pos = std::max(pos, off + count);
    }
    if (covered < shards[s].length)
      p.add("shard " + shards[s].name() + " holds " + std::to_string(shards[s].length) + " elements but the index points to " +
            std::to_string(covered) + " of them");
  }
  return p.take();
}

std::vector<std::string> check_checkpoint_datasets(const CheckpointReader& rd, Communicator& comm) {
  Problems p;
  const auto& shards = rd.shards();
  const auto& segments = rd.segments();
  // The segment reaching furthest into each shard: reading its last element proves the dataset
  // exists and is at least as long as anything the index points to.
  std::vector<int> last(shards.size(), -1);
  for (size_t i = 0; i < segments.size(); ++i) {
    const CkptSegment& g = segments[i];
    if (g.shard < 0 || g.shard >= static_cast<int>(shards.size()) || g.count <= 0) continue;
    int& l = last[static_cast<size_t>(g.shard)];
    if (l < 0 || g.shard_offset + g.count > segments[l].shard_offset + segments[l].count) l = static_cast<int>(i);
  }
  for (size_t s = static_cast<size_t>(comm.rank()); s < shards.size(); s += static_cast<size_t>(comm.size())) {
    if (last[s] < 0) continue;  // nothing indexed in it (an index problem if it has elements)
    const CkptSegment& g = segments[static_cast<size_t>(last[s])];
    for (const std::string& kind : rd.kinds()) {
      try {
        double v = 0;
        rd.read(kind, g.tensor, g.tp_rank, g.tensor_offset + g.count - 1, 1, DataType::f64, &v);
      } catch (const std::exception& e) {
        p.add("/shards/" + kind + "/" + shards[s].name() + " is missing or shorter than its " +
              std::to_string(shards[s].length) + " elements: " + e.what());
      }
    }
  }
  return gather_strings(comm, p.take());
}

std::vector<std::string> check_checkpoint_metadata(const CheckpointReader& rd, const ModelSchema& schema) {
  Problems p;
  try {
    p.add_all(CheckpointMeta::problems(rd));
    const CheckpointMeta meta = CheckpointMeta::read(rd);
    // The model fingerprint must reproduce the index: names, shapes and tp splits.
    const bool have_model = meta.has_model();
    const ModelConfig& m = meta.model;
    if (have_model) {
      if (m.n_layer <= 0 || m.n_head <= 0 || m.n_embd <= 0 || m.block_size <= 0 || m.vocab_size <= 0 ||
          m.n_embd % m.n_head != 0) {
        p.add("the model fingerprint (n_layer " + std::to_string(m.n_layer) + ", n_head " + std::to_string(m.n_head) +
              ", n_embd " + std::to_string(m.n_embd) + ", block_size " + std::to_string(m.block_size) + ", vocab_size " +
              std::to_string(m.vocab_size) + ") is not a valid model");
      } else {
        const std::vector<CkptTensor> model = schema.tensors(m);
        for (const CkptTensor& t : model) {
          const int k = rd.find_tensor(t.name);
          if (k < 0) {
            p.add("tensor '" + t.name + "' of the model fingerprint is not in /index/tensors");
            continue;
          }
          const CkptTensor& c = rd.tensors()[k];
          if (c.shape != t.shape)
            p.add("tensor '" + t.name + "' has shape " + shape_str(c.shape) + " in the index but " + shape_str(t.shape) +
                  " in the model fingerprint");
          if (c.split_dim != t.split_dim || c.split_groups != t.split_groups)
            p.add("tensor '" + t.name + "' has tp split (dim " + std::to_string(c.split_dim) + ", groups " +
                  std::to_string(c.split_groups) + ") in the index, the model has (dim " + std::to_string(t.split_dim) +
                  ", groups " + std::to_string(t.split_groups) + ")");
        }
        for (const CkptTensor& c : rd.tensors())
          if (std::none_of(model.begin(), model.end(), [&](const CkptTensor& t) { return t.name == c.name; }))
            p.add("tensor '" + c.name + "' in the index is not part of the model fingerprint");
      }
    }

    // The stored deck must parse and describe the same model and layout.
    p.add_all(CheckpointMeta::deck_problems(rd));

    // Tokenizer: kinds that store their vocabulary (char, byte) must store a valid one that fits
    // the model's; kinds that store a model (bpe) one that loads and whose tokens fit the model's.
    if (meta.has("tokenizer")) {
      const std::string tok = meta.run.tokenizer;
      const std::optional<TokenizerKind> kind = parse_tokenizer_kind(tok);
      if (!kind) {
        p.add("attribute tokenizer = '" + tok + "' is not " + tokenizer_kind_names());
      } else if (tokenizer_info(*kind).stores_model) {
        if (!meta.model_error.empty()) {
          p.add("the " + tok + " tokenizer's model cannot be read: " + meta.model_error);
        } else {
          try {
            // Without a fingerprint only loading is checked: no vocab_size bounds the tokens.
            Tokenizer check(*kind, {}, have_model ? m.vocab_size : std::numeric_limits<std::int32_t>::max(),
                            meta.run.tokenizer_model);
          } catch (const Error& e) {
            p.add(std::string("/tokenizer/model: ") + e.what());
          }
        }
      } else if (tokenizer_info(*kind).stores_vocab) {
        try {
          if (!meta.vocab_error.empty()) throw CheckpointError(meta.vocab_error);
          const auto& vocab = meta.run.vocab;
          if (vocab.empty()) p.add("/tokenizer/vocab is empty");
          try {
            Tokenizer check(*kind, std::vector<std::int32_t>(vocab.begin(), vocab.end()),
                            static_cast<std::int64_t>(vocab.size()));
          } catch (const Error& e) {
            p.add(std::string("/tokenizer/vocab: ") + e.what());
          }
          if (have_model && static_cast<std::int64_t>(vocab.size()) > m.vocab_size)
            p.add("/tokenizer/vocab has " + std::to_string(vocab.size()) + " tokens, more than model_vocab_size = " +
                  std::to_string(m.vocab_size));
        } catch (const std::exception& e) {
          p.add(std::string("the ") + tok + " tokenizer's vocabulary cannot be read: " + e.what());
        }
      }
    }
  } catch (const std::exception& e) {
    p.add(std::string("metadata check stopped: ") + e.what());
  }
  return p.take();
}

VerifyResult verify_checkpoint(const std::string& path, Communicator& comm, const ModelSchema& schema) {
  VerifyResult res;
  res.file = resolve_agreed(path, comm);
  std::unique_ptr<CheckpointReader> rd;
  try {
    rd = std::make_unique<CheckpointReader>(res.file, comm);  // format and version; agreed
  } catch (const Error& e) {
    res.problems.push_back(e.what());
    return res;
  }
  res.problems = checkpoint_problems(*rd, comm, schema);
  return res;
}

std::vector<std::string> checkpoint_problems(const CheckpointReader& rd, Communicator& comm,
                                             const ModelSchema& schema) {
  std::vector<std::string> problems = check_checkpoint_index(rd);
  const auto meta = check_checkpoint_metadata(rd, schema);
  problems.insert(problems.end(), meta.begin(), meta.end());
  // CheckpointReader::verify checks existence, exact length and checksum of every shard dataset.
  const auto data = rd.verify(comm);
  problems.insert(problems.end(), data.begin(), data.end());
  return problems;
}

}  // namespace trident
