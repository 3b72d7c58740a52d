#include "checkpoint/metadata.hpp"

#include "checkpoint/commit.hpp"
#include "core/error.hpp"
#include "core/tokenizer_kind.hpp"
#include "trident_version.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <optional>
#include <utility>

namespace trident {

namespace {

// Attribute names. The file stores them as HDF5 root attributes (docs/checkpoint-format.md).
// Required ones are reported by name when absent; optional ones (added in later versions of the
// format) keep their defaults.
// Aliases for the member pointers: nvcc's generated host code parenthesises a bare
// `T C::*field` declaration, which g++ then warns about (-Wparentheses) in CUDA builds.
using IntMember = std::int64_t CheckpointMeta::*;
using DoubleMember = double CheckpointMeta::*;
struct IntField {
  const char* name;
  IntMember field;
};
struct DoubleField {
  const char* name;
  DoubleMember field;
};

constexpr IntField kInts[] = {
    {"adam_step", &CheckpointMeta::adam_step},         {"seed", &CheckpointMeta::seed},
    {"max_steps", &CheckpointMeta::max_steps},         {"warmup_steps", &CheckpointMeta::warmup_steps},
    {"global_batch_size", &CheckpointMeta::global_batch_size}, {"dp", &CheckpointMeta::dp},
    {"tp", &CheckpointMeta::tp},                       {"pp", &CheckpointMeta::pp},
    {"world_size", &CheckpointMeta::world_size},       {"zero_stage", &CheckpointMeta::zero_stage},
    {"created_unix_time", &CheckpointMeta::created_unix_time}};
constexpr DoubleField kDoubles[] = {{"lr", &CheckpointMeta::lr},       {"min_lr", &CheckpointMeta::min_lr},
                                    {"beta1", &CheckpointMeta::beta1}, {"beta2", &CheckpointMeta::beta2},
                                    {"eps", &CheckpointMeta::eps},     {"weight_decay", &CheckpointMeta::weight_decay}};

// The model fingerprint, as "model_<key>" attributes.
constexpr const char* kModelInts[] = {"model_n_layer", "model_n_head", "model_n_embd", "model_block_size",
                                      "model_vocab_size", "model_bias"};

// The order in which `ckpt verify` reports missing required attributes (the order of the
// original specification; tests and users see the first one).
constexpr const char* kRequired[] = {
    "step", "consumed_samples", "adam_step", "seed", "max_steps", "warmup_steps", "global_batch_size", "dp", "tp",
    "pp", "world_size", "zero_stage", "model_n_layer", "model_n_head", "model_n_embd", "model_block_size",
    "model_vocab_size", "model_bias", "created_unix_time", "lr", "min_lr", "beta1", "beta2", "eps", "weight_decay",
    "model_dropout", "deck_name", "tokenizer", "code_version"};

constexpr const char* kConfigText = "config";
constexpr const char* kVocabArray = "tokenizer/vocab";
constexpr const char* kModelArray = "tokenizer/model";
constexpr const char* kLossWindow = "train_state/loss_window";

// /rank_state: every rank writes the same global restart state (keyed by grid coordinates through
// /index/shards); a layout change needs nothing per rank (docs/design.md, "Randomness").
const std::vector<std::string>& rank_state_columns() {
  static const std::vector<std::string> cols = {"consumed_samples", "data_seed", "rng_seed", "rng_step"};
  return cols;
}

}  // namespace

const std::vector<std::string>& checkpoint_kinds() {
  static const std::vector<std::string> kinds = {"param", "exp_avg", "exp_avg_sq"};
  return kinds;
}

CheckpointMeta CheckpointMeta::of_run(const Config& cfg, const RunState& run, std::int64_t adam_step, int dp, int tp,
                                      int pp, int shard_group_size) {
  CheckpointMeta m;
  m.run = run;
  m.adam_step = adam_step;
  const TrainConfig& t = cfg.train;
  m.seed = t.seed;
  m.max_steps = t.max_steps;
  m.warmup_steps = t.warmup_steps;
  m.global_batch_size = t.global_batch_size;
  m.lr = t.lr;
  m.min_lr = t.min_lr;
  m.beta1 = t.beta1;
  m.beta2 = t.beta2;
  m.eps = t.eps;
  m.weight_decay = t.weight_decay;
  m.dp = dp;
  m.tp = tp;
  m.pp = pp;
  m.world_size = static_cast<std::int64_t>(dp) * tp * pp;
  m.zero_stage = cfg.parallel.zero_stage;
  m.shard_group_size = shard_group_size;
  m.model = cfg.model;
  m.code_version = std::string(TRIDENT_VERSION_STRING) + " (git " + TRIDENT_GIT_COMMIT + ")";
  m.deck_name = cfg.deck_name;
  m.param_dtype = name_of(t.param_dtype);
  m.created_unix_time = static_cast<std::int64_t>(std::time(nullptr));
  m.config_text = cfg.to_ini();
  return m;
}

void CheckpointMeta::write_to(CheckpointWrite& w) const {
  w.int_attrs["step"] = run.step;
  w.int_attrs["consumed_samples"] = run.consumed_samples;
  for (const IntField& f : kInts) w.int_attrs[f.name] = this->*f.field;
  w.int_attrs["shard_group_size"] = shard_group_size;
  w.int_attrs["model_n_layer"] = model.n_layer;
  w.int_attrs["model_n_head"] = model.n_head;
  w.int_attrs["model_n_embd"] = model.n_embd;
  w.int_attrs["model_block_size"] = model.block_size;
  w.int_attrs["model_vocab_size"] = model.vocab_size;
  w.int_attrs["model_bias"] = model.bias ? 1 : 0;
  // The family's own keys (absent from checkpoints before the llama family: read as gpt2).
  w.string_attrs["model_arch"] = name_of(model.arch);
  if (model.arch != ModelArch::gpt2) {
    w.int_attrs["model_n_kv_head"] = model.kv_heads();
    w.int_attrs["model_ffn_hidden"] = model.ffn_width();
    w.int_attrs["model_tie_embeddings"] = model.tie_embeddings ? 1 : 0;
    w.double_attrs["model_norm_eps"] = model.norm_eps;
    w.double_attrs["model_rope_theta"] = model.rope_theta;
  }
  for (const DoubleField& f : kDoubles) w.double_attrs[f.name] = this->*f.field;
  w.double_attrs["last_lr"] = run.last_lr;
  w.double_attrs["model_dropout"] = model.dropout;
  w.string_attrs["code_version"] = code_version;
  w.string_attrs["deck_name"] = deck_name;
  w.string_attrs["tokenizer"] = run.tokenizer;
  w.string_attrs["param_dtype"] = param_dtype;
  if (!run.lineage.empty()) w.string_attrs["lineage"] = run.lineage;
  if (!run.data_hash.empty()) w.string_attrs["data_xxh64"] = run.data_hash;
  if (run.data_train_tokens >= 0) w.int_attrs["data_train_tokens"] = run.data_train_tokens;
  if (run.val_loss_step >= 0) {
    w.double_attrs["val_loss"] = run.val_loss;
    w.int_attrs["val_loss_step"] = run.val_loss_step;
  }
  w.int_attrs["skipped_steps"] = run.skipped_steps;
  w.int_attrs["consecutive_skips"] = run.consecutive_skips;
  if (!run.loss_window.empty()) w.double_arrays[kLossWindow] = run.loss_window;
  if (run.loss_scale > 0.0) {
    w.double_attrs["loss_scale"] = run.loss_scale;
    w.int_attrs["loss_scale_good_steps"] = run.loss_scale_good_steps;
    w.int_attrs["overflow_steps"] = run.overflow_steps;
  }
  w.texts[kConfigText] = config_text;
  if (!run.vocab.empty()) w.int_arrays[kVocabArray] = run.vocab;
  if (!run.tokenizer_model.empty()) w.byte_arrays[kModelArray] = run.tokenizer_model;
  w.rank_state_columns = rank_state_columns();
  w.rank_state = {run.consumed_samples, seed, seed, run.step};
}

CheckpointMeta CheckpointMeta::read(const CheckpointReader& rd) {
  CheckpointMeta m;
  auto get_int = [&](const char* name, std::int64_t& out) {
    if (rd.has_attr(name)) out = rd.attr_int(name);
  };
  auto get_double = [&](const char* name, double& out) {
    if (rd.has_attr(name)) out = rd.attr_double(name);
  };
  auto get_string = [&](const char* name, std::string& out) {
    if (rd.has_attr(name)) out = rd.attr_string(name);
  };
  for (const char* name : kRequired)
    if (!rd.has_attr(name)) m.missing.push_back(name);
  get_int("step", m.run.step);
  get_int("consumed_samples", m.run.consumed_samples);
  get_double("last_lr", m.run.last_lr);
  get_string("tokenizer", m.run.tokenizer);
  get_string("lineage", m.run.lineage);
  get_string("data_xxh64", m.run.data_hash);
  get_int("data_train_tokens", m.run.data_train_tokens);
  if (rd.has_attr("val_loss") && rd.has_attr("val_loss_step")) {
    m.run.val_loss = rd.attr_double("val_loss");
    m.run.val_loss_step = rd.attr_int("val_loss_step");
  }
  get_int("skipped_steps", m.run.skipped_steps);
  get_int("consecutive_skips", m.run.consecutive_skips);
  if (rd.has_attr("loss_scale")) {
    get_double("loss_scale", m.run.loss_scale);
    get_int("loss_scale_good_steps", m.run.loss_scale_good_steps);
    get_int("overflow_steps", m.run.overflow_steps);
  }
  if (rd.has(kLossWindow)) {
    try {
      m.run.loss_window = rd.double_array(kLossWindow);
    } catch (const std::exception& e) {
      m.missing.push_back(std::string("/") + kLossWindow + " (" + e.what() + ")");
    }
  }
  // Kinds that store a vocabulary (a model) must have one; an unreadable one is reported, not
  // thrown, so `ckpt verify` can list it with everything else.
  const std::optional<TokenizerKind> kind = parse_tokenizer_kind(m.run.tokenizer);
  if ((kind && tokenizer_info(*kind).stores_vocab) || rd.has(kVocabArray)) {
    try {
      m.run.vocab = rd.int_array(kVocabArray);
    } catch (const std::exception& e) {
      m.vocab_error = e.what();
    }
  }
  if ((kind && tokenizer_info(*kind).stores_model) || rd.has(kModelArray)) {
    try {
      m.run.tokenizer_model = rd.byte_array(kModelArray);
    } catch (const std::exception& e) {
      m.model_error = e.what();
    }
  }
  for (const IntField& f : kInts) get_int(f.name, m.*f.field);
  get_int("shard_group_size", m.shard_group_size);
  std::int64_t v[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 6; ++i) get_int(kModelInts[i], v[i]);
  m.model.n_layer = static_cast<int>(v[0]);
  m.model.n_head = static_cast<int>(v[1]);
  m.model.n_embd = static_cast<int>(v[2]);
  m.model.block_size = static_cast<int>(v[3]);
  m.model.vocab_size = static_cast<int>(v[4]);
  m.model.bias = v[5] != 0;
  get_double("model_dropout", m.model.dropout);
  {
    std::string arch = "gpt2";
    get_string("model_arch", arch);
    bool known = false;
    for (ModelArch a : all_model_archs())
      if (arch == name_of(a)) {
        m.model.arch = a;
        known = true;
      }
    if (!known) m.missing.push_back("model_arch (unknown family '" + arch + "')");
    std::int64_t kv = 0, ffn = 0, tie = 1;
    get_int("model_n_kv_head", kv);
    get_int("model_ffn_hidden", ffn);
    get_int("model_tie_embeddings", tie);
    m.model.n_kv_head = static_cast<int>(kv);
    m.model.ffn_hidden = static_cast<int>(ffn);
    m.model.tie_embeddings = tie != 0;
    get_double("model_norm_eps", m.model.norm_eps);
    get_double("model_rope_theta", m.model.rope_theta);
  }
  for (const DoubleField& f : kDoubles) get_double(f.name, m.*f.field);
  get_string("code_version", m.code_version);
  get_string("deck_name", m.deck_name);
  get_string("param_dtype", m.param_dtype);
  if (rd.has(kConfigText)) m.config_text = rd.text(kConfigText);
  else m.missing.push_back("/config");
  return m;
}

void CheckpointMeta::require_complete(const std::string& path) const {
  if (missing.empty()) return;
  std::string more;
  if (missing.size() > 1) more = " (and " + std::to_string(missing.size() - 1) + " more)";
  throw CheckpointError("checkpoint '" + path + "' has no " + (missing.front()[0] == '/' ? "" : "attribute ") +
                        missing.front() + more);
}

Config CheckpointMeta::deck(const std::vector<std::string>& overrides) const {
  Config cfg = parse_deck_text(config_text, deck_name.empty() ? "checkpoint" : deck_name, overrides);
  cfg.model.vocab_size = model.vocab_size;
  return cfg;
}

std::vector<std::string> CheckpointMeta::problems(const CheckpointReader& rd) {
  std::vector<std::string> p;
  for (const char* a : kRequired)
    if (!rd.has_attr(a)) p.push_back(std::string("root attribute '") + a + "' is missing");
  if (rd.kinds().empty()) p.push_back("root attribute 'kinds' names no arrays");
  if (rd.rank_state_columns().empty()) p.push_back("/rank_state is missing or names no columns");
  if (const std::string named = step_name_problem(rd); !named.empty()) p.push_back(named);
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
        p.push_back(std::string("/rank_state cannot be read: ") + e.what());
        break;
      }
      for (const auto& [col, attr] : expect) {
        const auto it = std::find(cols.begin(), cols.end(), col);
        if (it == cols.end() || !rd.has_attr(attr)) continue;
        const std::int64_t have = v[static_cast<std::size_t>(it - cols.begin())];
        if (have != rd.attr_int(attr))
          p.push_back("/rank_state row " + std::to_string(row) + ": " + col + " = " + std::to_string(have) +
                      " but attribute " + attr + " = " + std::to_string(rd.attr_int(attr)));
      }
    }
  }
  for (const char* a : {"step", "consumed_samples", "adam_step", "seed"})
    if (rd.has_attr(a) && rd.attr_int(a) < 0) p.push_back(std::string("attribute ") + a + " is negative");
  if (rd.has_attr("step") && rd.has_attr("adam_step") && rd.attr_int("adam_step") > rd.attr_int("step"))
    p.push_back("adam_step is larger than step");
  auto get = [&](const char* a) { return rd.has_attr(a) ? rd.attr_int(a) : 0; };
  const std::int64_t dp = get("dp"), tp = get("tp"), pp = get("pp"), world = get("world_size");
  const std::int64_t n_shards = static_cast<std::int64_t>(rd.shards().size());
  if (rd.has_attr("world_size") && dp * tp * pp != world)
    p.push_back("layout attributes dp x tp x pp = " + std::to_string(dp) + " x " + std::to_string(tp) + " x " +
                std::to_string(pp) + " do not multiply to world_size = " + std::to_string(world));
  if (rd.has_attr("n_shards") && rd.attr_int("n_shards") != n_shards)
    p.push_back("attribute n_shards = " + std::to_string(rd.attr_int("n_shards")) + " but /index/shards has " +
                std::to_string(n_shards) + " rows");
  if (rd.has_attr("world_size") && world != n_shards)
    p.push_back("world_size = " + std::to_string(world) + " ranks wrote the file but /index/shards has " +
                std::to_string(n_shards) + " rows");
  return p;
}

bool CheckpointMeta::has_model() const {
  for (const char* a : kModelInts)
    if (std::find(missing.begin(), missing.end(), std::string(a)) != missing.end()) return false;
  return true;
}

bool CheckpointMeta::has(const std::string& field) const {
  return std::find(missing.begin(), missing.end(), field) == missing.end();
}

std::vector<std::string> CheckpointMeta::deck_problems(const CheckpointReader& rd) {
  std::vector<std::string> p;
  std::string text;
  try {
    text = rd.text(kConfigText);
  } catch (const std::exception& e) {
    p.push_back(std::string("/config cannot be read: ") + e.what());
    return p;
  }
  try {
    const Config cfg = parse_deck_text(text, rd.has_attr("deck_name") ? rd.attr_string("deck_name") : "checkpoint");
    auto compare = [&](const char* key, std::int64_t deck, const char* attr) {
      if (rd.has_attr(attr) && deck != rd.attr_int(attr))
        p.push_back(std::string("/config says ") + key + " = " + std::to_string(deck) + " but attribute " + attr +
                    " = " + std::to_string(rd.attr_int(attr)));
    };
    compare("[model] n_layer", cfg.model.n_layer, "model_n_layer");
    compare("[model] n_head", cfg.model.n_head, "model_n_head");
    compare("[model] n_embd", cfg.model.n_embd, "model_n_embd");
    compare("[model] block_size", cfg.model.block_size, "model_block_size");
    compare("[model] bias", cfg.model.bias ? 1 : 0, "model_bias");
    if (rd.has_attr("model_arch") && rd.attr_string("model_arch") != name_of(cfg.model.arch))
      p.push_back(std::string("/config says [model] arch = ") + name_of(cfg.model.arch) + " but attribute model_arch = " +
                  rd.attr_string("model_arch"));
    if (cfg.model.arch == ModelArch::llama) {
      compare("[model] n_kv_head", cfg.model.kv_heads(), "model_n_kv_head");
      compare("[model] ffn_hidden", cfg.model.ffn_width(), "model_ffn_hidden");
    }
    if (cfg.model.vocab_size != 0) compare("[model] vocab_size", cfg.model.vocab_size, "model_vocab_size");
    if (cfg.parallel.dp != 0) compare("[parallel] dp", cfg.parallel.dp, "dp");
    compare("[parallel] tp", cfg.parallel.tp, "tp");
    compare("[parallel] pp", cfg.parallel.pp, "pp");
  } catch (const ConfigError& e) {
    p.push_back(std::string("/config does not parse as an input deck: ") + e.what());
  }
  return p;
}

std::optional<double> peek_val_loss(const std::string& path) { return peek_checkpoint_attr_double(path, "val_loss"); }

std::string step_name_problem(const CheckpointReader& rd) {
  const auto named = step_of_name(std::filesystem::path(rd.path()).filename().string());
  if (!named) return "";
  if (!rd.has_attr("step")) return "the file name says step " + std::to_string(*named) + " but attribute step is missing";
  if (rd.attr_int("step") == *named) return "";
  return "the file name says step " + std::to_string(*named) + " but attribute step = " +
         std::to_string(rd.attr_int("step"));
}

}  // namespace trident
