#include "model/generate.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace trident {

template <class T>
std::vector<std::int32_t> generate(Gpt<T>& gpt, UnitProvider<T>& params, const ModelConfig& m,
                                   std::vector<std::int32_t> ids, const SampleOptions& opt,
                                   const std::function<void(std::int32_t)>& on_token) {
  if (ids.empty()) throw Error("generate: the prompt is empty");
  Kokkos::View<token_t*, MemSpace> tok("trident::generate::tokens", static_cast<size_t>(m.block_size));
  auto tok_h = Kokkos::create_mirror_view(tok);
  const int V = m.vocab_size;
  std::vector<double> p(static_cast<size_t>(V));
  std::vector<int> order(static_cast<size_t>(V));
  for (int n = 0; n < opt.max_new_tokens; ++n) {
    const int len = static_cast<int>(std::min<size_t>(ids.size(), static_cast<size_t>(m.block_size)));
    std::copy(ids.end() - len, ids.end(), tok_h.data());
    Kokkos::deep_copy(tok, tok_h);
    gpt.forward(params, View1<const token_t>(tok.data(), static_cast<size_t>(len)), View1<const token_t>(), 1, len,
                ForwardContext{}, /*for_backward=*/false);
    auto logits = gpt.logits();
    auto row = Kokkos::create_mirror_view_and_copy(
        HostSpace(), Kokkos::subview(logits, static_cast<size_t>(len - 1), Kokkos::ALL()));
    int next = 0;
    if (opt.temperature <= 0.0) {
      for (int v = 1; v < V; ++v)
        if (row(v) > row(next)) next = v;
    } else {
      std::iota(order.begin(), order.end(), 0);
      const int k = opt.top_k > 0 ? std::min(opt.top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return row(a) > row(b); });
      const double maxv = static_cast<double>(row(order[0]));
      double sum = 0;
      for (int i = 0; i < k; ++i) sum += p[static_cast<size_t>(i)] = std::exp((row(order[i]) - maxv) / opt.temperature);
      const std::uint64_t pos = ids.size();
      auto r = philox4(lo32(opt.seed), hi32(opt.seed), lo32(pos), hi32(pos), 0x5A3B1E00u, 0u);
      const double u = (static_cast<double>(r.v[0]) + 0.5) / 4294967296.0 * sum;
      double acc = 0;
      next = order[static_cast<size_t>(k - 1)];
      for (int i = 0; i < k; ++i) {
        acc += p[static_cast<size_t>(i)];
        if (u < acc) {
          next = order[static_cast<size_t>(i)];
          break;
        }
      }
    }
    ids.push_back(next);
    if (on_token) on_token(next);
  }
  return ids;
}

template std::vector<std::int32_t> generate<float>(Gpt<float>&, UnitProvider<float>&, const ModelConfig&,
                                                   std::vector<std::int32_t>, const SampleOptions&,
                                                   const std::function<void(std::int32_t)>&);
template std::vector<std::int32_t> generate<double>(Gpt<double>&, UnitProvider<double>&, const ModelConfig&,
                                                    std::vector<std::int32_t>, const SampleOptions&,
                                                    const std::function<void(std::int32_t)>&);

}  // namespace trident
