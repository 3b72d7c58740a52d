// bench_timers: the cost of the step-time breakdown's timers (train/step_timers.hpp,
// Communicator::set_timing), per timed scope and per timed collective, on one rank. Multiply by the
// scopes and collectives of a step (docs/scaling.md section 6) to bound the overhead of a step; the
// whole-run comparison is tools/bench_timers.sh. Not a test: it prints times, asserts nothing.
#include "parallel/runtime.hpp"
#include "train/step_timers.hpp"

#include <benchmark/benchmark.h>

#include <memory>

using namespace trident;

namespace {
Runtime* g_rt = nullptr;

// One timed part, as train_step opens them (no communicator watched: on one rank none is).
void BM_StepTimerScope(benchmark::State& state) {
  StepTimers t(static_cast<TimerMode>(state.range(0)));
  t.start();
  for (auto _ : state) {
    const auto part = t.time(StepPart::fwd);
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(t.lap());
}
BENCHMARK(BM_StepTimerScope)->ArgName("mode")->Arg(static_cast<int>(TimerMode::off))->Arg(static_cast<int>(TimerMode::coarse));

// A blocking one-element all-reduce on a one-rank communicator (MPI_COMM_SELF's cost is MPI's call
// overhead only), timing off and on: the difference is what BlockingTime adds per call.
void BM_AllReduceTiming(benchmark::State& state) {
  auto self = g_rt->world().split(g_rt->world_rank(), 0, "dp");
  self->set_timing(state.range(0) != 0);
  double v = 1.0;
  for (auto _ : state) {
    self->all_reduce(&v, 1);
    benchmark::DoNotOptimize(v);
  }
}
BENCHMARK(BM_AllReduceTiming)->ArgName("timing")->Arg(0)->Arg(1);

// A non-blocking all-reduce and its wait: track() plus the Request's two clock reads.
void BM_IallReduceWaitTiming(benchmark::State& state) {
  auto self = g_rt->world().split(g_rt->world_rank(), 0, "dp");
  self->set_timing(state.range(0) != 0);
  double v = 1.0, w = 0.0;
  for (auto _ : state) {
    Request r = self->iall_reduce(&v, &w, 1, DataType::f64, ReduceOp::sum);
    r.wait();
    benchmark::DoNotOptimize(w);
  }
}
BENCHMARK(BM_IallReduceWaitTiming)->ArgName("timing")->Arg(0)->Arg(1);
}  // namespace

int main(int argc, char** argv) {
  Runtime rt(argc, argv);
  g_rt = &rt;
  benchmark::Initialize(&argc, argv);
  if (rt.world_rank() == 0) benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
