#include "train/checkpoint_tools.hpp"
#include "train/checkpoint_reshard.hpp"

#include "core/config.hpp"
#include "core/error.hpp"
#include "data/tokenizer.hpp"
#include "core/log.hpp"
#include "io/checkpoint_file.hpp"
#include "model/param_layout.hpp"
#include "parallel/agree.hpp"
#include "train/checkpoint_dir.hpp"
#include "train/checkpoint_model.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

namespace fs = std::filesystem;

namespace trident {

namespace {

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

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

/// tp size of a checkpoint: its `tp` attribute, else one more than the largest shard tp coordinate.
std::int64_t tp_size_of(const CheckpointReader& rd) {
  if (rd.has_attr("tp")) return std::max<std::int64_t>(1, rd.attr_int("tp"));
  std::int64_t tp = 1;
  for (const CkptShard& s : rd.shards()) tp = std::max<std::int64_t>(tp, s.tp + 1);
  return tp;
}

/// Number of tp-local pieces tensor `t` is stored as, and the real elements of piece r (the
/// vocabulary's last pieces are shorter when V does not divide by tp; see tp_runs).
int pieces_of(const CkptTensor& t, std::int64_t tp) { return t.split_dim >= 0 ? static_cast<int>(tp) : 1; }
std::int64_t piece_numel(const CkptTensor& t, std::int64_t tp, int r) {
  if (t.split_dim < 0) return numel_of(t.shape);
  std::int64_t n = 0;
  for (const Run& run : tp_runs(t.shape, t.split_dim, t.split_groups, static_cast<int>(tp), r)) n += run.count;
  return n;
}

/// Every rank's strings, concatenated in rank order, on every rank. Collective over comm.
std::vector<std::string> gather_strings(Communicator& comm, const std::vector<std::string>& mine) {
  std::string joined;
  for (std::string s : mine) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    joined += s + '\n';
  }
  std::int64_t n = static_cast<std::int64_t>(joined.size());
  std::vector<std::int64_t> sizes(static_cast<size_t>(comm.size()));
  comm.all_gather(&n, sizes.data(), 1, DataType::i64);
  const std::int64_t width = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::string> out;
  if (width == 0) return out;
  std::vector<char> buf(static_cast<size_t>(width), '\0'), all(static_cast<size_t>(width * comm.size()));
  std::copy(joined.begin(), joined.end(), buf.begin());
  comm.all_gather(buf.data(), all.data(), static_cast<size_t>(width), DataType::u8);
  for (int r = 0; r < comm.size(); ++r) {
    std::stringstream ss(std::string(&all[static_cast<size_t>(r * width)], static_cast<size_t>(sizes[r])));
    std::string line;
    while (std::getline(ss, line)) out.push_back(line);
  }
  return out;
}

/// `s` on every rank = `s` on rank 0. Collective over comm.
void broadcast_string(Communicator& comm, std::string& s) {
  std::int64_t n = static_cast<std::int64_t>(s.size());
  comm.broadcast(&n, 1, 0);
  s.resize(static_cast<size_t>(n));
  if (n > 0) comm.broadcast(s.data(), static_cast<size_t>(n), DataType::u8, 0);
}

/// NNNNNNNN of "step_NNNNNNNN.h5" or "step_NNNNNNNN.h5.tmp", else -1.
std::int64_t step_from_name(const std::string& name) {
  std::string base = name;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".tmp") == 0) base.resize(base.size() - 4);
  return step_of_name(base).value_or(-1);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// resolve_checkpoint_path(), agreed over comm, refusing a path that does not exist.
std::string resolve_agreed(const std::string& path, Communicator& comm) {
  std::string file;
  run_agreed(comm, "", [&] {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw CheckpointError("'" + path + "' does not exist");
    file = resolve_checkpoint_path(path);
  });
  return file;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// checks

std::vector<std::string> check_checkpoint_index(const CheckpointReader& rd) {
  Problems p;
  const auto& tensors = rd.tensors();
  const auto& shards = rd.shards();
  const auto& segments = rd.segments();
  const std::int64_t tp = tp_size_of(rd);
  const std::int64_t dp = rd.has_attr("dp") ? rd.attr_int("dp") : 0;
  const std::int64_t pp = rd.has_attr("pp") ? rd.attr_int("pp") : 0;

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

  // (tensor, tp piece) -> (tensor_offset, count); shard -> (shard_offset, count)
  std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> by_piece;
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
    if (g.tp_rank < 0 || g.tp_rank >= pieces_of(t, tp)) {
      p.add(row + " names tp piece " + std::to_string(g.tp_rank) + " of tensor '" + t.name + "', which has " +
            std::to_string(pieces_of(t, tp)) + (pieces_of(t, tp) == 1 ? " piece" : " pieces"));
      continue;
    }
    if (g.count < 0 || g.shard_offset < 0 || g.shard_offset + g.count > sh.length) {
      p.add(row + " (tensor '" + t.name + "') points past the end of shard " + sh.name() + " (" +
            std::to_string(sh.length) + " elements)");
      continue;
    }
    if (g.tensor_offset < 0 || g.tensor_offset + g.count > piece_numel(t, tp, g.tp_rank)) {
      p.add(row + " points past the end of tensor '" + t.name + "' (" + std::to_string(piece_numel(t, tp, g.tp_rank)) +
            " elements per piece)");
      continue;
    }
    by_piece[{g.tensor, g.tp_rank}].emplace_back(g.tensor_offset, g.count);
    by_shard[static_cast<size_t>(g.shard)].emplace_back(g.shard_offset, g.count);
  }

  // Every tp piece of every tensor covered exactly once.
  for (size_t i = 0; i < tensors.size(); ++i) {
    const CkptTensor& t = tensors[i];
    for (int r = 0; r < pieces_of(t, tp); ++r) {
      const std::string what = "tensor '" + t.name + "'" + (pieces_of(t, tp) > 1 ? " (tp piece " + std::to_string(r) + ")" : "");
      auto it = by_piece.find({static_cast<int>(i), r});
      const std::int64_t n = piece_numel(t, tp, r);
      if (it == by_piece.end()) {
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

std::vector<std::string> check_checkpoint_metadata(const CheckpointReader& rd) {
  Problems p;
  try {
    for (const char* a : {"step", "consumed_samples", "adam_step", "seed", "max_steps", "warmup_steps",
                          "global_batch_size", "dp", "tp", "pp", "world_size", "zero_stage", "model_n_layer",
                          "model_n_head", "model_n_embd", "model_block_size", "model_vocab_size", "model_bias",
                          "created_unix_time", "lr", "min_lr", "beta1", "beta2", "eps", "weight_decay",
                          "model_dropout", "deck_name", "tokenizer", "code_version"})
      if (!rd.has_attr(a)) p.add(std::string("root attribute '") + a + "' is missing");
    if (rd.kinds().empty()) p.add("root attribute 'kinds' names no arrays");
    if (rd.rank_state_columns().empty()) p.add("/rank_state is missing or names no columns");

    auto get = [&](const char* a) { return rd.has_attr(a) ? rd.attr_int(a) : 0; };
    if (const std::string named = step_name_problem(rd); !named.empty()) p.add(named);
    // Every rank writes the same global restart state (docs/checkpoint-format.md, /rank_state).
    {
      const auto& cols = rd.rank_state_columns();
      const std::pair<const char*, const char*> expect[] = {
          {"consumed_samples", "consumed_samples"}, {"data_seed", "seed"}, {"rng_seed", "seed"}, {"rng_step", "step"}};
      for (std::size_t row = 0; row < rd.shards().size() && !cols.empty(); ++row) {
        std::vector<std::int64_t> v;
        try {
          v = rd.rank_state(static_cast<int>(row));
        } catch (const std::exception& e) {
          p.add(std::string("/rank_state cannot be read: ") + e.what());
          break;
        }
        for (const auto& [col, attr] : expect) {
          const auto it = std::find(cols.begin(), cols.end(), col);
          if (it == cols.end() || !rd.has_attr(attr)) continue;
          const std::int64_t have = v[static_cast<std::size_t>(it - cols.begin())];
          if (have != rd.attr_int(attr))
            p.add("/rank_state row " + std::to_string(row) + ": " + col + " = " + std::to_string(have) +
                  " but attribute " + attr + " = " + std::to_string(rd.attr_int(attr)));
        }
      }
    }
    for (const char* a : {"step", "consumed_samples", "adam_step", "seed"})
      if (rd.has_attr(a) && rd.attr_int(a) < 0) p.add(std::string("attribute ") + a + " is negative");
    if (rd.has_attr("step") && rd.has_attr("adam_step") && rd.attr_int("adam_step") > rd.attr_int("step"))
      p.add("adam_step is larger than step");
    const std::int64_t dp = get("dp"), tp = get("tp"), pp = get("pp"), world = get("world_size");
    const std::int64_t n_shards = static_cast<std::int64_t>(rd.shards().size());
    if (rd.has_attr("world_size") && dp * tp * pp != world)
      p.add("layout attributes dp x tp x pp = " + std::to_string(dp) + " x " + std::to_string(tp) + " x " +
            std::to_string(pp) + " do not multiply to world_size = " + std::to_string(world));
    if (rd.has_attr("n_shards") && rd.attr_int("n_shards") != n_shards)
      p.add("attribute n_shards = " + std::to_string(rd.attr_int("n_shards")) + " but /index/shards has " +
            std::to_string(n_shards) + " rows");
    if (rd.has_attr("world_size") && world != n_shards)
      p.add("world_size = " + std::to_string(world) + " ranks wrote the file but /index/shards has " +
            std::to_string(n_shards) + " rows");

    // The model fingerprint must reproduce the index: names, shapes and tp splits.
    bool have_model = true;
    for (const char* a : {"model_n_layer", "model_n_head", "model_n_embd", "model_block_size", "model_vocab_size", "model_bias"})
      have_model = have_model && rd.has_attr(a);
    ModelConfig m;
    if (have_model) {
      m.n_layer = static_cast<int>(rd.attr_int("model_n_layer"));
      m.n_head = static_cast<int>(rd.attr_int("model_n_head"));
      m.n_embd = static_cast<int>(rd.attr_int("model_n_embd"));
      m.block_size = static_cast<int>(rd.attr_int("model_block_size"));
      m.vocab_size = static_cast<int>(rd.attr_int("model_vocab_size"));
      m.bias = rd.attr_int("model_bias") != 0;
      if (m.n_layer <= 0 || m.n_head <= 0 || m.n_embd <= 0 || m.block_size <= 0 || m.vocab_size <= 0 ||
          m.n_embd % m.n_head != 0) {
        p.add("the model fingerprint (n_layer " + std::to_string(m.n_layer) + ", n_head " + std::to_string(m.n_head) +
              ", n_embd " + std::to_string(m.n_embd) + ", block_size " + std::to_string(m.block_size) + ", vocab_size " +
              std::to_string(m.vocab_size) + ") is not a valid model");
      } else {
        const ParamLayout layout = ParamLayout::gpt(m);
        for (const TensorSpec& t : layout.tensors()) {
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
          if (layout.find(c.name) < 0) p.add("tensor '" + c.name + "' in the index is not part of the model fingerprint");
      }
    }

    // The stored deck must parse and describe the same model and layout.
    std::optional<std::string> text;
    try {
      text = rd.text("config");
    } catch (const std::exception& e) {
      p.add(std::string("/config cannot be read: ") + e.what());
    }
    if (text) {
      try {
        const Config cfg = parse_deck_text(*text, rd.has_attr("deck_name") ? rd.attr_string("deck_name") : "checkpoint");
        auto compare = [&](const char* key, std::int64_t deck, const char* attr) {
          if (rd.has_attr(attr) && deck != rd.attr_int(attr))
            p.add(std::string("/config says ") + key + " = " + std::to_string(deck) + " but attribute " + attr + " = " +
                  std::to_string(rd.attr_int(attr)));
        };
        compare("[model] n_layer", cfg.model.n_layer, "model_n_layer");
        compare("[model] n_head", cfg.model.n_head, "model_n_head");
        compare("[model] n_embd", cfg.model.n_embd, "model_n_embd");
        compare("[model] block_size", cfg.model.block_size, "model_block_size");
        compare("[model] bias", cfg.model.bias ? 1 : 0, "model_bias");
        if (cfg.model.vocab_size != 0) compare("[model] vocab_size", cfg.model.vocab_size, "model_vocab_size");
        if (cfg.parallel.dp != 0) compare("[parallel] dp", cfg.parallel.dp, "dp");
        compare("[parallel] tp", cfg.parallel.tp, "tp");
        compare("[parallel] pp", cfg.parallel.pp, "pp");
      } catch (const ConfigError& e) {
        p.add(std::string("/config does not parse as an input deck: ") + e.what());
      }
    }

    // Tokenizer: char and byte store their vocabulary, which must fit the model's.
    if (rd.has_attr("tokenizer")) {
      const std::string tok = rd.attr_string("tokenizer");
      if (tok != "char" && tok != "byte" && tok != "gpt2") {
        p.add("attribute tokenizer = '" + tok + "' is not char, byte or gpt2");
      } else if (tok != "gpt2") {
        try {
          const auto vocab = rd.int_array("tokenizer/vocab");
          if (vocab.empty()) p.add("/tokenizer/vocab is empty");
          try {
            Tokenizer check(tok, std::vector<std::int32_t>(vocab.begin(), vocab.end()),
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

// ------------------------------------------------------------------------------------------------
// ls

std::string CheckpointSummary::status() const {
  if (!committed) return "incomplete (uncommitted)";
  if (problems.empty()) return "ok";
  return "BAD: " + problems.front();
}

bool CheckpointListing::ok() const {
  for (const auto& e : entries)
    if (e.committed && !e.problems.empty()) return false;
  return true;
}

CheckpointListing list_checkpoints(const std::string& path, Communicator& comm, bool checksums) {
  // Rank 0 scans, everyone gets the same names: ranks seeing different directory states (a
  // slow shared file system) must not open different files collectively.
  CheckpointListing out;
  std::string scan;
  run_agreed(comm, "", [&] {
    if (comm.rank() != 0) return;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw CheckpointError("'" + path + "' does not exist");
    std::vector<std::string> names;
    std::string dir;
    if (!fs::is_directory(path, ec)) {
      dir = fs::path(path).parent_path().string();
      names.push_back(fs::path(path).filename().string());
    } else {
      dir = fs::is_directory(fs::path(path) / "checkpoints", ec) ? (fs::path(path) / "checkpoints").string() : path;
      // Committed files exactly as a resume sees them, then the leftovers it ignores.
      for (const auto& [step, file] : CheckpointDir(dir).list()) names.push_back(fs::path(file).filename().string());
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (ends_with(n, ".tmp") && step_from_name(n) >= 0 && e.is_regular_file(ec)) names.push_back(n);
      }
      if (ec) throw CheckpointError("cannot list directory '" + dir + "': " + ec.message());
    }
    if (dir.empty()) dir = ".";
    std::string latest;
    std::ifstream in(fs::path(dir) / "latest");
    if (in) std::getline(in, latest);
    scan = dir + "\n" + latest + "\n";
    for (const auto& n : names) scan += n + "\n";
  });
  broadcast_string(comm, scan);
  std::stringstream ss(scan);
  std::getline(ss, out.dir);
  std::getline(ss, out.latest_name);
  std::string name;
  while (std::getline(ss, name)) {
    CheckpointSummary e;
    e.file_name = name;
    e.path = (fs::path(out.dir) / name).string();
    e.step = step_from_name(name);
    e.committed = !ends_with(name, ".tmp");
    e.latest = e.committed && !out.latest_name.empty() && name == out.latest_name;
    std::error_code ec;
    const auto size = fs::file_size(e.path, ec);
    e.size_bytes = ec ? 0 : static_cast<std::int64_t>(size);
    out.entries.push_back(std::move(e));
  }
  std::sort(out.entries.begin(), out.entries.end(), [](const CheckpointSummary& a, const CheckpointSummary& b) {
    return std::make_tuple(a.step, !a.committed, a.file_name) < std::make_tuple(b.step, !b.committed, b.file_name);
  });

  for (CheckpointSummary& e : out.entries) {
    if (!e.committed) continue;  // a *.tmp file is never read (docs/checkpoint-format.md)
    try {
      CheckpointReader rd(e.path, comm);  // agreed: throws on every rank or none
      run_agreed(comm, "", [&] {
        e.opened = true;
        auto get = [&](const char* a) { return rd.has_attr(a) ? rd.attr_int(a) : -1; };
        e.dp = get("dp");
        e.tp = get("tp");
        e.pp = get("pp");
        e.zero_stage = get("zero_stage");
        e.created_unix_time = get("created_unix_time");
        e.dtype = rd.dtype() == DataType::f64 ? "float64" : "float32";
        if (e.step < 0) e.step = get("step");
        if (const std::string named = step_name_problem(rd); !named.empty()) e.problems.push_back(named);
        const auto index = check_checkpoint_index(rd);
        e.problems.insert(e.problems.end(), index.begin(), index.end());
      });
      const auto data = checksums ? rd.verify(comm) : check_checkpoint_datasets(rd, comm);
      e.problems.insert(e.problems.end(), data.begin(), data.end());
    } catch (const Error& err) {
      e.problems.push_back(err.what());
    }
  }
  // What an auto-resume takes: the newest committed checkpoint without problems (with --verify,
  // checksums included; without, a resume may still find a checksum failure and go further back).
  std::string usable;
  for (auto it = out.entries.rbegin(); it != out.entries.rend(); ++it)
    if (it->committed && it->problems.empty()) {
      usable = it->file_name;
      break;
    }
  const std::string would = "a resume would use " + (usable.empty() ? std::string("none, starting at step 0") : usable);
  std::error_code dir_ec;
  if (!fs::is_directory(path, dir_ec)) return out;  // one file listed: the directory is not judged
  if (!out.latest_name.empty()) {
    const bool found = std::any_of(out.entries.begin(), out.entries.end(), [](const auto& e) { return e.latest; });
    std::error_code ec;
    if (!found && !fs::is_regular_file(fs::path(out.dir) / out.latest_name, ec))
      out.latest_note = "'latest' names " + out.latest_name + ", which does not exist (" + would + ")";
    else if (usable != out.latest_name)
      out.latest_note = "'latest' names " + out.latest_name + ", but " + would;
  } else if (!out.entries.empty() && fs::is_directory(path)) {
    out.latest_note = "there is no 'latest' pointer (" + would + ")";
  }
  return out;
}

std::string format_listing(const CheckpointListing& l) {
  std::string s = "checkpoints in " + l.dir;
  s += l.latest_name.empty() ? "\n" : " (latest: " + l.latest_name + ")\n";
  if (l.entries.empty()) return s + "  (none)\n";
  s += log::format("%10s  %-24s %8s  %-27s %-8s %-19s  %s\n", "step", "file", "MiB", "layout dp x tp x pp, zero",
                   "dtype", "created", "status");
  for (const CheckpointSummary& e : l.entries) {
    std::string layout = "-", created = "-";
    if (e.opened) {
      layout = log::format("%lld x %lld x %lld, zero %lld", static_cast<long long>(e.dp), static_cast<long long>(e.tp),
                           static_cast<long long>(e.pp), static_cast<long long>(e.zero_stage));
      const std::time_t t = static_cast<std::time_t>(e.created_unix_time);
      std::tm tm{};
      char buf[32] = "-";
      if (e.created_unix_time > 0 && localtime_r(&t, &tm) != nullptr) std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
      created = buf;
    }
    s += log::format("%10s  %-24s %8.2f  %-27s %-8s %-19s  %s%s\n",
                     e.step >= 0 ? std::to_string(e.step).c_str() : "?", e.file_name.c_str(),
                     static_cast<double>(e.size_bytes) / (1024.0 * 1024.0), layout.c_str(),
                     e.opened ? e.dtype.c_str() : "-", created.c_str(), e.status().c_str(), e.latest ? "  <- latest" : "");
  }
  for (const CheckpointSummary& e : l.entries)
    for (size_t i = 1; i < e.problems.size(); ++i) s += "  " + e.file_name + ": " + e.problems[i] + "\n";
  if (!l.latest_note.empty()) s += "warning: " + l.latest_note + "\n";
  return s;
}

// ------------------------------------------------------------------------------------------------
// verify

VerifyResult verify_checkpoint(const std::string& path, Communicator& comm) {
  VerifyResult res;
  res.file = resolve_agreed(path, comm);
  std::unique_ptr<CheckpointReader> rd;
  try {
    rd = std::make_unique<CheckpointReader>(res.file, comm);  // format and version; agreed
  } catch (const Error& e) {
    res.problems.push_back(e.what());
    return res;
  }
  res.problems = checkpoint_problems(*rd, comm);
  return res;
}

std::vector<std::string> checkpoint_problems(const CheckpointReader& rd, Communicator& comm) {
  std::vector<std::string> problems = check_checkpoint_index(rd);
  const auto meta = check_checkpoint_metadata(rd);
  problems.insert(problems.end(), meta.begin(), meta.end());
  // CheckpointReader::verify checks existence, exact length and checksum of every shard dataset.
  const auto data = rd.verify(comm);
  problems.insert(problems.end(), data.begin(), data.end());
  return problems;
}

// ------------------------------------------------------------------------------------------------
// diff

bool CheckpointDiff::identical() const {
  if (!differences.empty()) return false;
  return std::none_of(arrays.begin(), arrays.end(), [](const TensorDiff& t) { return t.differs; });
}

CheckpointDiff diff_checkpoints(const std::string& a_in, const std::string& b_in, Communicator& comm,
                                const DiffOptions& opt) {
  CheckpointDiff d;
  d.tolerance = opt.tolerance;
  d.path_a = resolve_agreed(a_in, comm);
  d.path_b = resolve_agreed(b_in, comm);
  CheckpointReader A(d.path_a, comm), B(d.path_b, comm);

  struct Job {
    int ta, tb, piece;
    std::string kind;
    std::int64_t numel;
  };
  std::vector<Job> jobs;
  bool whole = false;
  run_agreed(comm, "cannot compare '" + d.path_a + "' with '" + d.path_b + "'", [&] {
    // At equal tp, piece by piece; otherwise whole tensors, reassembled from each file's pieces.
    const std::int64_t tp_a = tp_size_of(A), tp_b = tp_size_of(B);
    whole = tp_a != tp_b;
    for (const char* attr : {"step", "consumed_samples", "adam_step"}) {
      const bool ha = A.has_attr(attr), hb = B.has_attr(attr);
      if (ha != hb) d.differences.push_back(std::string("attribute ") + attr + " only in " + (ha ? "A" : "B"));
      else if (ha && A.attr_int(attr) != B.attr_int(attr))
        d.differences.push_back(std::string("attribute ") + attr + ": " + std::to_string(A.attr_int(attr)) + " | " +
                                std::to_string(B.attr_int(attr)));
    }
    if (A.dtype() != B.dtype())
      d.differences.push_back(std::string("dtype: ") + (A.dtype() == DataType::f64 ? "float64" : "float32") + " | " +
                              (B.dtype() == DataType::f64 ? "float64" : "float32"));
    std::vector<std::string> kinds;
    for (const std::string& k : opt.kinds) {
      const bool ia = std::count(A.kinds().begin(), A.kinds().end(), k) > 0;
      const bool ib = std::count(B.kinds().begin(), B.kinds().end(), k) > 0;
      if (ia && ib) kinds.push_back(k);
      else if (ia || ib) d.differences.push_back("array kind '" + k + "' only in " + (ia ? "A" : "B"));
    }
    for (size_t i = 0; i < A.tensors().size(); ++i) {
      const CkptTensor& t = A.tensors()[i];
      const int j = B.find_tensor(t.name);
      if (j < 0) {
        d.differences.push_back("tensor '" + t.name + "' only in A");
        continue;
      }
      const CkptTensor& u = B.tensors()[j];
      if (t.shape != u.shape || t.split_dim != u.split_dim || t.split_groups != u.split_groups) {
        d.differences.push_back("tensor '" + t.name + "': shape " + shape_str(t.shape) + " | " + shape_str(u.shape) +
                                (t.shape == u.shape ? " (different tp split)" : ""));
        continue;
      }
      if (whole)
        for (const std::string& k : kinds) jobs.push_back(Job{static_cast<int>(i), j, -1, k, numel_of(t.shape)});
      else
        for (int r = 0; r < pieces_of(t, tp_a); ++r)
          for (const std::string& k : kinds) jobs.push_back(Job{static_cast<int>(i), j, r, k, piece_numel(t, tp_a, r)});
    }
    for (const CkptTensor& u : B.tensors())
      if (A.find_tensor(u.name) < 0) d.differences.push_back("tensor '" + u.name + "' only in B");
  });

  // Arrays round-robin over ranks; each rank fills its rows of (max |a-b|, max |b|), then max-reduce.
  std::vector<double> res(jobs.size() * 2, 0.0);
  run_agreed(comm, "cannot compare '" + d.path_a + "' with '" + d.path_b + "'", [&] {
    constexpr std::int64_t kChunk = std::int64_t(1) << 20;
    std::vector<double> va, vb;
    for (size_t i = static_cast<size_t>(comm.rank()); i < jobs.size(); i += static_cast<size_t>(comm.size())) {
      const Job& job = jobs[i];
      double max_abs = 0.0, max_b = 0.0;
      for (std::int64_t off = 0; off < job.numel; off += kChunk) {
        const std::int64_t n = std::min(kChunk, job.numel - off);
        va.resize(static_cast<size_t>(n));
        vb.resize(static_cast<size_t>(n));
        if (job.piece >= 0) {
          A.read(job.kind, job.ta, job.piece, off, n, DataType::f64, va.data());
          B.read(job.kind, job.tb, job.piece, off, n, DataType::f64, vb.data());
        } else {
          const CkptTensor& ct = A.tensors()[static_cast<size_t>(job.ta)];
          TensorSpec spec;
          spec.name = ct.name;
          spec.global_shape = ct.shape;
          spec.split_dim = ct.split_dim;
          spec.split_groups = ct.split_groups;
          read_tensor_piece(A, job.kind, spec, 1, 0, off, n, DataType::f64, va.data());
          read_tensor_piece(B, job.kind, spec, 1, 0, off, n, DataType::f64, vb.data());
        }
        for (std::int64_t e = 0; e < n; ++e) {
          const double x = va[e], y = vb[e];
          double diff = 0.0;
          if (x != y && !(std::isnan(x) && std::isnan(y)))
            diff = (std::isnan(x) || std::isnan(y)) ? std::numeric_limits<double>::infinity() : std::fabs(x - y);
          max_abs = std::max(max_abs, diff);
          if (std::fabs(y) > max_b) max_b = std::fabs(y);
        }
      }
      res[2 * i] = max_abs;
      res[2 * i + 1] = max_b;
    }
  });
  if (!res.empty()) comm.all_reduce(res.data(), res.size(), ReduceOp::max);

  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    TensorDiff t;
    t.name = A.tensors()[job.ta].name;
    if (job.piece >= 0 && pieces_of(A.tensors()[job.ta], tp_size_of(A)) > 1)
      t.name += " [tp " + std::to_string(job.piece) + "]";
    t.kind = job.kind;
    t.numel = job.numel;
    t.max_abs = res[2 * i];
    const double max_b = res[2 * i + 1];
    t.max_rel = t.max_abs == 0.0 ? 0.0 : (max_b > 0.0 ? t.max_abs / max_b : std::numeric_limits<double>::infinity());
    t.differs = t.max_abs > opt.tolerance;
    d.arrays.push_back(std::move(t));
  }
  return d;
}

std::string format_diff(const CheckpointDiff& d, bool all) {
  std::string s = "A: " + d.path_a + "\nB: " + d.path_b + "\n";
  for (const auto& x : d.differences) s += x + "\n";
  const auto n_diff = std::count_if(d.arrays.begin(), d.arrays.end(), [](const TensorDiff& t) { return t.differs; });
  if (n_diff > 0 || (all && !d.arrays.empty())) {
    s += log::format("%-44s %-11s %12s %12s %12s\n", "tensor", "kind", "elements", "max|a-b|", "max rel");
    for (const TensorDiff& t : d.arrays)
      if (t.differs || all)
        s += log::format("%-44s %-11s %12lld %12.4e %12.4e%s\n", t.name.c_str(), t.kind.c_str(),
                         static_cast<long long>(t.numel), t.max_abs, t.max_rel, t.differs ? "" : "  (equal)");
  }
  const bool exact = std::all_of(d.arrays.begin(), d.arrays.end(), [](const TensorDiff& t) { return t.max_abs == 0.0; });
  if (d.identical() && exact)
    s += log::format("identical: %zu arrays and the attributes step, consumed_samples, adam_step\n", d.arrays.size());
  else if (d.identical())
    s += log::format("equal within tolerance %g: %zu arrays and the attributes step, consumed_samples, adam_step\n",
                     d.tolerance, d.arrays.size());
  else
    s += log::format("%lld of %zu arrays differ; %zu other differences\n", static_cast<long long>(n_diff), d.arrays.size(),
                     d.differences.size());
  return s;
}

}  // namespace trident
