#include "checkpoint/export.hpp"

#include "checkpoint/internal.hpp"
#include "checkpoint/metadata.hpp"
#include "checkpoint/tensor_read.hpp"
#include "checkpoint/verify.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "io/checkpoint_file.hpp"
#include "io/output_file.hpp"
#include "parallel/agree.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>

namespace fs = std::filesystem;

namespace trident {

using ckpt_detail::numel_of;

namespace {

/// Throws ConfigError unless `dir` may receive an export: absent, empty (an export's lock file
/// aside), or with `force` anything but a run's or checkpoints' directory (a run's lock, metrics,
/// `latest`, step_*.h5 or checkpoints/ in it), whose files an export would mix with a model's.
void check_export_directory(const std::string& dir, bool force) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  static const std::regex step(R"(step_[0-9]+\.h5(\.tmp)?)");
  std::vector<std::string> names;
  std::string run_file;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n == ".trident-export.lock") continue;
    names.push_back(n);
    if (n == ".trident.lock" || n == "latest" || n == "checkpoints" || n == "metrics.csv" || std::regex_match(n, step))
      run_file = n;
  }
  if (ec) throw IoError("cannot list the output directory '" + dir + "': " + ec.message());
  if (!run_file.empty())
    throw ConfigError("the output '" + dir + "' is a run's or checkpoints' directory (it holds '" + run_file +
                      "'): export into a directory of its own");
  if (names.empty() || force) return;
  std::sort(names.begin(), names.end());
  std::string some;
  for (size_t i = 0; i < names.size() && i < 3; ++i) some += (i ? ", " : "") + names[i];
  throw ConfigError("the output '" + dir + "' is not empty (" + std::to_string(names.size()) + " entr" +
                    (names.size() == 1 ? "y" : "ies") + ": " + some + (names.size() > 3 ? ", ..." : "") +
                    "): export into a new or empty directory, or add --force to write over an earlier export there "
                    "(its files of the same names are replaced, its other model-NNNNN-of-MMMMM.safetensors shards "
                    "removed, anything else left)");
}

std::string json_shape(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// One tensor of the export: where it comes from and where it goes.
struct ExportTensor {
  std::string name;                  ///< Trident (nanoGPT) name
  std::string hf_name;
  int row = 0;                       ///< row of /index/tensors
  std::vector<std::int64_t> shape;   ///< as written (transposed where HF uses Conv1D)
  bool transposed = false;
  std::int64_t numel = 0;
  std::int64_t bytes = 0;
  int file = 0;                      ///< which output file
  std::int64_t begin = 0;            ///< data_offsets within that file's byte buffer
};

}  // namespace

std::uint16_t to_bfloat16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

SafetensorsExportResult export_safetensors(const std::string& path, Communicator& comm,
                                           const SafetensorsExportOptions& opt, const ModelSchema& schema) {
  require_config(!opt.output_dir.empty(), "no --output directory given");
  require_config(opt.dtype == "float32" || opt.dtype == "bfloat16",
                 "--dtype '" + opt.dtype + "' is not float32 or bfloat16");
  // At most 2^40 MiB (a petabyte: no limit in practice), so that the byte count fits 64 bits.
  require_config(opt.shard_size_mb > 0 && opt.shard_size_mb <= 1099511627776.0,
                 "--shard-size-mb must be > 0 and at most 2^40 (MiB)");
  SafetensorsExportResult res;
  run_agreed(comm, "", [&] {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw CheckpointError("'" + path + "' does not exist");
    res.checkpoint = resolve_checkpoint_path(path);
    // The output is judged before the checkpoint's every checksum is read (gigabytes): a
    // re-export without --force is the usual mistake.
    if (comm.rank() == 0) {
      check_output_directory(opt.output_dir, "the output");
      check_export_directory(opt.output_dir, opt.force);
    }
  });
  CheckpointReader rd(res.checkpoint, comm);
  require_intact(rd, comm, "run `trident ckpt verify " + res.checkpoint + "`; nothing was exported", schema);

  run_agreed(comm, "cannot export '" + res.checkpoint + "'", [&] {
    // The plan (which tensor goes where) is computed on every rank from the index alone.
    const CheckpointMeta meta = CheckpointMeta::read(rd);
    meta.require_complete(res.checkpoint);
    res.step = meta.run.step;
    const std::vector<CkptTensor> model = schema.tensors(meta.model);
    if (rd.tensors().size() != model.size())
      throw CheckpointError("it holds " + std::to_string(rd.tensors().size()) + " tensors, its model fingerprint " +
                            std::to_string(model.size()) + " (run `trident ckpt verify`)");

    const std::size_t es = opt.dtype == "bfloat16" ? 2 : 4;
    const std::int64_t limit = static_cast<std::int64_t>(opt.shard_size_mb * 1024.0 * 1024.0);
    std::vector<ExportTensor> plan;
    std::vector<std::int64_t> file_bytes;  // data bytes of each output file
    for (const CkptTensor& spec : model) {
      ExportTensor t;
      t.name = spec.name;
      t.hf_name = schema.hf_name(meta.model, spec.name);
      t.row = rd.find_tensor(spec.name);
      if (t.row < 0 || rd.tensors()[t.row].shape != spec.shape)
        throw CheckpointError("tensor '" + spec.name + "' is missing or has the wrong shape (run `trident ckpt verify`)");
      t.transposed = schema.hf_transposed(meta.model, spec.name) && spec.shape.size() == 2;
      t.shape = t.transposed ? std::vector<std::int64_t>{spec.shape[1], spec.shape[0]} : spec.shape;
      t.numel = numel_of(spec.shape);
      t.bytes = t.numel * static_cast<std::int64_t>(es);
      if (file_bytes.empty() || (file_bytes.back() > 0 && file_bytes.back() + t.bytes > limit)) file_bytes.push_back(0);
      t.file = static_cast<int>(file_bytes.size()) - 1;
      t.begin = file_bytes.back();
      file_bytes.back() += t.bytes;
      res.total_size += t.bytes;
      plan.push_back(std::move(t));
    }
    res.n_tensors = static_cast<std::int64_t>(plan.size());
    const int n_files = static_cast<int>(file_bytes.size());
    std::vector<std::string> names;
    for (int f = 0; f < n_files; ++f) names.push_back(log::format("model-%05d-of-%05d.safetensors", f + 1, n_files));
    for (const auto& n : names) res.files.push_back((fs::path(opt.output_dir) / n).string());
    res.files.push_back((fs::path(opt.output_dir) / "model.safetensors.index.json").string());
    res.files.push_back((fs::path(opt.output_dir) / "config.json").string());
    // A trained tokenizer (bpe) goes along as SentencePiece's own model file.
    const std::vector<std::uint8_t>& tokenizer_model = meta.run.tokenizer_model;
    if (!tokenizer_model.empty()) res.files.push_back((fs::path(opt.output_dir) / "tokenizer.model").string());
    if (comm.rank() != 0) return;

    std::error_code ec;
    check_output_directory(opt.output_dir, "the output");
    check_export_directory(opt.output_dir, opt.force);
    fs::create_directories(opt.output_dir, ec);
    if (ec) throw IoError("cannot create output directory '" + opt.output_dir + "': " + ec.message());
    // One export at a time per directory: each removes the shards it did not write (below).
    const OutputDirLock lock(opt.output_dir, ".trident-export.lock", "`trident ckpt export`");
    const char* st_dtype = es == 2 ? "BF16" : "F32";
    std::vector<float> values, transposed;
    std::vector<unsigned char> bytes;
    // Every file is written to a temporary file of a unique name beside it (io/output_file.hpp),
    // all of them complete and on disk before the first is moved into place: a failed export (a
    // full disk, a failed read) leaves no temporary file and the directory as it was -- an earlier
    // export there is never left mixed with this one's shards. Targets that are directories are
    // refused before anything is written.
    for (const std::string& path : res.files)
      if (fs::is_directory(fs::symlink_status(path, ec)))
        throw ConfigError("'" + path + "' is a directory: the export cannot write that file");
    std::vector<std::unique_ptr<AtomicFile>> outputs;
    // By bytes of tensor data written: tensors differ in size by orders of magnitude (wte).
    Progress progress("ckpt export", res.total_size, ProgressUnit::bytes);
    for (int f = 0; f < n_files; ++f) {
      // Header: metadata first, then the tensors in data order.
      std::string header = "{\"__metadata__\":{\"format\":\"pt\",\"trident_step\":" +
                           json_str(std::to_string(res.step)) + "}";
      for (const ExportTensor& t : plan)
        if (t.file == f)
          header += "," + json_str(t.hf_name) + ":{\"dtype\":\"" + st_dtype + "\",\"shape\":" + json_shape(t.shape) +
                    ",\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.begin + t.bytes) + "]}";
      header += "}";
      header.resize((header.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
      // Written as the tensors are read.
      outputs.push_back(std::make_unique<AtomicFile>(res.files[static_cast<size_t>(f)]));
      AtomicFile& out = *outputs.back();
      unsigned char len[8];
      for (int b = 0; b < 8; ++b) len[b] = static_cast<unsigned char>((header.size() >> (8 * b)) & 0xffu);
      out.write(len, 8);
      out.write(header.data(), header.size());
      for (const ExportTensor& t : plan) {
        if (t.file != f) continue;
        values.resize(static_cast<size_t>(t.numel));
        // Whole tensors, reassembled from whatever tp partitions the checkpoint was written in.
        read_tp_partition(rd, "param", rd.tensors()[static_cast<size_t>(t.row)], 1, 0, 0, t.numel, DataType::f32,
                          values.data());
        const float* src = values.data();
        if (t.transposed) {  // (out, in) -> (in, out): HF Conv1D layout
          const std::int64_t rows = t.shape[1], cols = t.shape[0];  // source (rows, cols)
          transposed.resize(values.size());
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t j = 0; j < cols; ++j) transposed[j * rows + i] = values[i * cols + j];
          src = transposed.data();
        }
        // Explicit little-endian bytes, whatever the host order.
        bytes.resize(static_cast<size_t>(t.bytes));
        for (std::int64_t i = 0; i < t.numel; ++i) {
          if (es == 2) {
            const std::uint16_t h = to_bfloat16(src[i]);
            bytes[2 * i] = static_cast<unsigned char>(h & 0xffu);
            bytes[2 * i + 1] = static_cast<unsigned char>(h >> 8);
          } else {
            std::uint32_t u;
            std::memcpy(&u, &src[i], 4);
            for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<unsigned char>((u >> (8 * b)) & 0xffu);
          }
        }
        out.write(bytes.data(), bytes.size());
        progress.add(t.bytes);
      }
      out.close();
    }
    progress.finish();

    std::map<std::string, std::string> weight_map;  // sorted by name, as transformers writes it
    for (const ExportTensor& t : plan) weight_map[t.hf_name] = names[static_cast<size_t>(t.file)];
    std::string index = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(res.total_size) +
                        "\n  },\n  \"weight_map\": {\n";
    size_t i = 0;
    for (const auto& [name, file] : weight_map)
      index += "    " + json_str(name) + ": " + json_str(file) + (++i < weight_map.size() ? ",\n" : "\n");
    index += "  }\n}\n";
    const auto small_file = [&outputs](const std::string& path, const std::string& text) {
      outputs.push_back(std::make_unique<AtomicFile>(path));
      outputs.back()->write(text.data(), text.size());
      outputs.back()->close();
    };
    small_file(res.files[static_cast<size_t>(n_files) + 1],
               schema.hf_config_json(meta, opt.dtype, fs::path(res.checkpoint).filename().string()));
    if (!tokenizer_model.empty())
      small_file(res.files.back(), std::string(tokenizer_model.begin(), tokenizer_model.end()));
    small_file(res.files[static_cast<size_t>(n_files)], index);  // the index last: it names the shards
    // Now the renames (each atomic; a crash between two of them is the only window in which the
    // directory mixes two exports).
    for (auto& out : outputs) out->commit(/*replace=*/true);

    // Shards of an earlier export with another file count (model-NNNNN-of-MMMMM.safetensors, the
    // names only an export writes) are removed once this export is in place, as transformers'
    // save_pretrained removes its stale shards: the index names only this export's files, and a
    // reader globbing model-*.safetensors would mix two models. Other model-*.safetensors files
    // are the user's: named, not touched. The temporary file of a shard whose export was killed
    // (.model-*.safetensors.XXXXXX, hidden) holds up to a shard's size: named too, since no later
    // export removes another's temporary file.
    const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
    const std::set<std::string> ours(names.begin(), names.end());
    std::set<std::string> stale, foreign;  // sorted, as ls lists them
    for (const auto& e : fs::directory_iterator(opt.output_dir, ec)) {
      const std::string n = e.path().filename().string();
      if (ours.count(n) || n.rfind("model-", 0) != 0 || n.size() <= 12 || n.substr(n.size() - 12) != ".safetensors")
        continue;
      (std::regex_match(n, shard) && e.is_regular_file(ec) ? stale : foreign).insert(e.path().string());
    }
    for (const std::string& path : stale) {
      std::error_code rm;
      if (fs::remove(path, rm))
        log::info("removed '%s', a shard of an earlier export into this directory", path.c_str());
      else
        log::warn("'%s' is a shard of an earlier export, not part of this one, and could not be removed: %s",
                  path.c_str(), rm.message().c_str());
    }
    for (const std::string& path : foreign) log::warn("'%s' in the output directory is not part of this export", path.c_str());
    if (fs::is_regular_file(fs::path(opt.output_dir) / "model.safetensors", ec))
      log::warn("'%s' in the output directory is not part of this export, and transformers' from_pretrained loads it "
                "instead of this export's index: remove it",
                (fs::path(opt.output_dir) / "model.safetensors").string().c_str());
    warn_leftover_temporaries(
        leftover_temporaries(opt.output_dir, [&shard](const std::string& n) { return std::regex_match(n, shard); }),
        "export");
  });
  return res;
}

}  // namespace trident
