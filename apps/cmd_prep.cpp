// apps/cmd_prep.cpp: `trident prep`.
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "data/prep.hpp"
#include "data/tokenizer.hpp"
#include "io/token_file.hpp"
#include "parallel/agree.hpp"

#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>

namespace trident::app {

namespace po = boost::program_options;

namespace {

/// `trident prep --verify`: each file read whole and checked; one line per file, "ok:" or "BAD:".
/// Returns the number of files that are not intact. Local (rank 0).
int verify_token_files(const std::vector<std::string>& paths) {
  int bad = 0;
  for (const std::string& path : paths) {
    try {
      const TokenFileReader rd(path);
      const TokenFileInfo& info = rd.info();
      Progress progress("prep --verify " + path, rd.size("train") + rd.size("val"), ProgressUnit::tokens);
      const TokenFileReader::Contents c = rd.verify([&progress](std::int64_t n) { progress.update(n); });
      progress.finish();
      std::string problem = token_file_tokenizer_problem(info);
      if (!problem.empty())
        problem = "its tokenizer is not what prep writes: " + problem;
      else if (c.tokens > 0 && (c.min_id < 0 || c.max_id >= info.vocab_size))
        problem = "token ids " + std::to_string(c.min_id) + ".." + std::to_string(c.max_id) + " leave the vocabulary of " +
                  std::to_string(info.vocab_size);
      else if (!info.content_hash.empty() && c.hash != info.content_hash)
        problem = "its tokens hash to " + c.hash + ", but prep recorded " + info.content_hash +
                  ": they changed since the file was written (a damaged copy or an edit)";
      if (!problem.empty()) {
        ++bad;
        log::info("BAD: %s: %s; write it again with `trident prep`", path.c_str(), problem.c_str());
      } else if (info.content_hash.empty()) {
        log::info("ok: %s: %lld tokens, ids within the %s vocabulary of %lld; no content hash recorded (a file of an "
                  "older prep): the tokens themselves are not verified",
                  path.c_str(), static_cast<long long>(c.tokens), info.tokenizer.c_str(),
                  static_cast<long long>(info.vocab_size));
      } else {
        log::info("ok: %s: %lld tokens (%lld train + %lld val), ids within the %s vocabulary of %lld, content hash %s "
                  "as recorded",
                  path.c_str(), static_cast<long long>(c.tokens), static_cast<long long>(rd.size("train")),
                  static_cast<long long>(rd.size("val")), info.tokenizer.c_str(),
                  static_cast<long long>(info.vocab_size), c.hash.c_str());
      }
    } catch (const Error& e) {
      ++bad;
      log::info("BAD: %s: %s", path.c_str(), e.what());
    }
  }
  return bad;
}

}  // namespace

int cmd_prep(Runtime& rt, const std::vector<std::string>& args) {
  PrepOptions opt;
  const std::string vocab_size_help = "bpe only, and required there: the number of tokens to learn (" +
                                      std::to_string(Tokenizer::kBpeMinVocab) + " .. " +
                                      std::to_string(Tokenizer::kBpeMaxVocab) +
                                      ", at most what the text supports; e.g. 4096 for a few MB of text)";
  po::options_description desc(
      "usage: trident prep [--tokenizer char|byte|bpe [--vocab-size N]] [--binary] [--val-fraction F] [--force] --output FILE.h5 INPUT...\n"
      "       trident prep --verify TOKEN_FILE...\n\n"
      "Tokenises text files (or reads llm.c token shards) into an HDF5 token file: the first 90% of\n"
      "the tokens for training, the rest for validation. llm.c shards: GPT-2 (magic 20240520,\n"
      "version 1, uint16 tokens) and llama-3 (magic 20240801, version 7, uint32 tokens); a shard\n"
      "whose name has the word val (NAME_val.bin, NAME_val_000000.bin; also valid, validation) is validation, the others\n"
      "training; each input's format, size and split are printed. Binary files (other llm.c files,\n"
      "HDF5, archives, NUL bytes) are refused by name, not tokenised as text. A bpe model is trained\n"
      "on the text and saved in the file; checkpoints carry it on, and `trident sample` encodes and\n"
      "decodes with it. Runs on rank 0 only.\n\n"
      "--verify reads every token of each token file and checks them against what prep recorded: the\n"
      "content hash (XXH64 of the tokens; a flipped bit or an edit since prep shows) and the\n"
      "vocabulary (every id below vocab_size; the tokenizer's vocabulary, model and vocab_size agree).\nExit 0 when every file is intact, 1 when one is not.\n\noptions");
  desc.add_options()("help,h", "this text")(
      "tokenizer", po::value<std::string>(&opt.tokenizer)->default_value("", "char for text"),
      "char: the sorted distinct characters of the text (nanoGPT's shakespeare_char); byte: the 256 byte "
      "values; bpe: subword tokens (byte-pair encoding) that SentencePiece learns from the text. llm.c "
      "shards keep their own tokens (gpt2 or llama3; naming that kind is allowed, another is refused)")(
      "vocab-size", po::value<std::int64_t>(), vocab_size_help.c_str())(
      "binary", po::bool_switch(&opt.binary),
      "with --tokenizer byte: read every input's raw bytes, whatever it holds (binary data, even a shard)")(
      "output,o", po::value<std::string>(&opt.output),
      "the token file to write (HDF5; written beside it under a temporary name, then moved there)")(
      "force", po::bool_switch(&opt.force),
      "replace a token file already at --output (never another kind of file); a run reading the old one keeps it")(
      "val-fraction", po::value<double>(&opt.val_fraction)->default_value(0.1, "0.1"),
      "fraction of the tokens (at the end) kept for validation")(
      "verify", po::bool_switch(),
      "check token files (the INPUTs) against their recorded content hash and vocabulary; writes nothing")(
      "input", po::value<std::vector<std::string>>(&opt.inputs), "text files or llm.c .bin shards, in order");
  po::variables_map vm;
  if (!parse_options(rt, args, desc, "input", -1, vm, "prep")) return 0;
  if (vm["verify"].as<bool>()) {
    if (!opt.output.empty() || vm.count("vocab-size") || !vm["tokenizer"].defaulted() || opt.binary ||
        !vm["val-fraction"].defaulted() || opt.force)
      throw ConfigError("--verify takes token files only (no --output, --force, --tokenizer, --vocab-size, --binary "
                        "or --val-fraction)");
    if (opt.inputs.empty()) throw ConfigError("--verify needs a token file (try `trident prep --help`)");
    int bad = 0;
    run_agreed(rt.world(), "", [&] {
      if (rt.world_rank() == 0) bad = verify_token_files(opt.inputs);
    });
    return bad > 0 ? 1 : 0;
  }
  if (vm.count("vocab-size")) opt.vocab_size = vm["vocab-size"].as<std::int64_t>();
  opt.val_fraction_given = !vm["val-fraction"].defaulted();
  PrepResult r;
  run_agreed(rt.world(), "", [&] {
    if (rt.world_rank() == 0) r = prep_token_file(opt);
  });
  log::info("wrote %s: %s tokenizer, vocab %lld, %lld train + %lld val tokens (enough for [model] block_size up to %lld)",
            opt.output.c_str(), r.tokenizer.c_str(), static_cast<long long>(r.vocab_size),
            static_cast<long long>(r.n_train), static_cast<long long>(r.n_val), static_cast<long long>(r.n_train - 1));
  return 0;
}

}  // namespace trident::app
