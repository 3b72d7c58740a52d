// apps/cmd_eval.cpp: `trident eval`.
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "train/eval_run.hpp"

#include <boost/program_options.hpp>

#include <cmath>
#include <iostream>

namespace trident::app {

namespace po = boost::program_options;

int cmd_eval(Runtime& rt, const std::vector<std::string>& args) {
  EvalRunOptions opt;
  po::options_description desc(
      "usage: trident eval --checkpoint PATH [--data FILE] [--split val|train] [--tp N] [--pp N] [--micro-batch N]\n"
      "                    [--compute-dtype float|bf16] [--attention gemm|fused] [--host-gemm auto|openblas|onednn|shape]\n\n"
      "Prints the mean loss (nats per token) and perplexity of a checkpoint's model on a whole split\n"
      "of a token file: every window of block_size + 1 tokens starting every block_size tokens, as a\n"
      "training run's whole-split evaluation ([train] eval_iters = 0) does, so on the layout that\n"
      "trained it the loss equals the run's val loss bitwise. Runs on any number of ranks and any\n"
      "layout, whatever layout wrote the checkpoint (dp = ranks / (tp x pp); the deck's ZeRO stage,\n"
      "precision and kernels are kept unless the options below change them). PATH is a checkpoint file, or a run or checkpoints directory (its\n"
      "latest checkpoint). The token file must use the checkpoint's tokenizer.\n"
      "Exit status: 0 evaluated, 1 a damaged or missing checkpoint or an I/O error, 2 bad usage.\n\noptions");
  desc.add_options()("help,h", "this text")("checkpoint", po::value<std::string>(&opt.checkpoint),
                                            "checkpoint file, or a run / checkpoints directory (required)")(
      "data", po::value<std::string>(&opt.data), "token file (trident prep); default: the [data] path of the checkpoint's deck")(
      "split", po::value<std::string>(&opt.split)->default_value("val"), "split of the token file: val or train")(
      "tp", po::value<int>(&opt.tp)->default_value(1), "tensor-parallel size of the evaluation")(
      "pp", po::value<int>(&opt.pp)->default_value(1), "pipeline-parallel size of the evaluation")(
      "micro-batch", po::value<std::int64_t>(&opt.micro_batch)->default_value(8),
      "sequences per forward pass on one data-parallel rank (memory, not the result)")(
      "compute-dtype", po::value<std::string>(&opt.compute_dtype),
      "GEMM inputs: float or bf16; default: the checkpoint's [train] compute_dtype (float evaluates a "
      "bf16-trained checkpoint on a CPU without bf16 dot products; the loss then moves in its last digits)")(
      "attention", po::value<std::string>(&opt.attention),
      "attention kernel: gemm or fused; default: the checkpoint's [model] attention (fused needs less memory)")(
      "host-gemm", po::value<std::string>(&opt.host_gemm),
      "library of fp32 GEMMs on the host: auto, openblas, onednn or shape (per GEMM shape); default: the checkpoint's [train] host_gemm");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "", 0, vm, "eval")) return 0;
  if (opt.checkpoint.empty()) throw ConfigError("no --checkpoint given (try `trident eval --help`)");
  if (vm.count("data") && opt.data.empty())
    throw ConfigError("--data: the file name is empty (leave --data out to use the checkpoint's [data] path)");
  const EvalRunResult r = evaluate_checkpoint(opt, rt.world());
  log::info("%s loss %.9g | perplexity %.4g | %lld tokens | step %lld of %s | data %s | %s | %.2f s", opt.split.c_str(),
            r.loss, std::exp(r.loss), static_cast<long long>(r.tokens), static_cast<long long>(r.step), r.path.c_str(),
            r.data.c_str(), r.layout.c_str(), r.seconds);
  return 0;
}

}  // namespace trident::app
