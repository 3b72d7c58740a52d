// bench/bench_offload_io.cpp: the bandwidth of the offload device as the ZeRO engine uses it, for
// machine files ([storage] read_gbs / write_gbs: tools/machine_file.sh, docs/scaling.md).
//
// Every rank creates its own OffloadFile (offload/offload_file.hpp: O_DIRECT where the file system
// allows it, space reserved at creation, one background I/O thread) of --mib MiB in records of
// --record-mib MiB (16: the engine's largest optimizer chunk), fills it once, then --reps times
// writes every record and reads every record back through the queue, the ranks together (a
// barrier before each pass), as a training step streams its offloaded state. A pass's rate is the
// bytes over the slowest rank's time (one rank's share of the disk when ranks share it); the best
// pass of each kind is reported, as bench_kernels reports a benchmark's best. Not a test: prints
// rates, asserts nothing. Run with mpiexec -n <ranks per node> on one node. Collective over world.
#include "core/error.hpp"
#include "core/timer.hpp"
#include "offload/offload_file.hpp"
#include "parallel/agree.hpp"
#include "parallel/runtime.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace trident {
namespace {

const char* kUsage =
    "usage: mpiexec -n R bench_offload_io --dir DIR [--mib N] [--record-mib M] [--reps K] [--json FILE]\n\n"
    "Write and read bandwidth of the offload device through Trident's OffloadFile (O_DIRECT where the\n"
    "file system allows it, one background I/O thread per rank), every rank at once on its own file.\n"
    "  --dir DIR        a directory on the offload device (required); files are removed at the end\n"
    "  --mib N          MiB per rank (default 512)\n"
    "  --record-mib M   MiB per record, i.e. per transfer (default 16: the engine's largest chunk)\n"
    "  --reps K         timed write and read passes (default 3; the best of each is reported)\n"
    "  --json FILE      also write the result as JSON\n"
    "Prints one line per pass and: read_gbs=<GB/s per rank> write_gbs=<GB/s per rank>; the JSON also\n"
    "says whether every rank's file took O_DIRECT (\"direct\": false: the page cache was measured).\n"
    "Exit status: 0 measured, 1 an I/O error (named), 2 bad usage.\n";

struct Options {
  std::string dir, json;
  std::int64_t mib = 512, record_mib = 16;
  int reps = 3;
};

Options parse(const std::vector<std::string>& args, bool* help) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      require_config(i + 1 < args.size(), a + " needs a value (try --help)");
      return args[++i];
    };
    auto number = [&](const std::string& v, std::int64_t lo, std::int64_t hi) {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      require_config(!v.empty() && end != nullptr && *end == '\0' && n >= lo && n <= hi,
                     a + " " + v + ": expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return static_cast<std::int64_t>(n);
    };
    if (a == "-h" || a == "--help") *help = true;
    else if (a == "--dir") o.dir = value();
    else if (a == "--json") o.json = value();
    else if (a == "--mib") o.mib = number(value(), 1, std::int64_t{1} << 20);
    else if (a == "--record-mib") o.record_mib = number(value(), 1, 1024);
    else if (a == "--reps") o.reps = static_cast<int>(number(value(), 1, 1000));
    else throw ConfigError("unknown option '" + a + "' (try --help)");
  }
  if (!*help) require_config(!o.dir.empty(), "--dir DIR is required (a directory on the offload device)");
  return o;
}

int run(Runtime& rt, const std::vector<std::string>& args) {
  bool help = false;
  const Options o = parse(args, &help);
  Communicator& world = rt.world();
  if (help) {
    if (world.rank() == 0) std::fputs(kUsage, stdout);
    return 0;
  }
  const std::int64_t rec = o.record_mib << 20;
  const int n = static_cast<int>(std::max<std::int64_t>(1, o.mib / o.record_mib));
  const double bytes = static_cast<double>(rec) * n;
  const std::string path = (std::filesystem::path(o.dir) / ("bench_offload_io." + std::to_string(world.rank()) + ".bin")).string();
  double best_read = 0, best_write = 0;
  bool direct = true;
  {
    // Created on every rank or on none: a rank that cannot create its file stops all (no hang).
    std::unique_ptr<OffloadFile> file;
    run_agreed(world, "bench_offload_io", [&] { file = std::make_unique<OffloadFile>(path, std::vector<std::int64_t>(static_cast<size_t>(n), rec)); });
    OffloadFile& f = *file;
    direct = world.all_true(f.direct());
    std::vector<AlignedHostBuffer> buf;
    for (int b = 0; b < 2; ++b) {
      buf.emplace_back(rec, MemCategory::other);
      auto* w = static_cast<std::uint32_t*>(buf.back().data());  // not constant: some devices compress or dedupe
      for (std::int64_t k = 0; k < rec / 4; ++k) w[k] = static_cast<std::uint32_t>(k * 2654435761u + b);
    }
    for (int i = 0; i < n; ++i) f.write_async(i, buf[static_cast<size_t>(i % 2)].data());  // the file's first contents
    f.drain();
    // A pass's transfers on every rank, then its time agreed (the slowest rank's) and its errors:
    // an I/O error on one rank stops every rank with the message (no rank left in a collective).
    auto timed = [&](const std::function<void()>& transfers) {
      world.barrier();
      Timer t;
      std::string err;
      try {
        transfers();
      } catch (const std::exception& e) {
        err = e.what();
      }
      double s = t.seconds();
      world.all_reduce(&s, &s, 1, DataType::f64, ReduceOp::max);
      run_agreed(world, "bench_offload_io", [&] {
        if (!err.empty()) throw IoError(err);
      });
      return s;
    };
    auto pass = [&](bool write) {
      return timed([&] {
        for (int i = 0; i < n; ++i) {
          void* p = buf[static_cast<size_t>(i % 2)].data();
          if (write) f.write_async(i, p);
          else f.read_async(i, p);
        }
        f.drain();
      });
    };
    // The step's pattern (ZeroEngine::stream): records read two ahead, each written back after its
    // read, through the same FIFO: bytes moved both ways over the slowest rank's time.
    auto stream_pass = [&]() {
      return timed([&] {
        std::vector<OffloadFile::Ticket> rt(static_cast<size_t>(n), 0);
        rt[0] = f.read_async(0, buf[0].data());
        if (n > 1) rt[1] = f.read_async(1, buf[1].data());
        for (int i = 0; i < n; ++i) {
          f.wait(rt[static_cast<size_t>(i)]);
          f.write_async(i, buf[static_cast<size_t>(i % 2)].data());
          if (i + 2 < n) rt[static_cast<size_t>(i + 2)] = f.read_async(i + 2, buf[static_cast<size_t>(i % 2)].data());
        }
        f.drain();
      });
    };
    for (int r = 0; r < o.reps; ++r) {
      const double st = stream_pass();
      if (world.rank() == 0) std::printf("stream pass %d: %.3f GB/s read + written\n", r + 1, 2 * bytes / st / 1e9);
    }
    for (int r = 0; r < o.reps; ++r) {
      const double w = pass(true), rd = pass(false);
      best_write = std::max(best_write, bytes / w / 1e9);
      best_read = std::max(best_read, bytes / rd / 1e9);
      if (world.rank() == 0)
        std::printf("pass %d: write %.3f GB/s, read %.3f GB/s per rank (%d ranks, %d records of %lld MiB each, %s)\n",
                    r + 1, bytes / w / 1e9, bytes / rd / 1e9, world.size(), n, static_cast<long long>(o.record_mib),
                    f.direct() ? "O_DIRECT" : "buffered: the file system refused O_DIRECT");
    }
  }  // the file is removed with the OffloadFile
  if (world.rank() == 0) {
    std::printf("read_gbs=%.6g write_gbs=%.6g\n", best_read, best_write);
    if (!o.json.empty()) {
      std::ofstream j(o.json);
      require_config(static_cast<bool>(j), "--json " + o.json + ": cannot be written");
      j << "{\"ranks\": " << world.size() << ", \"mib_per_rank\": " << n * o.record_mib
        << ", \"record_mib\": " << o.record_mib << ", \"read_gbs\": " << best_read << ", \"write_gbs\": " << best_write
        << ", \"direct\": " << (direct ? "true" : "false") << "}\n";
    }
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
    std::fprintf(stderr, "bench_offload_io: error: %s\n", e.what());
    return e.exit_code();
  }
}
