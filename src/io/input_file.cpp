#include "io/input_file.hpp"

#include "core/error.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace trident {

namespace fs = std::filesystem;

void reject_special_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const fs::file_type t = fs::status(path, ec).type();
  if (t == fs::file_type::not_found || t == fs::file_type::none || t == fs::file_type::regular ||
      t == fs::file_type::directory)
    return;  // (none: the file system could not answer; the caller's open names the reason)
  throw IoError(what + " '" + path + "' is a FIFO, device or socket, not a file");
}

std::string read_small_text_file(const std::string& path, const std::string& what, std::uintmax_t max_bytes) {
  std::error_code ec;
  const fs::file_type t = fs::status(path, ec).type();
  if (t == fs::file_type::not_found) throw IoError(what + " '" + path + "' does not exist");
  if (t == fs::file_type::directory) throw IoError(what + " '" + path + "' is a directory, not a file");
  if (t != fs::file_type::regular) {
    if (ec) throw IoError("cannot examine " + what + " '" + path + "': " + ec.message());
    throw IoError(what + " '" + path + "' is a FIFO, device or socket, not a file");
  }
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) throw IoError("cannot examine " + what + " '" + path + "': " + ec.message());
  if (size > max_bytes)
    throw IoError(what + " '" + path + "' holds " + std::to_string(size) + " bytes, more than the " +
                  std::to_string(max_bytes) + " such a file may have: not the file expected");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open " + what + " '" + path + "': " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw IoError("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  return s.str();
}

}  // namespace trident
