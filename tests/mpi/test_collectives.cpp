// The MPI backend of the collectives interface: results against the definitions, in-place forms,
// non-blocking forms, and the byte counts of the ring model documented in communicator.hpp.
#include "kernels/convert.hpp"
#include "parallel/communicator.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace trident {
namespace {

TEST(Collectives, AllReduceSumMaxMin) {
  Communicator& c = test::runtime().world();
  const int n = c.size(), r = c.rank();
  std::vector<double> v = {1.0 * r, 2.0, -1.0 * r};
  std::vector<double> out(3);
  c.all_reduce(v.data(), out.data(), 3, DataType::f64, ReduceOp::sum);
  EXPECT_EQ(out[0], n * (n - 1) / 2.0);
  EXPECT_EQ(out[1], 2.0 * n);
  c.all_reduce(v.data(), 3, ReduceOp::max);  // in place
  EXPECT_EQ(v[0], n - 1.0);
  EXPECT_EQ(v[2], 0.0);
  EXPECT_EQ(c.all_reduce_value<std::int64_t>(r, ReduceOp::min), 0);
  EXPECT_TRUE(c.all_true(true));
  EXPECT_FALSE(c.all_true(r != n - 1));  // false on the last rank, so false everywhere
}

TEST(Collectives, ReduceScatterAndAllGather) {
  Communicator& c = test::runtime().world();
  const int n = c.size(), r = c.rank(), k = 3;
  std::vector<float> in(static_cast<size_t>(n * k)), block(k);
  for (int i = 0; i < n * k; ++i) in[i] = static_cast<float>(i + r);
  c.reduce_scatter(in.data(), block.data(), k, DataType::f32, ReduceOp::sum);
  for (int j = 0; j < k; ++j) EXPECT_EQ(block[j], n * (r * k + j) + n * (n - 1) / 2.0f);
  std::vector<float> all(static_cast<size_t>(n * k));
  c.all_gather(block.data(), all.data(), k, DataType::f32);
  for (int i = 0; i < n * k; ++i) EXPECT_EQ(all[i], n * i + n * (n - 1) / 2.0f);
  // In place: each rank's block already sits at its position.
  std::vector<std::int32_t> inplace(static_cast<size_t>(n), -1);
  inplace[r] = r * 10;
  c.all_gather(inplace.data() + r, inplace.data(), 1, DataType::i32);
  for (int i = 0; i < n; ++i) EXPECT_EQ(inplace[i], i * 10);
}

// Reductions larger than one piece (TRIDENT_MPI_REDUCE_CHUNK_MB; mpi_collectives_pieces runs this
// with 1 MiB pieces at 3 ranks, so neither count divides into whole pieces): the same values as
// the definition. Small integers, so every float sum is exact.
TEST(Collectives, LargeReductionsMatchTheirDefinitionInPieces) {
  Communicator& c = test::runtime().world();
  const int n = c.size(), r = c.rank();
  const std::size_t count = 600001;
  std::vector<float> v(count), out(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>((i % 1000) * (r + 1));
  c.all_reduce(v.data(), out.data(), count, DataType::f32, ReduceOp::sum);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += out[i] != static_cast<float>((i % 1000) * n * (n + 1) / 2);
  EXPECT_EQ(wrong, 0u);
  c.all_reduce(v.data(), count, ReduceOp::max);  // in place
  wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += v[i] != static_cast<float>((i % 1000) * n);
  EXPECT_EQ(wrong, 0u);
  const std::size_t k = 300007;
  std::vector<float> in(k * static_cast<std::size_t>(n)), block(k);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 977 + static_cast<std::size_t>(r));
  c.reduce_scatter(in.data(), block.data(), k, DataType::f32, ReduceOp::sum);
  wrong = 0;
  for (std::size_t j = 0; j < k; ++j)
    wrong += block[j] != static_cast<float>(n * ((static_cast<std::size_t>(r) * k + j) % 977) + n * (n - 1) / 2);
  EXPECT_EQ(wrong, 0u);
  // The non-blocking form (ZeRO-2/3's overlapped reduction), f32 and f64, waited and tested.
  std::vector<float> block2(k, -1.0f);
  Request req = c.ireduce_scatter(in.data(), block2.data(), k, DataType::f32, ReduceOp::sum);
  req.wait();
  EXPECT_EQ(block2, block);
  std::vector<double> in_d(in.begin(), in.end()), block_d(k, -1.0);
  Request req_d = c.ireduce_scatter(in_d.data(), block_d.data(), k, DataType::f64, ReduceOp::sum);
  while (!req_d.test()) {
  }
  wrong = 0;
  for (std::size_t j = 0; j < k; ++j) wrong += block_d[j] != static_cast<double>(block[j]);
  EXPECT_EQ(wrong, 0u);
}

// IEEE half sums (reduce_dtype = fp16): exact where the sums are halves, inf where a sum passes
// 65504 (what fp16 loss scaling reads as an overflow), and the same through reduce_scatter.
TEST(Collectives, Fp16SumsAreHalvesAndOverflowToInf) {
  Communicator& c = test::runtime().world();
  const int n = c.size(), r = c.rank();
  std::vector<std::uint16_t> v = {to_fp16(0.5f * (r + 1)), to_fp16(r == 0 ? 60000.f : 0.f), to_fp16(40000.f)};
  c.all_reduce(v.data(), v.data(), v.size(), DataType::f16, ReduceOp::sum);
  EXPECT_EQ(from_fp16(v[0]), 0.25f * n * (n + 1));
  EXPECT_EQ(from_fp16(v[1]), 60000.f);
  if (n == 1) EXPECT_EQ(from_fp16(v[2]), 40000.f);
  else EXPECT_TRUE(std::isinf(from_fp16(v[2])));
  std::vector<std::uint16_t> in(static_cast<size_t>(n)), out(1);
  for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = to_fp16(static_cast<float>(i + 1));
  c.reduce_scatter(in.data(), out.data(), 1, DataType::f16, ReduceOp::sum);
  EXPECT_EQ(from_fp16(out[0]), static_cast<float>(n * (r + 1)));
}

TEST(Collectives, BroadcastSendRecvAndNonBlocking) {
  Communicator& c = test::runtime().world();
  const int n = c.size(), r = c.rank();
  std::int64_t v = r == n - 1 ? 77 : 0;
  c.broadcast(&v, 1, n - 1);
  EXPECT_EQ(v, 77);
  if (n >= 2) {  // ring exchange
    double send = r, recv = -1;
    Request rq = c.irecv(&recv, 1, DataType::f64, (r + n - 1) % n, 5);
    c.send(&send, 1, DataType::f64, (r + 1) % n, 5);
    rq.wait();
    EXPECT_EQ(recv, (r + n - 1) % n);
  }
  std::vector<double> a(4, 1.0), b(4);
  Request q = c.iall_reduce(a.data(), b.data(), 4, DataType::f64, ReduceOp::sum);
  q.wait();
  EXPECT_EQ(b[3], n);
  std::vector<double> blk(2), full(static_cast<size_t>(2 * n), 1.0);
  Request q2 = c.ireduce_scatter(full.data(), blk.data(), 2, DataType::f64, ReduceOp::sum);
  q2.wait();
  EXPECT_EQ(blk[0], n);
  std::vector<double> g(static_cast<size_t>(2 * n));
  Request q3 = c.iall_gather(blk.data(), g.data(), 2, DataType::f64);
  q3.wait();
  EXPECT_EQ(g[2 * n - 1], n);
}

TEST(Collectives, ByteCountsFollowTheRingModel) {
  Communicator& c = test::runtime().world();
  auto sub = c.split(0, c.rank(), "test");
  const int n = sub->size();
  std::vector<float> x(static_cast<size_t>(1000 * n), 1.0f), y(1000);
  sub->all_reduce(x.data(), 1000, ReduceOp::sum);
  sub->reduce_scatter(x.data(), y.data(), 1000, DataType::f32, ReduceOp::sum);
  sub->all_gather(y.data(), x.data(), 1000, DataType::f32);
  const CommStats& s = sub->stats();
  EXPECT_EQ(s.calls[static_cast<int>(CommOp::all_reduce)], 1);
  EXPECT_EQ(s.bytes[static_cast<int>(CommOp::all_reduce)], static_cast<std::int64_t>(2.0 * (n - 1) / n * 4000));
  EXPECT_EQ(s.bytes[static_cast<int>(CommOp::reduce_scatter)], static_cast<std::int64_t>(4000.0 * (n - 1)));
  EXPECT_EQ(s.bytes[static_cast<int>(CommOp::all_gather)], static_cast<std::int64_t>(4000.0 * (n - 1)));
  EXPECT_EQ(sub->axis(), "test");
}

}  // namespace
}  // namespace trident
