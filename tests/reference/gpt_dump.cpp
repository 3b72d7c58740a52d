// tests/reference/gpt_dump.cpp: `trident_gpt_dump`, Trident's half of the PyTorch reference test.
//
// Loads a checkpoint, runs one forward and backward of Gpt<float> on a fixed batch of the token
// file's train split and writes tokens, targets, loss, logits and every parameter gradient to an
// array file (io/array_file.hpp). tools/torch_reference.py rebuilds the same GPT in PyTorch from
// the checkpoint alone and compares (llm.c's test_gpt2.c does the same against a PyTorch dump).
// The batch is a pure function of (token file, B, T, --offset-seed), so both sides see the same
// tokens without sharing a sampler. Serial: extra ranks only help open the checkpoint.
#include "core/error.hpp"
#include "core/log.hpp"
#include "data/token_dataset.hpp"
#include "io/array_file.hpp"
#include "model/gpt.hpp"
#include "parallel/runtime.hpp"
#include "train/checkpoint_model.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* kUsage =
    "usage: trident_gpt_dump --checkpoint CKPT.h5 --data TOKENS.h5 --batch B --out DUMP.h5 [--offset-seed S]\n\n"
    "Runs one forward + backward (no dropout, dloss = 1/(B*T)) of the checkpoint's model on B windows of\n"
    "T = block_size (+1 for the targets) tokens of TOKENS.h5's train split, starting at\n"
    "(S + i * 997) mod (n - T - 1), and writes tokens (B,T), targets (B,T), loss (mean token loss),\n"
    "logits (B*T,V) and grad/<tensor> for every parameter tensor to DUMP.h5 (float64).\n";

struct Options {
  std::string checkpoint, data, out;
  int batch = 0;
  std::int64_t offset_seed = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw trident::ConfigError(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--checkpoint") o.checkpoint = value();
    else if (a == "--data") o.data = value();
    else if (a == "--out") o.out = value();
    else if (a == "--batch") o.batch = std::atoi(value().c_str());
    else if (a == "--offset-seed") o.offset_seed = std::atoll(value().c_str());
    else throw trident::ConfigError("unknown argument '" + a + "'\n" + kUsage);
  }
  if (o.checkpoint.empty() || o.data.empty() || o.out.empty() || o.batch < 1 || o.offset_seed < 0)
    throw trident::ConfigError(std::string("--checkpoint, --data, --out and --batch >= 1 are required\n") + kUsage);
  return o;
}

int run(trident::Runtime& rt, const Options& o) {
  using namespace trident;
  CheckpointModel cm = load_checkpoint_model(o.checkpoint, rt.world());
  if (rt.world_rank() != 0) return 0;
  const ModelConfig& m = cm.cfg.model;
  const int B = o.batch, T = m.block_size;
  const std::int64_t BT = static_cast<std::int64_t>(B) * T, V = m.vocab_size;

  TokenDataset data(o.data, 1024.0);
  if (data.info().vocab_size != m.vocab_size)
    throw ConfigError("token file '" + o.data + "' has vocab_size " + std::to_string(data.info().vocab_size) +
                      " but the checkpoint's model has " + std::to_string(m.vocab_size));
  const std::int64_t n = data.size("train");
  if (n < T + 2) throw ConfigError("token file '" + o.data + "': the train split is shorter than one window");
  // 997 is prime and far from any small block_size, so the windows do not overlap for a tiny B.
  std::vector<std::int64_t> offsets(static_cast<size_t>(B));
  for (int i = 0; i < B; ++i) offsets[static_cast<size_t>(i)] = (o.offset_seed + static_cast<std::int64_t>(i) * 997) % (n - T - 1);
  std::vector<std::int32_t> tok(static_cast<size_t>(BT)), tgt(static_cast<size_t>(BT));
  data.load_batch("train", offsets, T, tok.data(), tgt.data());

  Buffer<token_t> tok_d("tokens", static_cast<size_t>(BT)), tgt_d("targets", static_cast<size_t>(BT));
  Kokkos::deep_copy(tok_d, Kokkos::View<const token_t*, HostSpace, Unmanaged>(tok.data(), tok.size()));
  Kokkos::deep_copy(tgt_d, Kokkos::View<const token_t*, HostSpace, Unmanaged>(tgt.data(), tgt.size()));

  ParamStore<float>& store = *cm.store;
  const ParamLayout& layout = store.layout();
  store.zero_grads();
  Gpt<float> gpt(m, layout, B, T);
  FlatProvider<float> flat(layout, store.params().data(), store.grads().data());
  const double loss_sum = gpt.forward(flat, View1<const token_t>(tok_d.data(), tok_d.extent(0)),
                                      View1<const token_t>(tgt_d.data(), tgt_d.extent(0)), B, T, ForwardContext{});
  std::vector<NamedArray> out;
  out.push_back({"tokens", {B, T}, std::vector<double>(tok.begin(), tok.end())});
  out.push_back({"targets", {B, T}, std::vector<double>(tgt.begin(), tgt.end())});
  out.push_back({"loss", {}, {loss_sum / static_cast<double>(BT)}});
  {
    // backward() turns the logits into dlogits in place, so they are saved first.
    auto lg = Kokkos::create_mirror_view_and_copy(HostSpace(), gpt.logits());
    NamedArray a{"logits", {BT, V}, std::vector<double>(static_cast<size_t>(BT * V))};
    for (std::int64_t r = 0; r < BT; ++r)
      for (std::int64_t c = 0; c < V; ++c) a.data[static_cast<size_t>(r * V + c)] = lg(r, c);
    out.push_back(std::move(a));
  }
  gpt.backward(flat, 1.0f / static_cast<float>(BT));
  auto g_h = Kokkos::create_mirror_view_and_copy(HostSpace(), store.grads().view());
  for (const TensorSpec& t : layout.tensors())
    out.push_back({"grad/" + t.name, t.shape, std::vector<double>(g_h.data() + t.offset, g_h.data() + t.offset + t.numel)});
  write_arrays(o.out, out);
  log::info("trident_gpt_dump: step %lld checkpoint, B=%d T=%d V=%lld, loss %.6f -> %s",
            static_cast<long long>(cm.step), B, T, static_cast<long long>(V), loss_sum / static_cast<double>(BT),
            o.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  trident::Runtime rt(argc, argv);
  try {
    return run(rt, parse(argc, argv));
  } catch (const trident::Error& e) {
    trident::log::error("trident_gpt_dump: error: %s", e.what());
    if (e.collective() || rt.world_size() == 1) return e.exit_code();
    trident::Runtime::abort(e.exit_code());
  }
}
