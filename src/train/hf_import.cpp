#include "train/hf_import.hpp"

#include "checkpoint/commit.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "core/tokenizer_kind.hpp"
#include "data/tokenizer.hpp"
#include "io/output_file.hpp"
#include "io/checkpoint_file.hpp"
#include "io/input_file.hpp"
#include "io/safetensors.hpp"
#include "model/family.hpp"
#include "parallel/agree.hpp"
#include "parallel/process_grid.hpp"
#include "train/model_schema.hpp"
#include "train/model_state.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace trident {

namespace fs = std::filesystem;

namespace {

/// Buffers a model's Hugging Face tensors one at a time, in Trident's orientation.
class HfTensors {
 public:
  HfTensors(std::map<std::string, SafetensorsTensor> all, const ModelFamily& f) : all_(std::move(all)), family_(f) {}

  /// Elements [first, first + count) of Trident tensor `t` (global, row-major). Throws ConfigError
  /// when the model lacks it or has it in another shape.
  void read(const CkptTensor& t, std::int64_t first, std::int64_t count, float* dst) {
    if (t.name != cached_) load(t);
    for (std::int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(values_[static_cast<size_t>(first + i)]);
  }
  /// The HF names read so far.
  const std::set<std::string>& used() const { return used_; }
  const std::map<std::string, SafetensorsTensor>& all() const { return all_; }

  /// The HF tensor that holds Trident's tensor `t` (global name and shape), its shape checked.
  /// Throws ConfigError naming a missing or misshapen tensor. Reads no values.
  const SafetensorsTensor& find(const CkptTensor& t) const {
    // Trident's name through the family's mapping, else as it is (a GPT2LMHeadModel saved whole
    // keeps nanoGPT's "transformer." prefix, which GPT2Model's own files drop).
    const std::string hf = family_.hf_name(t.name);
    auto it = all_.find(hf);
    if (it == all_.end()) it = all_.find(t.name);
    if (it == all_.end()) throw ConfigError("the model has no tensor '" + hf + "' (Trident's " + t.name + ")");
    const SafetensorsTensor& s = it->second;
    const bool transposed = family_.hf_transposed(t.name) && t.shape.size() == 2;
    std::vector<std::int64_t> want = t.shape;
    if (transposed) std::swap(want[0], want[1]);
    if (s.shape != want) {
      auto text = [](const std::vector<std::int64_t>& v) {
        std::string r = "(";
        for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
        return r + ")";
      };
      throw ConfigError("tensor '" + s.name + "' has shape " + text(s.shape) + ", config.json implies " + text(want));
    }
    return s;
  }

 private:
  void load(const CkptTensor& t) {
    const SafetensorsTensor& s = find(t);
    const bool transposed = family_.hf_transposed(t.name) && t.shape.size() == 2;
    values_ = read_safetensors_values(s);
    if (transposed) {  // HF's Conv1D (in, out) -> nn.Linear's (out, in)
      const std::int64_t rows = t.shape[0], cols = t.shape[1];
      std::vector<double> tr(values_.size());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) tr[static_cast<size_t>(r * cols + c)] = values_[static_cast<size_t>(c * rows + r)];
      values_.swap(tr);
    }
    for (double v : values_) {
      if (!std::isfinite(v)) throw ConfigError("tensor '" + s.name + "' holds a non-finite value");
      if (!std::isfinite(static_cast<float>(v)))  // an F64 value beyond float's range
        throw ConfigError("tensor '" + s.name + "' holds the value " + std::to_string(v) +
                          ", beyond float's range (Trident's weights are float)");
    }
    cached_ = t.name;
    used_.insert(s.name);
  }

  std::map<std::string, SafetensorsTensor> all_;
  const ModelFamily& family_;
  std::string cached_;
  std::vector<double> values_;
  std::set<std::string> used_;
};

/// Tensors a Hugging Face file may hold that are not parameters of the model (buffers of older
/// transformers versions) or duplicate one (a tied head saved anyway).
bool ignorable(const std::string& name, const ModelConfig& m) {
  auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends(".attn.bias") || ends(".attn.masked_bias") || ends(".rotary_emb.inv_freq")) return true;
  return name == "lm_head.weight" && m.tie_embeddings;
}

}  // namespace

HfImportResult import_hf(const HfImportOptions& opt, Communicator& comm) {
  Timer timer;
  HfImportResult res;
  Config cfg;
  std::map<std::string, SafetensorsTensor> tensors;
  std::vector<std::int32_t> vocab;
  std::vector<std::uint8_t> tok_model;
  run_agreed(comm, "ckpt import", [&] {
    const fs::path dir(opt.dir);
    std::error_code dec;
    const bool there = fs::exists(dir, dec);
    if (dec) throw IoError("cannot examine '" + opt.dir + "': " + dec.message());
    if (!there) throw ConfigError("'" + opt.dir + "' does not exist (a Hugging Face model directory)");
    if (!fs::is_directory(dir, dec)) throw ConfigError("'" + opt.dir + "' is not a directory (a Hugging Face model directory)");
    const std::string config_path = (dir / "config.json").string();
    if (!fs::exists(config_path)) throw ConfigError("'" + opt.dir + "' has no config.json");
    const std::map<std::string, std::string> c = read_json_object_scalars(config_path);
    const auto type = c.find("model_type");
    if (type == c.end()) throw ConfigError("'" + config_path + "' has no model_type");
    // The output: a new file (or --force), or a directory holding no checkpoint and no run, so an
    // import never moves a run's `latest` (a step-0 commit would supersede its checkpoints).
    std::error_code ec;
    if (fs::path(opt.output).extension() == ".h5") {
      if (fs::exists(opt.output, ec) && !opt.force)
        throw ConfigError("the output '" + opt.output + "' exists; remove it or pass --force to replace it");
      // Even with --force, and for a new name too: never a run's checkpoint file (a step added
      // behind a run's back), a device or a directory.
      OutputRules rules;
      rules.force = true;
      rules.replace_checkpoint = true;
      rules.creates_parent = true;
      check_output_file(opt.output, "the output", rules);
    } else {
      check_output_directory(opt.output, "the output", "a name ending in .h5 is written as one checkpoint file");
      const fs::path out(opt.output);
      if (fs::exists(opt.output, ec) &&
          (fs::is_directory(out / "checkpoints", ec) || fs::exists(out / ".trident.lock", ec) ||
           !CheckpointDir(opt.output).list().empty() || fs::exists(out / "latest", ec)))
        throw ConfigError("the output directory '" + opt.output +
                          "' holds checkpoints or a run: import into a new directory or a *.h5 file");
      // A new or empty directory only (docs/models.md): never the model directory itself or
      // another directory of the user's, which would get a checkpoint and a `latest` among its files.
      if (fs::exists(opt.output, ec) && !fs::is_empty(opt.output, ec))
        throw ConfigError("the output directory '" + opt.output +
                          "' is not empty: import into a new or empty directory, or a *.h5 file");
    }
    bool any_safetensors = false;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      any_safetensors = any_safetensors || it->path().extension() == ".safetensors";
    if (ec) throw IoError("cannot list '" + opt.dir + "': " + ec.message());
    if (!any_safetensors) throw ConfigError("'" + opt.dir + "' holds no .safetensors file (a Hugging Face model directory)");
    const ModelFamily* f = family_of_hf(type->second);
    if (f == nullptr)
      throw ConfigError("'" + config_path + "': model_type '" + type->second +
                        "' is no Trident family (gpt2 and llama are: [model] arch)");
    res.family = f->name;
    ModelConfig m;
    f->hf_read_config(c, m);
    if (opt.block_size > 0) {
      if (f->position_embedding != nullptr && opt.block_size != m.block_size)
        throw ConfigError("--block-size " + std::to_string(opt.block_size) + ": the model's position embedding has " +
                          std::to_string(m.block_size) + " rows; only models without one (llama) change it");
      if (opt.block_size > m.block_size)
        log::warn("--block-size %d is longer than the model's max_position_embeddings = %d: rotary positions beyond "
                  "what it was trained on usually degrade it", opt.block_size, m.block_size);
      m.block_size = opt.block_size;
    } else if (m.block_size > 16384) {
      log::warn("the model's context is %d tokens (max_position_embeddings); training or evaluating at that length "
                "needs activations for it: --block-size N imports it with a shorter one", m.block_size);
    }
    // The tokenizer: given, else what a Trident export recorded, else GPT-2's for GPT-2's vocabulary.
    std::string kind = opt.tokenizer;
    if (!kind.empty() && !parse_tokenizer_kind(kind))
      throw ConfigError("--tokenizer '" + kind + "' is not a tokenizer kind (" + tokenizer_kind_names() + ")");
    if (!kind.empty() && c.count("trident_tokenizer") && c.at("trident_tokenizer") != kind)
      throw ConfigError("--tokenizer " + kind + ": config.json says the model was trained on " +
                        c.at("trident_tokenizer") + " tokens (trident_tokenizer)");
    // Where the kind comes from, for the messages below: the option, or config.json.
    std::string source = "--tokenizer " + kind;
    if (kind.empty() && c.count("trident_tokenizer")) {
      kind = c.at("trident_tokenizer");
      source = "config.json's trident_tokenizer '" + kind + "'";
      if (!parse_tokenizer_kind(kind))
        throw ConfigError(source + " is not a tokenizer kind (" + tokenizer_kind_names() + ")");
    }
    if (kind.empty() && m.arch == ModelArch::gpt2 && m.vocab_size >= 50257) {
      kind = "gpt2";
      source = "the gpt2 tokenizer (taken for a GPT-2 vocabulary)";
    }
    if (kind.empty())
      throw ConfigError("the tokenizer of '" + opt.dir + "' is unknown: give --tokenizer KIND (" + tokenizer_kind_names() +
                        ") for the token ids the model was trained on");
    const auto k = parse_tokenizer_kind(kind);
    if (!k) throw ConfigError("--tokenizer '" + kind + "' is not a tokenizer kind (" + tokenizer_kind_names() + ")");
    res.tokenizer = kind;
    // Kinds with a fixed vocabulary need a model at least that large (ids beyond it never occur).
    const std::int64_t fixed = tokenizer_info(*k).fixed_vocab;
    if (fixed > 0 && m.vocab_size < fixed)
      throw ConfigError(source + " has " + std::to_string(fixed) + " token ids; the model has only " +
                        std::to_string(m.vocab_size) + " (vocab_size): it was trained on other tokens");
    if (tokenizer_info(*k).stores_vocab) {
      for (std::int64_t v : read_json_int_array(config_path, "trident_vocab")) {
        if (v < 0 || v > std::numeric_limits<std::int32_t>::max())
          throw ConfigError("config.json's trident_vocab entry " + std::to_string(vocab.size()) + " = " +
                            std::to_string(v) + " is not a " + (kind == "byte" ? "byte value" : "Unicode code point"));
        vocab.push_back(static_cast<std::int32_t>(v));
      }
      if (vocab.empty())
        throw ConfigError("tokenizer '" + kind + "' needs the vocabulary, which config.json's trident_vocab holds in a "
                          "Trident export; this directory has none");
      if (static_cast<std::int64_t>(vocab.size()) != m.vocab_size)
        throw ConfigError("config.json's trident_vocab has " + std::to_string(vocab.size()) + " entries for a model of " +
                          std::to_string(m.vocab_size) + " tokens (vocab_size)");
      try {  // the checks a checkpoint's reader makes (range; char: sorted and distinct), made here
        (void)Tokenizer(*k, vocab, m.vocab_size);
      } catch (const Error& e) {
        throw ConfigError("config.json's trident_vocab: " + std::string(e.what()));
      }
    }
    if (tokenizer_info(*k).stores_model) {
      const fs::path tm = dir / "tokenizer.model";
      if (!fs::exists(tm, ec))
        throw ConfigError("tokenizer '" + kind + "' needs its model, tokenizer.model, which '" + opt.dir + "' lacks");
      const std::string bytes = read_small_text_file(tm.string(), "the tokenizer model", 1u << 30);
      tok_model.assign(bytes.begin(), bytes.end());
      try {  // the checks a checkpoint's reader makes: it loads, spells a newline, fits vocab_size
        (void)Tokenizer(*k, {}, m.vocab_size, tok_model);
      } catch (const Error& e) {
        throw ConfigError("'" + tm.string() + "': " + std::string(e.what()));
      }
    }
    cfg = parse_deck_text("", "hf_import", {});
    cfg.model = m;
    cfg.parallel.dp = cfg.parallel.tp = cfg.parallel.pp = 1;
    cfg.parallel.zero_stage = 0;
    cfg.train.dtype = Precision::f32;
    cfg.data.path = kImportedDataPath + opt.dir + ")";  // the deck needs one; init_from ignores it
    cfg.train.out_dir = fs::path(opt.output).extension() == ".h5" ? fs::path(opt.output).parent_path().string() : opt.output;
    try {
      validate(cfg, 1);
    } catch (const ConfigError& e) {
      throw ConfigError("'" + config_path + "' describes a model Trident cannot build: " + e.what());
    }
    if (comm.rank() == 0) tensors = read_safetensors_dir(opt.dir);
  });

  std::unique_ptr<Communicator> self = comm.split(comm.rank(), 0, "import");
  std::string output;
  run_agreed(comm, "ckpt import", [&] {
    if (comm.rank() != 0) return;
    ProcessGrid grid(*self, GridShape{1, 1, 1});
    // Every tensor of the model config.json describes is there with its shape before the model is
    // allocated: a config that does not match the weights (missing keys filled with HF's defaults
    // of a 7B model, say) is named, not a failed allocation of gigabytes.
    HfTensors hf(std::move(tensors), family_of(cfg.model.arch));
    for (const CkptTensor& t : model_schema().tensors(cfg.model)) (void)hf.find(t);
    ModelState<float> state(cfg, grid);
    state.set_weights([&](const CkptTensor& t, int, int, std::int64_t first, std::int64_t count, float* dst) {
      hf.read(t, first, count, dst);
    });
    for (const auto& [name, t] : hf.all())
      if (!hf.used().count(name) && !ignorable(name, cfg.model))
        throw ConfigError("tensor '" + name + "' of the model has no place in Trident's " + res.family +
                          " model of this config.json (another architecture, or a config that does not match)");
    res.n_tensors = static_cast<std::int64_t>(hf.used().size());
    res.n_parameters = state.layout().numel();
    RunState run;
    run.tokenizer = res.tokenizer;
    run.vocab = vocab;
    run.tokenizer_model = tok_model;
    CheckpointSnapshot snap = state.live_view(run);
    snap.write.progress_label = "ckpt import: writing";
    auto write = [&](const std::string& tmp) { write_checkpoint_file(tmp, *self, snap.write); };
    if (fs::path(opt.output).extension() == ".h5") {
      const fs::path parent = fs::absolute(fs::path(opt.output)).parent_path();
      fs::create_directories(parent);
      commit_file(opt.output, *self, write);
      output = opt.output;
    } else {
      fs::create_directories(opt.output);
      output = CheckpointDir(opt.output).commit(0, *self, write, std::numeric_limits<std::int64_t>::max());
    }
  });
  res.output = output;
  res.seconds = timer.seconds();
  return res;
}

}  // namespace trident
