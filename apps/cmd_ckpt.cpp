// apps/cmd_ckpt.cpp: `trident ckpt ls|verify|diff|reshard|export`, checkpoint inspection and export.
// Thin driver: parses the subcommand's options, calls the checkpoint layer (checkpoint/tools.hpp,
// verify.hpp, export.hpp, reshard.hpp; collective over the world) with the GPT model's schema
// (train/model_schema.hpp), prints from rank 0. Exit status:
// 0 fine, 1 a problem found (or a runtime error), 2 usage.
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/output_file.hpp"
#include "parallel/agree.hpp"
#include "checkpoint/export.hpp"
#include "checkpoint/metadata.hpp"
#include "train/hf_import.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/tools.hpp"
#include "checkpoint/verify.hpp"
#include "train/model_schema.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

namespace trident::app {

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

const char* kCkptUsage = R"(usage: trident ckpt <subcommand> [options]

Inspects and exports checkpoints (docs/checkpoint-format.md). Every subcommand runs on any
number of MPI ranks (the work is spread over them) and prints from rank 0.

subcommands:
  ls PATH              list the checkpoints of a run directory, checkpoint directory or file
  show PATH [TENSOR]   list tensors (name, shape, tp split); print or export (--npy) one
  verify FILE          check format, index, metadata and every shard dataset's checksum
  diff A B             per-tensor max |a-b| and max relative difference of two checkpoints
  reshard --output OUT [--dp N] [--tp N] [--pp N] [--zero-stage S] FILE
                       rewrite a checkpoint for another dp x tp x pp layout / ZeRO stage
                       (run it on dp * tp * pp ranks)
  export --format hf --output DIR [--force] FILE
                       write the parameters as a Hugging Face model (safetensors + config.json:
                       GPT2LMHeadModel or LlamaForCausalLM, as the checkpoint's family)
  import --format hf --output OUT DIR
                       a Hugging Face GPT-2 or Llama model directory as a checkpoint at step 0
                       (then `[train] init_from = OUT` fine-tunes it)

`trident ckpt <subcommand> --help` documents its options.
Exit status: 0 fine, 1 a problem or difference found (or a runtime error), 2 bad usage.
)";

/// Parses `args` with `desc` and one or more positional arguments named `positional`.

/// Throws ConfigError "ckpt <sub>: a path is empty" when a path argument is "" (an unset shell
/// variable, say), before anything is opened.
void require_nonempty_paths(const std::vector<std::string>& paths, const std::string& sub) {
  for (const std::string& p : paths)
    if (p.empty()) throw ConfigError("ckpt " + sub + ": a path is empty");
}

/// Throws ConfigError "--kind 'K' is not param, exp_avg or exp_avg_sq" unless `kind` is one of
/// checkpoint_kinds() (the array kinds a checkpoint holds).
void require_array_kind(const std::string& kind) {
  const std::vector<std::string>& kinds = checkpoint_kinds();
  if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) return;
  std::string names;
  for (size_t i = 0; i < kinds.size(); ++i) names += (i == 0 ? "" : i + 1 == kinds.size() ? " or " : ", ") + kinds[i];
  throw ConfigError("--kind '" + kind + "' is not " + names);
}

void print0(Runtime& rt, const std::string& s) {
  if (rt.world_rank() != 0) return;
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

int ckpt_ls(Runtime& rt, const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  po::options_description desc(
      "usage: trident ckpt ls [--verify] PATH\n\n"
      "Lists the checkpoints of PATH (a run directory, its checkpoints/ directory, or one checkpoint\n"
      "file), one line each: step, file, size in MiB, layout (dp x tp x pp, ZeRO stage), dtype,\n"
      "creation time and status. 'ok' means the file opens, its index covers every tensor's tp\n"
      "partitions exactly once and every shard dataset exists with the elements the index needs;\n"
      "'incomplete (uncommitted)' marks a *.tmp leftover of an interrupted save (never read by a\n"
      "resume). The checkpoint `latest` names is marked '<- latest'. Exits 1 when a committed\n"
      "checkpoint is not ok.\n\noptions");
  desc.add_options()("help,h", "this text")("verify", "also recompute every shard dataset's checksum (reads all data)")(
      "path", po::value<std::vector<std::string>>(&paths), "run directory, checkpoint directory or checkpoint file");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "path", -1, vm, "ckpt ls")) return 0;
  if (paths.size() != 1) throw ConfigError("ckpt ls takes one PATH (try `trident ckpt ls --help`)");
  require_nonempty_paths(paths, "ls");
  const CheckpointListing l = list_checkpoints(paths[0], rt.world(), vm.count("verify") > 0);
  print0(rt, format_listing(l));
  return l.ok() ? 0 : 1;
}

int ckpt_show(Runtime& rt, const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::string kind, npy;
  po::options_description desc(
      "usage: trident ckpt show PATH [TENSOR] [--kind K] [--all] [--npy FILE [--force]]\n\n"
      "Without TENSOR: lists every tensor of checkpoint PATH (a file, or a run or checkpoint\n"
      "directory's latest) with its global shape, tensor-parallel split and element count.\n"
      "With TENSOR (a name as listed): its statistics (min, max, mean, std, NaN and inf counts) and\n"
      "values -- the first and last rows, every value with --all -- joined from whatever layout\n"
      "wrote the file; --npy FILE writes it for numpy (numpy.load): a new file (--force replaces\n"
      "one; never the checkpoint read, an HDF5 file, a run's checkpoint file, a device or a\n"
      "directory). Reads without verifying the\n"
      "checksums (`trident ckpt verify` does that).\n\noptions");
  desc.add_options()("help,h", "this text")(
      "kind", po::value<std::string>(&kind)->default_value("param"),
      "array to show: param (fp32 master weights), exp_avg or exp_avg_sq (AdamW moments)")(
      "all", "print every value of TENSOR")("npy", po::value<std::string>(&npy), "write TENSOR to this .npy file")(
      "force", "with --npy: replace an existing file")(
      "path", po::value<std::vector<std::string>>(&paths), "checkpoint, then optionally a tensor name");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "path", -1, vm, "ckpt show")) return 0;
  if (paths.empty() || paths.size() > 2)
    throw ConfigError("ckpt show takes PATH and optionally one TENSOR (try `trident ckpt show --help`)");
  if (paths[0].empty()) throw ConfigError("ckpt show: the checkpoint path is empty");
  if (paths.size() == 2 && paths[1].empty())
    throw ConfigError("ckpt show: the tensor name is empty (leave it out to list every tensor)");
  if (vm.count("npy") > 0 && npy.empty()) throw ConfigError("--npy: the file name is empty");
  if (!npy.empty() && paths.size() < 2) throw ConfigError("--npy needs a TENSOR to write");
  if (npy.empty() && vm.count("force") > 0) throw ConfigError("--force only applies to --npy");
  if (paths.size() < 2 && !vm["kind"].defaulted()) throw ConfigError("--kind needs a TENSOR to show");
  require_array_kind(kind);
  // --npy: checked before the tensor is read (it may be large), by rank 0 alone inside
  // run_agreed (nodes may see different local files: all ranks must take the same exit). Never the
  // checkpoint read, an existing file only with --force (a typo must not replace a deck), never a
  // device, a run's checkpoint or an HDF5 file.
  const bool force = vm.count("force") > 0;
  if (!npy.empty())
    run_agreed(rt.world(), "", [&] {
      if (rt.world_rank() != 0) return;
      OutputRules rules;
      rules.force = force;
      rules.inputs = {paths[0]};
      try {
        rules.inputs.push_back(resolve_checkpoint_path(paths[0]));
      } catch (const Error&) {
        // not a checkpoint: show_checkpoint says so below
      }
      check_output_file(npy, "--npy", rules);
    });
  const ShowResult r = show_checkpoint(paths[0], rt.world(), paths.size() > 1 ? paths[1] : "", kind);
  if (!npy.empty()) {
    run_agreed(rt.world(), "ckpt show --npy", [&] {
      if (rt.world_rank() != 0) return;
      for (const TensorInfo& t : r.tensors)
        if (t.name == r.tensor) write_npy(npy, t.shape, r.values, r.dtype, force);
      // What an earlier write killed by a signal left beside it (a full .npy's worth at most).
      warn_leftover_temporaries(leftover_temporaries(npy), "--npy write");
    });
    print0(rt, log::format("wrote %s: %s (%s), %zu values\n", npy.c_str(), r.tensor.c_str(), r.kind.c_str(),
                           r.values.size()));
    return 0;
  }
  print0(rt, format_show(r, vm.count("all") > 0));
  return 0;
}

int ckpt_verify(Runtime& rt, const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  po::options_description desc(
      "usage: trident ckpt verify FILE\n\n"
      "Checks one checkpoint completely: format and version; the index (segments inside their\n"
      "shards and tensors, every tp partition of every tensor covered exactly once, no shard element\n"
      "used twice); the restart metadata (required attributes, layout, /config parses as a deck\n"
      "and matches the model fingerprint, the fingerprint gives exactly the indexed tensors and\n"
      "shapes, tokenizer vocabulary); and the XXH64 checksum, length and presence of every shard\n"
      "dataset (the reading is spread over the ranks). FILE may be a run or checkpoint directory\n"
      "(its latest checkpoint). Prints each problem; exits 1 if there is any.\n\noptions");
  desc.add_options()("help,h", "this text")("file", po::value<std::vector<std::string>>(&paths), "checkpoint file");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "file", -1, vm, "ckpt verify")) return 0;
  if (paths.size() != 1) throw ConfigError("ckpt verify takes one FILE (try `trident ckpt verify --help`)");
  require_nonempty_paths(paths, "verify");
  const VerifyResult r = verify_checkpoint(paths[0], rt.world(), model_schema());
  std::string out;
  for (const auto& p : r.problems) out += "problem: " + p + "\n";
  out += r.problems.empty() ? "ok: " + r.file + " is intact\n"
                            : "FAILED: " + r.file + " has the problems listed above\n";
  print0(rt, out);
  return r.problems.empty() ? 0 : 1;
}

int ckpt_diff(Runtime& rt, const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::string kinds;
  DiffOptions opt;
  po::options_description desc(
      "usage: trident ckpt diff [--kind K] [--tolerance T] [--all] A B\n\n"
      "Compares two checkpoints tensor by tensor (through their indexes, so their dp layouts may\n"
      "differ): for each array, max |a-b| and the max relative difference max |a-b| / max |b|;\n"
      "also the attributes step, consumed_samples and adam_step, the dtype, and tensors or kinds\n"
      "present on one side only. A NaN on one side only counts as an infinite difference (shown as\n"
      "inf). Like diff(1): exits 0 when identical, 1 when anything differs.\n\n"
      "options");
  desc.add_options()("help,h", "this text")(
      "kind", po::value<std::string>(&kinds)->default_value("all"),
      "arrays to compare: all, or a comma-separated list of param, exp_avg, exp_avg_sq")(
      "tolerance", po::value<double>(&opt.tolerance)->default_value(0.0),
      "an array whose max |a-b| is at most this counts as equal (attributes must still match)")(
      "all", "list every compared array, not only those that differ")(
      "files", po::value<std::vector<std::string>>(&paths), "the two checkpoints A and B");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "files", -1, vm, "ckpt diff")) return 0;
  if (paths.size() != 2) throw ConfigError("ckpt diff takes two checkpoints A B (try `trident ckpt diff --help`)");
  require_nonempty_paths(paths, "diff");
  if (!(opt.tolerance >= 0)) throw ConfigError("--tolerance must be >= 0");
  if (kinds != "all") {
    opt.kinds.clear();
    std::stringstream ss(kinds);
    std::string k;
    while (std::getline(ss, k, ',')) {
      require_array_kind(k);
      if (std::find(opt.kinds.begin(), opt.kinds.end(), k) == opt.kinds.end()) opt.kinds.push_back(k);
    }
    if (opt.kinds.empty()) throw ConfigError("--kind names no array kind");
  }
  const CheckpointDiff d = diff_checkpoints(paths[0], paths[1], rt.world(), opt);
  print0(rt, format_diff(d, vm.count("all") > 0));
  return d.identical() ? 0 : 1;
}

int ckpt_export(Runtime& rt, const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::string format;
  SafetensorsExportOptions opt;
  po::options_description desc(
      "usage: trident ckpt export --format hf --output DIR [--shard-size-mb N] [--force]\n"
      "                           [--dtype float32|bfloat16] FILE\n\n"
      "Writes the parameters of checkpoint FILE (or a run/checkpoint directory's latest) as a\n"
      "Hugging Face model: DIR/model-0000k-of-0000n.safetensors, DIR/model.safetensors.index.json,\n"
      "DIR/config.json and, for a SentencePiece tokenizer, DIR/tokenizer.model (Trident's char/byte\n"
      "vocabularies go in config.json's trident_vocab). --format safetensors is the same.\n"
      "gpt2 family (model_type gpt2): names follow HF's GPT2Model without the 'transformer.' prefix\n"
      "(wte.weight, h.0.attn.c_attn.weight, ln_f.weight, ...); the weights of attn.c_attn,\n"
      "attn.c_proj, mlp.c_fc and mlp.c_proj are written transposed to (in, out), HF's Conv1D\n"
      "layout; a model without biases has none (config.json: \"bias\": false); the LM head is tied\n"
      "to wte and not written.\n"
      "llama family (model_type llama): LlamaForCausalLM's names (model.embed_tokens.weight,\n"
      "model.layers.0.self_attn.q_proj.weight, ..., lm_head.weight when untied), nn.Linear's\n"
      "(out, in) layout, q_proj/k_proj in HF's rotate_half order (no permutation).\n"
      "Any layout can be exported (tp partitions are joined).\n"
      "DIR must be new or empty; --force writes over an earlier export there (its files of the\n"
      "same names replaced, its other model-NNNNN-of-MMMMM shards removed); a run's or checkpoints'\n"
      "directory is refused.\n"
      "FILE is verified first (every checksum); a damaged checkpoint is not exported.\n"
      "Rank 0 does all the work.\n\noptions");
  desc.add_options()("help,h", "this text")("format", po::value<std::string>(&format),
                                            "output format: hf (= safetensors) (required)")(
      "output,o", po::value<std::string>(&opt.output_dir), "output directory, created if missing (required)")(
      "shard-size-mb", po::value<double>(&opt.shard_size_mb)->default_value(5000.0),
      "most MiB of tensor data per safetensors file (a larger tensor gets a file of its own)")(
      "dtype", po::value<std::string>(&opt.dtype)->default_value("float32"),
      "float32 (bitwise the checkpoint's float32 values) or bfloat16 (rounded to nearest even)")(
      "force", "write into a non-empty output directory (over an earlier export)")(
      "file", po::value<std::vector<std::string>>(&paths), "checkpoint file");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "file", -1, vm, "ckpt export")) return 0;
  opt.force = vm.count("force") > 0;
  if (paths.size() != 1) throw ConfigError("ckpt export takes one FILE (try `trident ckpt export --help`)");
  require_nonempty_paths(paths, "export");
  if (format.empty()) throw ConfigError("no --format given; use --format hf");
  if (format != "safetensors" && format != "hf")
    throw ConfigError("--format '" + format + "' is not supported; use --format hf");
  if (opt.output_dir.empty()) throw ConfigError("no --output directory given");
  const SafetensorsExportResult r = export_safetensors(paths[0], rt.world(), opt, model_schema());
  std::string out = log::format("exported %lld tensors (%.2f MiB of %s) of step %lld from %s:\n",
                                static_cast<long long>(r.n_tensors), static_cast<double>(r.total_size) / (1024.0 * 1024.0),
                                opt.dtype.c_str(), static_cast<long long>(r.step), r.checkpoint.c_str());
  for (const auto& f : r.files) out += "  " + f + "\n";
  print0(rt, out);
  return 0;
}

int ckpt_import(Runtime& rt, const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::string format;
  HfImportOptions opt;
  po::options_description desc(
      "usage: trident ckpt import --format hf --output OUT [--tokenizer KIND] [--block-size N] [--force] DIR\n\n"
      "Reads the Hugging Face model directory DIR (config.json; model.safetensors, or sharded\n"
      "model-*.safetensors with model.safetensors.index.json; F32, BF16, F16 or F64 values) and\n"
      "writes it as a Trident checkpoint at step 0 with a fresh optimizer: model_type gpt2\n"
      "(GPT2LMHeadModel: Conv1D weights transposed back; biases unless config.json says \"bias\":\n"
      "false) or llama (LlamaForCausalLM: no rope scaling, silu, no biases). Names, layouts and\n"
      "shapes are checked against config.json: a missing, extra or misshapen tensor is an error.\n"
      "An export followed by an import gives bitwise the same weights. Start a fine-tuning run\n"
      "from it with `[train] init_from = OUT` (its token file must use the same tokenizer);\n"
      "`trident eval --data FILE` and `trident sample` read it as it is. OUT ending in .h5 is a\n"
      "new file (--force replaces one, never a run's step_*.h5 or latest); anything else a new\n"
      "checkpoint directory (step_00000000.h5 and `latest`): a directory holding checkpoints or a\n"
      "run is refused.\n"
      "Rank 0 does the work.\n\noptions");
  desc.add_options()("help,h", "this text")("format", po::value<std::string>(&format), "input format: hf (required)")(
      "output,o", po::value<std::string>(&opt.output), "checkpoint file (.h5) or directory to write (required)")(
      "tokenizer", po::value<std::string>(&opt.tokenizer),
      "tokenizer kind of the model's token ids (default: config.json's trident_tokenizer, else gpt2 for a GPT-2 "
      "with GPT-2's vocabulary)")(
      "block-size", po::value<int>(&opt.block_size)->default_value(0),
      "context length of the checkpoint's model (llama only; default config.json's max_position_embeddings)")(
      "force", "replace an existing output file")(
      "dir", po::value<std::vector<std::string>>(&paths), "Hugging Face model directory");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "dir", -1, vm, "ckpt import")) return 0;
  if (paths.size() != 1) throw ConfigError("ckpt import takes one DIR (try `trident ckpt import --help`)");
  require_nonempty_paths(paths, "import");
  if (format.empty()) throw ConfigError("no --format given; use --format hf");
  if (format != "hf" && format != "safetensors") throw ConfigError("--format '" + format + "' is not supported; use --format hf");
  if (opt.output.empty()) throw ConfigError("no --output given");
  if (opt.block_size < 0) throw ConfigError("--block-size must be positive");
  opt.dir = paths[0];
  opt.force = vm.count("force") > 0;
  const HfImportResult r = import_hf(opt, rt.world());
  print0(rt, log::format("imported %s model from %s (%lld tensors, %.2fM parameters, %s tokenizer) as %s in %.2f s\n",
                         r.family.c_str(), opt.dir.c_str(), static_cast<long long>(r.n_tensors),
                         static_cast<double>(r.n_parameters) / 1e6, r.tokenizer.c_str(), r.output.c_str(), r.seconds));
  return 0;
}

int ckpt_reshard(Runtime& rt, const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  ReshardOptions opt;
  po::options_description desc(
      "usage: trident ckpt reshard --output OUT [--dp N] [--tp N] [--pp N] [--zero-stage S]\n"
      "                            [--shard-group-size G] [--force] FILE\n"
      "       (on R = dp * tp * pp ranks: mpiexec -n R trident ckpt reshard ...)\n\n"
      "Rewrites checkpoint FILE (or a run/checkpoint directory's latest), written at any layout, as\n"
      "the checkpoint a run at the target layout would write: parameters and AdamW moments copied\n"
      "exactly, step, data position, seeds and tokenizer unchanged, the stored deck's [parallel]\n"
      "replaced. No conversion is needed to resume at another layout (`trident train --resume` reads\n"
      "any layout); this is for users who want a file laid out for a fixed job size. Runs on\n"
      "R = dp * tp * pp ranks, each reading only the pieces it owns. OUT ending in .h5 is a file,\n"
      "written as OUT.tmp and renamed when complete (an existing one replaced only with --force;\n"
      "never a run's step_*.h5 or latest); anything else is a checkpoint directory that\n"
      "receives step_NNNNNNNN.h5 and a `latest` pointer (usable as a run's checkpoints/ directory);\n"
      "it must not hold that step or a later one, nor belong to a run that is training. FILE is\n"
      "verified first (every checksum): a damaged checkpoint is never rewritten as an intact one.\n\n"
      "options");
  desc.add_options()("help,h", "this text")("output,o", po::value<std::string>(&opt.output),
                                            "output file (*.h5) or checkpoint directory (required)")(
      "dp", po::value<int>(&opt.dp)->default_value(0), "data-parallel size; 0: ranks / (tp * pp)")(
      "tp", po::value<int>(&opt.tp)->default_value(0), "tensor-parallel size; 0: the checkpoint's")(
      "pp", po::value<int>(&opt.pp)->default_value(0), "pipeline-parallel size; 0: the checkpoint's")(
      "zero-stage", po::value<int>(&opt.zero_stage)->default_value(-1), "ZeRO stage 0-3; -1: the checkpoint's")(
      "shard-group-size", po::value<int>(&opt.shard_group_size)->default_value(0),
      "HSDP shard group size; 0: dp")("force", "replace an existing output file")(
      "file", po::value<std::vector<std::string>>(&paths), "checkpoint to read");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "file", -1, vm, "ckpt reshard")) return 0;
  if (paths.size() != 1) throw ConfigError("ckpt reshard takes one FILE (try `trident ckpt reshard --help`)");
  require_nonempty_paths(paths, "reshard");
  if (opt.output.empty()) throw ConfigError("no --output given (a file *.h5 or a checkpoint directory)");
  if (opt.dp < 0 || opt.tp < 0 || opt.pp < 0 || opt.shard_group_size < 0)
    throw ConfigError("--dp, --tp, --pp and --shard-group-size must be >= 0 (0: default)");
  if (opt.zero_stage < -1 || opt.zero_stage > 3) throw ConfigError("--zero-stage must be 0, 1, 2 or 3");
  opt.force = vm.count("force") > 0;
  const ReshardResult r = reshard_checkpoint(paths[0], opt, rt.world(), model_schema(), model_state_factory());
  print0(rt, log::format("resharded step %lld from %s (%s) to %s (%s): %.2f MiB in %.2f s\n",
                         static_cast<long long>(r.step), r.input.c_str(), r.from_layout.c_str(), r.output.c_str(),
                         r.to_layout.c_str(), static_cast<double>(r.bytes) / (1024.0 * 1024.0), r.seconds));
  return 0;
}

}  // namespace

int cmd_ckpt(Runtime& rt, const std::vector<std::string>& args) {
  if (args.empty()) {
    if (rt.world_rank() == 0) std::fputs(kCkptUsage, stderr);
    return 2;
  }
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "-h" || sub == "--help" || sub == "help") {
    print0(rt, kCkptUsage);
    return 0;
  }
  if (sub == "ls") return ckpt_ls(rt, rest);
  if (sub == "show") return ckpt_show(rt, rest);
  if (sub == "verify") return ckpt_verify(rt, rest);
  if (sub == "diff") return ckpt_diff(rt, rest);
  if (sub == "export") return ckpt_export(rt, rest);
  if (sub == "import") return ckpt_import(rt, rest);
  if (sub == "reshard") return ckpt_reshard(rt, rest);
  throw ConfigError("unknown ckpt subcommand '" + sub + "' (try `trident ckpt --help`)");
}

}  // namespace trident::app
