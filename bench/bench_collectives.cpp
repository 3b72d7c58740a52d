// bench/bench_collectives.cpp: latency and bandwidth of every collective Trident uses, through its
// own Communicator, on each axis (dp, tp, pp) of a layout and each backend this build has.
//
// Run: mpiexec -n N build/bin/bench_collectives [--dp D --tp T --pp P] [--max-bytes B] ... (--help).
// For each backend (mpi; nccl when built and usable), axis of size >= 1 and operation (all_reduce,
// reduce_scatter, all_gather, broadcast, send_recv), message sizes S = min-bytes, x factor, ...,
// max-bytes are timed (max over every rank of the job: all groups of an axis run at once, as in a
// training step). Per size: time, algbw = S / t and busbw = algbw * bus_factor as nccl-tests
// defines them (perf/collective_model.hpp, citing nccl-tests' doc/PERFORMANCE.md). Per operation and
// axis: the least-squares alpha-beta fit t = alpha + beta S (fit_alpha_beta: relative residuals) and
// beta_bus = beta / bus_factor, the inverse of the asymptotic bus bandwidth, which machine files
// take (tools/machine_file.sh). Results: CSV (one row per size) and JSON (rows and fits); rank 0
// prints a table. Not a test: it asserts nothing about speed.
#include "core/error.hpp"
#include "core/timer.hpp"
#include "core/types.hpp"
#include "parallel/nccl_communicator.hpp"
#include "parallel/process_grid.hpp"
#include "parallel/runtime.hpp"
#include "perf/collective_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace trident {
namespace {

const char* kUsage = R"(usage: mpiexec -n N bench_collectives [options]

Times all_reduce, reduce_scatter, all_gather, broadcast and send/recv through Trident's
Communicator on each axis of a dp x tp x pp layout, for each backend the build has, over message
sizes from --min-bytes to --max-bytes; writes CSV and JSON with algbw, busbw (nccl-tests'
definitions) and an alpha-beta fit per operation and axis.

options:
  --dp D            data-parallel size (default: N / (tp * pp))
  --tp T            tensor-parallel size (default 1)
  --pp P            pipeline-parallel size (default 1)
  --axes LIST       comma-separated axes to measure, of dp, tp, pp (default: all three; an axis of
                    size 1 is measured too: the call overhead of a 1-rank communicator)
  --ops LIST        comma-separated operations, of all_reduce, reduce_scatter, all_gather,
                    broadcast, send_recv (default: all)
  --backend B       mpi, nccl or all (default all: mpi, and nccl when this build has it and
                    every rank has a GPU; otherwise nccl is skipped with its reason)
  --min-bytes S     smallest message in bytes (default 4)
  --max-bytes S     largest message in bytes (default 268435456 = 256 MiB; accepts K, M, G suffixes)
  --factor F        ratio of successive sizes, integer >= 2 (default 2)
  --iters N         timed iterations per size; 0 = automatic: enough for --budget-bytes moved,
                    between 3 and 200 (default 0)
  --warmup N        untimed iterations before each size (default 2)
  --budget-bytes S  bytes per size that --iters 0 aims to move (default 64M)
  --csv FILE        CSV output (default runs/bench/collectives.csv); "-" for none
  --json FILE       JSON output (default runs/bench/collectives.json); "-" for none
  --quiet           no table on stdout
  -h, --help        this text

Message size S is nccl-tests' "size": the buffer of all_reduce and broadcast, the full input of
reduce_scatter, the full output of all_gather, the message of send/recv (rounded to whole float
elements per rank). send_recv is a ping-pong between axis ranks 2i and 2i+1; its time is half the
round trip. busbw = S / t * factor, factor = 2(n-1)/n (all_reduce), (n-1)/n (reduce_scatter,
all_gather), 1 (broadcast, send_recv). Exit status 2 on bad options.
)";

struct Options {
  int dp = 0, tp = 1, pp = 1;
  std::vector<std::string> axes{"dp", "tp", "pp"};
  std::vector<std::string> ops{"all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv"};
  std::string backend = "all";
  double min_bytes = 4, max_bytes = 256.0 * 1024 * 1024, budget = 64.0 * 1024 * 1024;
  int factor = 2, iters = 0, warmup = 2;
  std::string csv = "runs/bench/collectives.csv", json = "runs/bench/collectives.json";
  bool quiet = false;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

double parse_bytes(const std::string& opt, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  std::string suf = end ? std::string(end) : "";
  if (suf == "K" || suf == "k") x *= 1024;
  else if (suf == "M" || suf == "m") x *= 1024.0 * 1024;
  else if (suf == "G" || suf == "g") x *= 1024.0 * 1024 * 1024;
  else if (!suf.empty()) throw ConfigError(opt + " " + v + ": not a byte count (a number, optionally K, M or G)");
  if (!(x >= 1)) throw ConfigError(opt + " " + v + ": must be at least 1 byte");
  return std::floor(x);
}

int parse_int(const std::string& opt, const std::string& v, int lo) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < lo || x > 1 << 30)
    throw ConfigError(opt + " " + v + ": expected an integer >= " + std::to_string(lo));
  return static_cast<int>(x);
}

Options parse(const std::vector<std::string>& args, bool* help) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw ConfigError(a + " needs a value");
      return args[++i];
    };
    if (a == "-h" || a == "--help") *help = true;
    else if (a == "--dp") o.dp = parse_int(a, value(), 1);
    else if (a == "--tp") o.tp = parse_int(a, value(), 1);
    else if (a == "--pp") o.pp = parse_int(a, value(), 1);
    else if (a == "--axes") o.axes = split_list(value());
    else if (a == "--ops") o.ops = split_list(value());
    else if (a == "--backend") o.backend = value();
    else if (a == "--min-bytes") o.min_bytes = parse_bytes(a, value());
    else if (a == "--max-bytes") o.max_bytes = parse_bytes(a, value());
    else if (a == "--budget-bytes") o.budget = parse_bytes(a, value());
    else if (a == "--factor") o.factor = parse_int(a, value(), 2);
    else if (a == "--iters") o.iters = parse_int(a, value(), 0);
    else if (a == "--warmup") o.warmup = parse_int(a, value(), 0);
    else if (a == "--csv") o.csv = value();
    else if (a == "--json") o.json = value();
    else if (a == "--quiet") o.quiet = true;
    else throw ConfigError("unknown option '" + a + "' (try --help)");
  }
  for (const auto& ax : o.axes)
    if (ax != "dp" && ax != "tp" && ax != "pp") throw ConfigError("--axes: unknown axis '" + ax + "' (dp, tp, pp)");
  for (const auto& op : o.ops)
    if (op != "all_reduce" && op != "reduce_scatter" && op != "all_gather" && op != "broadcast" && op != "send_recv")
      throw ConfigError("--ops: unknown operation '" + op + "'");
  if (o.backend != "mpi" && o.backend != "nccl" && o.backend != "all")
    throw ConfigError("--backend " + o.backend + ": expected mpi, nccl or all");
  if (o.min_bytes > o.max_bytes) throw ConfigError("--min-bytes is larger than --max-bytes");
  return o;
}

CommOp op_of(const std::string& s) {
  if (s == "all_reduce") return CommOp::all_reduce;
  if (s == "reduce_scatter") return CommOp::reduce_scatter;
  if (s == "all_gather") return CommOp::all_gather;
  if (s == "broadcast") return CommOp::broadcast;
  return CommOp::send;
}

struct Row {
  std::string backend, axis, op;
  int n = 1;
  double bytes = 0, seconds = 0, algbw = 0, busbw = 0;
  int iters = 0;
};

struct Fit {
  std::string backend, axis, op;
  int n = 1;
  AlphaBeta ab;
  double beta_bus = 0;  // s per bus byte (0 when n == 1)
  int points = 0;
};

/// Times `iters` calls of `op` with message size `bytes` on `c`; returns seconds per call, the max
/// over world. Collective over world (every rank calls it with the same arguments).
double time_op(Communicator& c, Communicator& world, const std::string& op, std::size_t elems, int iters, int warmup,
               float* sendb, float* recvb) {
  const int n = c.size(), r = c.rank();
  const std::size_t block = std::max<std::size_t>(1, elems / static_cast<std::size_t>(n));
  const int partner = (r ^ 1) < n ? (r ^ 1) : -1;
  auto once = [&]() {
    if (op == "all_reduce") c.all_reduce(sendb, recvb, elems, DataType::f32, ReduceOp::sum);
    else if (op == "reduce_scatter") c.reduce_scatter(sendb, recvb, block, DataType::f32, ReduceOp::sum);
    else if (op == "all_gather") c.all_gather(sendb, recvb, block, DataType::f32);
    else if (op == "broadcast") c.broadcast(recvb, elems, DataType::f32, 0);
    else if (partner >= 0) {  // send_recv: ping-pong between axis ranks 2i and 2i+1
      if (r % 2 == 0) {
        c.send(sendb, elems, DataType::f32, partner, 7);
        c.recv(recvb, elems, DataType::f32, partner, 8);
      } else {
        c.recv(recvb, elems, DataType::f32, partner, 7);
        c.send(sendb, elems, DataType::f32, partner, 8);
      }
    }
  };
  for (int i = 0; i < warmup; ++i) once();
  Kokkos::fence();
  world.barrier();
  Timer t;
  for (int i = 0; i < iters; ++i) once();
  Kokkos::fence();
  double s = t.seconds() / iters;
  if (op == "send_recv") s /= 2.0;  // one way
  return world.all_reduce_value(s, ReduceOp::max);
}

/// Every size of one operation on one axis. Collective over world.
void run_axis(const Options& o, const std::string& backend, const std::string& axis, Communicator& c,
              Communicator& world, std::vector<Row>& rows, std::vector<Fit>& fits) {
  const int n = c.size();
  const std::size_t max_elems = static_cast<std::size_t>(std::ceil(o.max_bytes / 4.0)) + static_cast<std::size_t>(n);
  Buffer<float> sendb("bench_send", max_elems), recvb("bench_recv", max_elems);
  Kokkos::deep_copy(sendb, 1.0f);
  for (const std::string& op : o.ops) {
    if (op == "send_recv" && n < 2) continue;  // no partner on a 1-rank axis
    std::vector<double> xs, ts;
    Fit f{backend, axis, op, n, {}, 0, 0};
    for (double s = o.min_bytes; s <= o.max_bytes; s *= o.factor) {
      // Whole float elements, and for the scatter/gather whole blocks per rank.
      std::size_t elems = std::max<std::size_t>(1, static_cast<std::size_t>(s / 4.0));
      if (op == "reduce_scatter" || op == "all_gather")
        elems = std::max<std::size_t>(1, elems / static_cast<std::size_t>(n)) * static_cast<std::size_t>(n);
      const double bytes = 4.0 * static_cast<double>(elems);
      const int iters = o.iters > 0 ? o.iters : static_cast<int>(std::clamp(std::ceil(o.budget / bytes), 3.0, 200.0));
      const double t = time_op(c, world, op, elems, iters, o.warmup, sendb.data(), recvb.data());
      Row row{backend, axis, op, n, bytes, t, bytes / t, 0.0, iters};
      row.busbw = row.algbw * bus_factor(op_of(op), n);
      rows.push_back(row);
      if (xs.empty() || xs.back() != bytes) {
        xs.push_back(bytes);
        ts.push_back(t);
      }
    }
    if (xs.size() >= 2) {
      f.ab = fit_alpha_beta(xs, ts);
      const double bf = bus_factor(op_of(op), n);
      f.beta_bus = bf > 0 ? f.ab.beta_s_per_byte / bf : 0.0;
      f.points = static_cast<int>(xs.size());
      fits.push_back(f);
    }
  }
}

void write_outputs(const Options& o, const std::vector<Row>& rows, const std::vector<Fit>& fits, int world_size) {
  if (o.csv != "-") {
    if (auto p = std::filesystem::path(o.csv).parent_path(); !p.empty()) std::filesystem::create_directories(p);
    std::ofstream f(o.csv);
    if (!f) throw Error("bench_collectives: cannot write " + o.csv);
    f << "backend,axis,op,ranks,bytes,iters,time_us,algbw_gbs,busbw_gbs\n";
    char line[256];
    for (const Row& r : rows) {
      std::snprintf(line, sizeof line, "%s,%s,%s,%d,%.0f,%d,%.9g,%.9g,%.9g\n", r.backend.c_str(), r.axis.c_str(),
                    r.op.c_str(), r.n, r.bytes, r.iters, r.seconds * 1e6, r.algbw / 1e9, r.busbw / 1e9);
      f << line;
    }
  }
  if (o.json != "-") {
    if (auto p = std::filesystem::path(o.json).parent_path(); !p.empty()) std::filesystem::create_directories(p);
    std::ofstream f(o.json);
    if (!f) throw Error("bench_collectives: cannot write " + o.json);
    char buf[512];
    f << "{\n  \"world_size\": " << world_size << ",\n  \"layout\": {\"dp\": " << o.dp << ", \"tp\": " << o.tp
      << ", \"pp\": " << o.pp << "},\n  \"bus_factor\": \"nccl-tests doc/PERFORMANCE.md: all_reduce 2(n-1)/n, "
         "reduce_scatter and all_gather (n-1)/n, broadcast 1, send_recv 1\",\n  \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::snprintf(buf, sizeof buf,
                    "    {\"backend\": \"%s\", \"axis\": \"%s\", \"op\": \"%s\", \"ranks\": %d, \"bytes\": %.0f, "
                    "\"iters\": %d, \"time_s\": %.9g, \"algbw_Bps\": %.9g, \"busbw_Bps\": %.9g}%s\n",
                    r.backend.c_str(), r.axis.c_str(), r.op.c_str(), r.n, r.bytes, r.iters, r.seconds, r.algbw, r.busbw,
                    i + 1 < rows.size() ? "," : "");
      f << buf;
    }
    f << "  ],\n  \"fits\": [\n";
    for (size_t i = 0; i < fits.size(); ++i) {
      const Fit& x = fits[i];
      std::snprintf(buf, sizeof buf,
                    "    {\"backend\": \"%s\", \"axis\": \"%s\", \"op\": \"%s\", \"ranks\": %d, \"alpha_s\": %.9g, "
                    "\"beta_s_per_byte\": %.9g, \"beta_bus_s_per_byte\": %.9g, \"max_rel_error\": %.4g, \"points\": %d}%s\n",
                    x.backend.c_str(), x.axis.c_str(), x.op.c_str(), x.n, x.ab.alpha_s, x.ab.beta_s_per_byte, x.beta_bus,
                    x.ab.max_rel_error, x.points, i + 1 < fits.size() ? "," : "");
      f << buf;
    }
    f << "  ]\n}\n";
  }
}

int run(Runtime& rt, const std::vector<std::string>& args) {
  bool help = false;
  Options o = parse(args, &help);
  if (help) {
    if (rt.world_rank() == 0) std::fputs(kUsage, stdout);
    return 0;
  }
  const int world_size = rt.world_size();
  if (o.dp == 0) {
    require_config(world_size % (o.tp * o.pp) == 0, "--tp * --pp = " + std::to_string(o.tp * o.pp) +
                                                         " does not divide the " + std::to_string(world_size) + " ranks");
    o.dp = world_size / (o.tp * o.pp);
  }
  require_config(o.dp * o.tp * o.pp == world_size, "--dp * --tp * --pp = " + std::to_string(o.dp * o.tp * o.pp) +
                                                       " is not the number of ranks (" + std::to_string(world_size) + ")");
  std::vector<std::string> backends;
  if (o.backend != "nccl") backends.push_back("mpi");
  if (o.backend != "mpi") {
    const NcclSupport ns = nccl_support();
    // Every rank must agree before any rank builds an NCCL grid.
    const bool usable = rt.world().all_true(ns.usable());
    if (usable) backends.push_back("nccl");
    else if (rt.world_rank() == 0)
      std::fprintf(stderr, "bench_collectives: nccl skipped: %s\n",
                   ns.reason.empty() ? "a rank sees no CUDA device" : ns.reason.c_str());
    if (o.backend == "nccl" && !usable) return 0;
  }
  std::vector<Row> rows;
  std::vector<Fit> fits;
  for (const std::string& b : backends) {
    ProcessGrid grid(rt.world(), GridShape{o.dp, o.tp, o.pp}, b == "nccl" ? CommBackend::nccl : CommBackend::mpi);
    for (const std::string& axis : o.axes) {
      Communicator& c = axis == "dp" ? grid.dp_comm() : axis == "tp" ? grid.tp_comm() : grid.pp_comm();
      run_axis(o, b, axis, c, rt.world(), rows, fits);
    }
  }
  if (rt.world_rank() != 0) return 0;
  write_outputs(o, rows, fits, world_size);
  if (!o.quiet) {
    std::printf("# bench_collectives: %d ranks, dp=%d tp=%d pp=%d (time: max over ranks)\n", world_size, o.dp, o.tp, o.pp);
    std::printf("%-5s %-4s %-15s %5s %12s %6s %12s %10s %10s\n", "back", "axis", "op", "n", "bytes", "iters",
                "time_us", "algbw_GB/s", "busbw_GB/s");
    for (const Row& r : rows)
      std::printf("%-5s %-4s %-15s %5d %12.0f %6d %12.3f %10.4f %10.4f\n", r.backend.c_str(), r.axis.c_str(),
                  r.op.c_str(), r.n, r.bytes, r.iters, r.seconds * 1e6, r.algbw / 1e9, r.busbw / 1e9);
    std::printf("# alpha-beta fits: t = alpha + beta * bytes; busbw_fit = 1 / beta_bus\n");
    for (const Fit& f : fits)
      std::printf("fit %-5s %-4s %-15s n=%d alpha_us=%.3f beta_ns_per_byte=%.5f busbw_fit_GBps=%.4f max_rel_err=%.2f\n",
                  f.backend.c_str(), f.axis.c_str(), f.op.c_str(), f.n, f.ab.alpha_s * 1e6, f.ab.beta_s_per_byte * 1e9,
                  f.beta_bus > 0 ? 1e-9 / f.beta_bus : 0.0, f.ab.max_rel_error);
    if (o.csv != "-") std::printf("# wrote %s\n", o.csv.c_str());
    if (o.json != "-") std::printf("# wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  trident::Runtime rt(argc, argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return trident::run(rt, args);
  } catch (const trident::Error& e) {
    if (rt.world_rank() == 0) std::fprintf(stderr, "bench_collectives: error: %s\n", e.what());
    return e.exit_code();
  }
}
