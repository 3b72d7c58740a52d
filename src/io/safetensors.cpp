#include "io/safetensors.hpp"

#include "core/error.hpp"
#include "io/input_file.hpp"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <limits>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace trident {

namespace fs = std::filesystem;
namespace pt = boost::property_tree;

namespace {

std::size_t dtype_size(const std::string& d) {
  if (d == "F32") return 4;
  if (d == "F16" || d == "BF16") return 2;
  if (d == "F64") return 8;
  return 0;
}

pt::ptree parse_json(const std::string& text, const std::string& what) {
  pt::ptree tree;
  try {
    std::istringstream in(text);
    pt::read_json(in, tree);
  } catch (const pt::json_parser_error& e) {
    throw IoError(what + " is not valid JSON: " + e.message() + " (line " + std::to_string(e.line()) + ")");
  }
  return tree;
}

std::int64_t to_int(const std::string& s, const std::string& what) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size() || v < 0) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    throw IoError(what + ": '" + s + "' is not a non-negative integer (below 2^63)");
  }
}

/// The tensors of one safetensors file, their offsets made absolute. Throws IoError.
std::vector<SafetensorsTensor> read_header(const std::string& path) {
  reject_special_file(path, "safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open '" + path + "': " + std::strerror(errno));
  const auto file_size = static_cast<std::uint64_t>(fs::file_size(path));
  unsigned char len_bytes[8];
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8))
    throw IoError("'" + path + "' is shorter than a safetensors header (8 bytes): truncated or not safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n == 0) throw IoError("'" + path + "' has a header length of 0 bytes: not a safetensors file");
  if (n > (100u << 20))
    throw IoError("'" + path + "' has a header length of " + std::to_string(n) +
                  " bytes, more than the 100 MiB safetensors allows: not a safetensors file");
  if (8 + n > file_size)
    throw IoError("'" + path + "' has a header length of " + std::to_string(n) + " bytes, beyond its size of " +
                  std::to_string(file_size) + ": truncated or not a safetensors file");
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) throw IoError("cannot read the header of '" + path + "'");
  const pt::ptree tree = parse_json(header, "the header of '" + path + "'");
  // A JSON string, number or null parses as a node with data and no children.
  if (tree.empty() && !tree.data().empty()) throw IoError("the header of '" + path + "' is not a JSON object");
  if (tree.empty()) throw IoError("the header of '" + path + "' lists no tensors");
  const std::uint64_t data_start = 8 + n;
  std::vector<SafetensorsTensor> out;
  std::set<std::string> seen;
  for (const auto& [name, node] : tree) {
    if (name.empty()) throw IoError("the header of '" + path + "' is not a JSON object");
    if (!seen.insert(name).second) throw IoError("the header of '" + path + "' names tensor '" + name + "' twice");
    if (name == "__metadata__") continue;
    const std::string what = "'" + path + "', tensor '" + name + "'";
    SafetensorsTensor t;
    t.name = name;
    t.file = path;
    t.dtype = node.get<std::string>("dtype", "");
    const std::size_t es = dtype_size(t.dtype);
    if (es == 0) throw IoError(what + ": dtype '" + t.dtype + "' is not F32, F16, BF16 or F64");
    const auto shape = node.get_child_optional("shape");
    const auto offsets = node.get_child_optional("data_offsets");
    if (!shape || !offsets) throw IoError(what + " has no shape or data_offsets");
    std::uint64_t numel = 1;
    for (const auto& d : *shape) {
      t.shape.push_back(to_int(d.second.data(), what + " shape"));
      const auto dim = static_cast<std::uint64_t>(t.shape.back());
      if (dim != 0 && numel > (std::uint64_t{1} << 50) / dim) throw IoError(what + ": its shape has more than 2^50 elements");
      numel *= dim;
    }
    std::vector<std::uint64_t> off;
    for (const auto& d : *offsets) off.push_back(static_cast<std::uint64_t>(to_int(d.second.data(), what + " data_offsets")));
    if (off.size() != 2 || off[1] < off[0]) throw IoError(what + ": data_offsets is not [begin, end]");
    t.offset = data_start + off[0];
    t.bytes = off[1] - off[0];
    if (t.bytes != static_cast<std::uint64_t>(t.numel()) * es)
      throw IoError(what + ": " + std::to_string(t.bytes) + " bytes for " + std::to_string(t.numel()) + " " + t.dtype +
                    " values");
    if (t.offset + t.bytes > file_size)
      throw IoError(what + " ends at byte " + std::to_string(t.offset + t.bytes) + ", beyond the file's " +
                    std::to_string(file_size) + ": truncated");
    out.push_back(std::move(t));
  }
  // Tensors may not share bytes: sorted by offset, each ends before the next begins.
  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& t : out) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      throw IoError("'" + path + "': the data of tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name +
                    "' overlap");
  return out;
}

/// A JSON file of a model directory (config.json, the index): at most 64 MiB (the largest
/// index of a real model is a few MB).
std::string read_text(const std::string& path) { return read_small_text_file(path, "JSON file", 64u << 20); }

}  // namespace

std::int64_t SafetensorsTensor::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::map<std::string, SafetensorsTensor> read_safetensors_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError("'" + dir + "' is not a directory (a Hugging Face model directory)");
  std::vector<std::string> files;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index, ec)) {
    const pt::ptree tree = parse_json(read_text(index.string()), "'" + index.string() + "'");
    const auto wm = tree.get_child_optional("weight_map");
    if (!wm) throw IoError("'" + index.string() + "' has no weight_map");
    if (!wm->data().empty() || (!wm->empty() && wm->front().first.empty()))
      throw IoError("'" + index.string() + "': weight_map is not a JSON object (tensor name -> file)");
    if (wm->empty()) throw IoError("'" + index.string() + "': weight_map lists no tensors");
    for (const auto& [name, node] : *wm) {
      if (node.data().empty() || node.data().find('/') != std::string::npos || node.data().find('\\') != std::string::npos ||
          node.data() == "." || node.data() == "..")
        throw IoError("'" + index.string() + "' maps '" + name + "' to '" + node.data() +
                      "', which is not a file name inside the model directory");
      weight_map[name] = node.data();
      const std::string f = (fs::path(dir) / node.data()).string();
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  } else {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".safetensors") files.push_back(it->path().string());
    if (ec) throw IoError("cannot list '" + dir + "': " + ec.message());
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) throw IoError("'" + dir + "' holds no .safetensors file");
  const bool indexed = !weight_map.empty();
  std::map<std::string, SafetensorsTensor> out;
  for (const std::string& f : files) {
    if (!fs::exists(f, ec))
      throw IoError(indexed ? "'" + index.string() + "' names '" + f + "', which does not exist"
                            : "'" + f + "' is a symbolic link to nothing (or a loop of links)");
    for (SafetensorsTensor& t : read_header(f)) {
      if (out.count(t.name)) throw IoError("tensor '" + t.name + "' is in both '" + out[t.name].file + "' and '" + f + "'");
      out[t.name] = std::move(t);
    }
  }
  for (const auto& [name, file] : weight_map) {
    const auto it = out.find(name);
    if (it == out.end()) throw IoError("'" + index.string() + "' maps '" + name + "' to '" + file + "', which lacks it");
  }
  return out;
}

std::vector<double> read_safetensors_values(const SafetensorsTensor& t) {
  reject_special_file(t.file, "safetensors file");
  std::ifstream in(t.file, std::ios::binary);
  if (!in) throw IoError("cannot open '" + t.file + "': " + std::strerror(errno));
  in.seekg(static_cast<std::streamoff>(t.offset));
  std::vector<unsigned char> raw(t.bytes);
  if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(t.bytes)))
    throw IoError("cannot read tensor '" + t.name + "' of '" + t.file + "': truncated");
  const std::int64_t n = t.numel();
  std::vector<double> v(static_cast<size_t>(n));
  auto u16 = [&](std::int64_t i) {
    return static_cast<std::uint16_t>(raw[static_cast<size_t>(2 * i)] | (raw[static_cast<size_t>(2 * i + 1)] << 8));
  };
  for (std::int64_t i = 0; i < n; ++i) {
    if (t.dtype == "F32") {
      float f;
      std::memcpy(&f, raw.data() + 4 * i, 4);
      v[static_cast<size_t>(i)] = f;
    } else if (t.dtype == "F64") {
      std::memcpy(&v[static_cast<size_t>(i)], raw.data() + 8 * i, 8);
    } else if (t.dtype == "BF16") {
      const std::uint32_t bits = static_cast<std::uint32_t>(u16(i)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      v[static_cast<size_t>(i)] = f;
    } else {  // F16: IEEE binary16
      const std::uint16_t h = u16(i);
      const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
      double x;
      if (exp == 0) x = std::ldexp(static_cast<double>(mant), -24);
      else if (exp == 31) x = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
      else x = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
      v[static_cast<size_t>(i)] = sign ? -x : x;
    }
  }
  return v;
}

std::map<std::string, std::string> read_json_object_scalars(const std::string& path) {
  const pt::ptree tree = parse_json(read_text(path), "'" + path + "'");
  if (tree.empty() && !tree.data().empty()) throw IoError("'" + path + "' is not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [key, node] : tree) {
    if (key.empty()) throw IoError("'" + path + "' is not a JSON object");
    if (node.empty()) {
      out[key] = node.data();
    } else if (node.front().first.empty()) {
      out[key] = "[...]";
    } else {
      out[key] = "{...}";
      for (const auto& [k2, n2] : node)  // one level of a nested object, as "key.k2"
        if (n2.empty()) out[key + "." + k2] = n2.data();
    }
  }
  return out;
}

std::vector<std::int64_t> read_json_int_array(const std::string& path, const std::string& key) {
  const pt::ptree tree = parse_json(read_text(path), "'" + path + "'");
  std::vector<std::int64_t> out;
  for (const auto& [k, node] : tree)
    if (k == key) {
      if (!node.data().empty() || (!node.empty() && !node.front().first.empty()))
        throw IoError("'" + path + "': " + key + " is not a JSON array");
      for (const auto& e : node) out.push_back(to_int(e.second.data(), "'" + path + "', " + key));
    }
  return out;
}

}  // namespace trident
