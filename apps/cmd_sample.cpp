// apps/cmd_sample.cpp: `trident sample`.
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "data/tokenizer.hpp"
#include "model/generate.hpp"
#include "train/checkpoint_model.hpp"

#include <boost/program_options.hpp>

#include <charconv>
#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>

namespace trident::app {

namespace po = boost::program_options;

int cmd_sample(Runtime& rt, const std::vector<std::string>& args) {
  std::string checkpoint, prompt, prompt_ids;
  SampleOptions opt;
  std::int64_t seed = 1337;
  po::options_description desc(
      "usage: trident sample --checkpoint PATH [--prompt TEXT | --prompt-ids IDS] [--tokens N] [--temperature T]\n"
      "                      [--top-k K] [--seed S]\n\n"
      "Generates text from a trained model. PATH is a checkpoint file, a checkpoint directory or a\n"
      "run directory (its latest checkpoint is used). Prints the prompt followed by the new text.\n"
      "Exit status: 0 sampled, 1 a damaged or missing checkpoint or an I/O error (also standard output\n"
      "that cannot be written), 2 bad usage.\n\noptions");
  desc.add_options()("help,h", "this text")("checkpoint", po::value<std::string>(&checkpoint),
                                            "checkpoint file, or a run / checkpoints directory")(
      "prompt", po::value<std::string>(&prompt)->default_value("\n", "newline"), "text to continue")(
      "prompt-ids", po::value<std::string>(&prompt_ids),
      "comma-separated token ids to continue instead of --prompt (for gpt2-tokenised models)")(
      "tokens", po::value<int>(&opt.max_new_tokens)->default_value(200), "number of tokens to generate")(
      "temperature", po::value<double>(&opt.temperature)->default_value(0.8, "0.8"),
      "softmax temperature; 0 = always the most likely token")(
      "top-k", po::value<int>(&opt.top_k)->default_value(200), "sample among the k most likely tokens; 0 = all")(
      "seed", po::value<std::int64_t>(&seed)->default_value(1337), "seed of the draws (same seed, same text)");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "", 0, vm, "sample")) return 0;
  if (checkpoint.empty()) throw ConfigError("no --checkpoint given (try `trident sample --help`)");
  if (vm.count("prompt-ids") > 0 && prompt_ids.empty()) throw ConfigError("--prompt-ids: the list is empty");
  if (vm.count("prompt-ids") > 0 && !vm["prompt"].defaulted())
    throw ConfigError("--prompt and --prompt-ids both given: the prompt is text or token ids, not both");
  auto at_least_zero = [](const char* option, bool ok, const std::string& value) {
    if (!ok) throw ConfigError(std::string(option) + " " + value + ": must be " +
                               (std::string(option) == "--temperature" ? "a finite number " : "") + ">= 0");
  };
  at_least_zero("--tokens", opt.max_new_tokens >= 0, std::to_string(opt.max_new_tokens));
  at_least_zero("--top-k", opt.top_k >= 0, std::to_string(opt.top_k));
  at_least_zero("--temperature", opt.temperature >= 0 && std::isfinite(opt.temperature), log::format("%g", opt.temperature));
  at_least_zero("--seed", seed >= 0, std::to_string(seed));
  opt.seed = static_cast<std::uint64_t>(seed);

  CheckpointModel cm = load_checkpoint_model(checkpoint, rt.world());
  const ModelConfig& m = cm.cfg.model;
  Tokenizer tok(cm.tokenizer, cm.vocab, m.vocab_size, cm.tokenizer_model);
  std::vector<std::int32_t> ids;
  if (!prompt_ids.empty()) {
    std::stringstream ss(prompt_ids);
    std::string item;
    while (std::getline(ss, item, ',')) {
      long v = -1;
      const auto res = std::from_chars(item.data(), item.data() + item.size(), v);
      if (item.empty() || res.ec != std::errc() || res.ptr != item.data() + item.size())
        throw ConfigError("--prompt-ids: '" + item + "' is not a token id (expected comma-separated integers)");
      if (v < 0 || v >= m.vocab_size) throw ConfigError("--prompt-ids: id " + item + " is outside the vocabulary");
      ids.push_back(static_cast<std::int32_t>(v));
    }
  } else {
    try {
      ids = tok.encode(prompt);
    } catch (const Error& e) {
      std::string why = e.what();
      if (why.find("invalid UTF-8") != std::string::npos) why = "the prompt is not valid UTF-8";
      throw ConfigError("--prompt: " + why);
    }
  }
  if (ids.empty()) throw ConfigError("the prompt is empty");
  for (std::int32_t id : ids)
    if (id < 0 || id >= m.vocab_size)
      throw ConfigError("--prompt encodes to token id " + std::to_string(id) + ", outside the model's vocabulary of " +
                        std::to_string(m.vocab_size) + ": the checkpoint's " + cm.tokenizer +
                        " tokenizer does not fit its model (see `trident ckpt import --tokenizer`)");
  if (rt.world_rank() != 0) return 0;  // generation is serial; other ranks only helped open the file
  // On stderr, so that stdout holds the sample alone.
  std::fprintf(stderr, "sampling from %s (step %lld, %s tokenizer, temperature %g, top-k %d, seed %llu)\n",
               cm.path.c_str(), static_cast<long long>(cm.step), cm.tokenizer.c_str(), opt.temperature, opt.top_k,
               static_cast<unsigned long long>(opt.seed));
  const ParamLayout layout = ParamLayout::make(m);
  // Activations for the longest window this sample needs, not the model's whole context (an
  // imported Llama may have 131072 positions).
  ModelConfig mg = m;
  mg.block_size = static_cast<int>(std::min<std::int64_t>(
      m.block_size, static_cast<std::int64_t>(ids.size()) + std::max(opt.max_new_tokens, 1)));
  Gpt<float> gpt(m, layout, 1, mg.block_size);
  FlatProvider<float> params(layout, cm.store->params().data(), cm.store->grads().data());
  // The prompt, then each token as it is drawn: long samples show progress. A write that fails
  // (a full disk, a closed pipe or stdout) stops the generation at once, named, exit 1.
  auto emit = [](const std::string& piece) {
    errno = 0;
    if (std::fputs(piece.c_str(), stdout) < 0 || std::fflush(stdout) != 0 || std::ferror(stdout))
      throw IoError(std::string("cannot write the sample to standard output: ") +
                    (errno != 0 ? std::strerror(errno) : "write error"));
  };
  // Rank 0 alone is here (the others returned above): an error ends it with exit 1, no abort.
  try {
    if (stdout_closed_at_start())
      throw IoError("standard output is closed (>&-): nothing to write the sample to; redirect it to a file");
    emit(tok.decode(ids));
    DecodeStream text(tok);
    generate(gpt, params, mg, ids, opt, [&text, &emit](std::int32_t id) { emit(text.push(id)); });
    emit(text.finish() + "\n");
  } catch (const IoError& e) {
    std::fprintf(stderr, "trident sample: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace trident::app
