#include "parallel/agree.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

namespace trident {

void run_agreed(Communicator& comm, const std::string& context, const std::function<void()>& f) {
  std::string msg;
  std::int32_t kind = -1;  // -1 ok, 0 Error, 1 ConfigError, 2 IoError, 3 CheckpointError, 4 other
  try {
    f();
  } catch (const ConfigError& e) {
    kind = 1;
    msg = e.what();
  } catch (const IoError& e) {
    kind = 2;
    msg = e.what();
  } catch (const CheckpointError& e) {
    kind = 3;
    msg = e.what();
  } catch (const Error& e) {
    kind = 0;
    msg = e.what();
  } catch (const std::exception& e) {
    kind = 4;
    msg = e.what();
  }
  const std::int32_t first_bad = comm.all_reduce_value<std::int32_t>(kind < 0 ? comm.size() : comm.rank(), ReduceOp::min);
  if (first_bad == comm.size()) return;
  std::vector<char> buf(2048, '\0');
  if (comm.rank() == first_bad) {
    std::memcpy(buf.data(), &kind, sizeof kind);
    std::strncpy(buf.data() + sizeof kind, msg.c_str(), buf.size() - sizeof kind - 1);
  }
  comm.broadcast(buf.data(), buf.size(), DataType::u8, first_bad);
  std::memcpy(&kind, buf.data(), sizeof kind);
  std::string text = std::string(buf.data() + sizeof kind);
  // Nested agreements (and messages that already name their context) are not prefixed twice.
  if (!context.empty() && text.rfind(context, 0) != 0) text = context + ": " + text;
  const std::string where = " (rank " + std::to_string(first_bad) + ")";
  if (comm.size() > 1 && (text.size() < where.size() || text.compare(text.size() - where.size(), where.size(), where) != 0))
    text += where;
  switch (kind) {
    case 1: throw ConfigError(text);
    case 2: throw IoError(text, true);
    case 3: throw CheckpointError(text, true);
    default: throw Error(text, true);
  }
}

void broadcast_string(Communicator& comm, std::string& s, int root) {
  std::int64_t n = static_cast<std::int64_t>(s.size());
  comm.broadcast(&n, 1, root);
  s.resize(static_cast<size_t>(n));
  if (n > 0) comm.broadcast(s.data(), static_cast<size_t>(n), DataType::u8, root);
}

std::vector<std::string> gather_strings(Communicator& comm, const std::vector<std::string>& mine) {
  std::string joined;
  for (std::string s : mine) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    joined += s + '\n';
  }
  std::int64_t n = static_cast<std::int64_t>(joined.size());
  std::vector<std::int64_t> sizes(static_cast<size_t>(comm.size()));
  comm.all_gather(&n, sizes.data(), 1, DataType::i64);
  const std::int64_t width = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::string> out;
  if (width == 0) return out;
  std::vector<char> buf(static_cast<size_t>(width), '\0'), all(static_cast<size_t>(width * comm.size()));
  std::copy(joined.begin(), joined.end(), buf.begin());
  comm.all_gather(buf.data(), all.data(), static_cast<size_t>(width), DataType::u8);
  for (int r = 0; r < comm.size(); ++r) {
    std::stringstream ss(std::string(&all[static_cast<size_t>(r * width)], static_cast<size_t>(sizes[r])));
    std::string line;
    while (std::getline(ss, line)) out.push_back(line);
  }
  return out;
}

}  // namespace trident
