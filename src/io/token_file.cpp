#include "io/token_file.hpp"

#include "io/input_file.hpp"
#include "core/tokenizer_kind.hpp"
#include "io/hdf5.hpp"
#include "io/output_file.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <xxhash.h>

namespace trident {

namespace {
constexpr std::int64_t kTokenFormatVersion = 1;
constexpr const char* kModelDataset = "tokenizer_model";

void write_tokens(hid_t file, const char* name, const std::vector<std::int32_t>& tokens, bool narrow,
                  const std::string& path, const std::function<void(std::int64_t)>& progress, std::int64_t before) {
  hsize_t n = tokens.size();
  h5::Space sp(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
  h5::Plist dcpl(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate");
  if (n > 0) {  // chunked + compressed would be smaller, but contiguous keeps reads of any window to one seek
    h5::check(H5Pset_layout(dcpl, H5D_CONTIGUOUS), "H5Pset_layout");
  }
  h5::Dataset d(H5Dcreate2(file, name, narrow ? H5T_STD_U16LE : H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                "creating /" + std::string(name) + " in " + path);
  constexpr hsize_t kPiece = hsize_t(1) << 24;  // tokens per write: progress between pieces
  for (hsize_t off = 0; off < n; off += kPiece) {
    const hsize_t m = std::min(kPiece, n - off);
    h5::write_rows(d, H5T_NATIVE_INT32, off, m, tokens.data() + off, "/" + std::string(name) + " to " + path);
    if (progress) progress(before + static_cast<std::int64_t>(off + m));
  }
}
/// XXH64 (seed 0) of token arrays fed in order (int32, host order as written), as 16 hex digits.
class TokenHash {
 public:
  TokenHash() : h_(XXH64_createState(), XXH64_freeState) { XXH64_reset(h_.get(), 0); }
  void update(const std::int32_t* t, std::size_t n) { XXH64_update(h_.get(), t, n * sizeof(std::int32_t)); }
  std::string hex() const {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64_digest(h_.get())));
    return hex;
  }

 private:
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> h_;
};

/// XXH64 of the train tokens then the val tokens: TokenFileInfo::content_hash.
std::string content_hash(const std::vector<std::int32_t>& train, const std::vector<std::int32_t>& val) {
  TokenHash h;
  h.update(train.data(), train.size());
  h.update(val.data(), val.size());
  return h.hex();
}
}  // namespace

void write_token_file(const std::string& path, const TokenFileInfo& info, const std::vector<std::int32_t>& train,
                      const std::vector<std::int32_t>& val, const std::function<void(std::int64_t)>& progress,
                      bool replace) {
  h5::quiet_errors();
  // A new temporary file beside `path`, moved there at the end (io/output_file.hpp): an
  // interrupted write leaves the file that was there, and a run reading it keeps its tokens.
  AtomicFile out(path);
  {
    h5::File f = h5::create_serial_file(out.temp_path(), "cannot create token file '" + path + "' as its temporary file");
    h5::write_attr(f, "format", std::string("trident-tokens"));
    h5::write_attr(f, "format_version", kTokenFormatVersion);
    h5::write_attr(f, "tokenizer", info.tokenizer);
    h5::write_attr(f, "vocab_size", info.vocab_size);
    h5::write_attr(f, "source", info.source);
    h5::write_attr(f, "content_xxh64", content_hash(train, val));
    const bool narrow = info.vocab_size <= 65536;
    write_tokens(f, "train", train, narrow, path, progress, 0);
    write_tokens(f, "val", val, narrow, path, progress, static_cast<std::int64_t>(train.size()));
    if (!info.vocab.empty()) {
      hsize_t n = info.vocab.size();
      h5::Space sp(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
      h5::Dataset d(H5Dcreate2(f, "vocab", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    "creating /vocab");
      h5::write_all(d, H5T_NATIVE_INT32, info.vocab.data(), "/vocab to " + path);
    }
    if (!info.model.empty()) {
      hsize_t n = info.model.size();
      h5::Space sp(H5Screate_simple(1, &n, nullptr), "H5Screate_simple");
      h5::Dataset d(H5Dcreate2(f, kModelDataset, H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    "creating /" + std::string(kModelDataset) + " in " + path);
      h5::write_all(d, H5T_NATIVE_UINT8, info.model.data(), "/" + std::string(kModelDataset) + " to " + path);
    }
    f.close("closing token file '" + path + "'");
  }
  out.commit(replace);  // fsync (through its own descriptor of the same file), then the rename
}

struct TokenFileReader::Impl {
  h5::File file;
  h5::Dataset train, val;
};

TokenFileReader::TokenFileReader(const std::string& path) : impl_(std::make_unique<Impl>()), path_(path) {
  h5::quiet_errors();
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  reject_special_file(path, "token file");  // a FIFO would block HDF5's probe below
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    FILE* fp = std::fopen(path.c_str(), "rb");
    if (fp == nullptr)
      throw IoError("token file '" + path + "' does not exist or cannot be read (a relative path is relative to the "
                    "working directory, here '" + std::filesystem::current_path().string() +
                    "'); write it with `trident prep --output " + path + " TEXT_FILE...`");
    std::fclose(fp);
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw IoError("token file '" + path + "' is a directory: give the token file in it (trident prep --output)");
    throw IoError("token file '" + path + "' is not an HDF5 file (or is truncated); write it with `trident prep`");
  }
  // Read-only access needs no file lock; skipping it lets many ranks open the file on file
  // systems without flock support.
  h5::Plist fapl(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
  H5Pset_file_locking(fapl, false, true);
  try {
    impl_->file = h5::File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), "cannot open token file '" + path + "'");
  } catch (const IoError& e) {  // an HDF5 signature but no readable file: cut short or damaged
    throw IoError(std::string(e.what()) + "; the file is damaged or truncated (an interrupted copy or prep?): write it "
                  "again with `trident prep`");
  }
  hid_t f = impl_->file;
  if (!h5::has_attr(f, "format") || h5::read_attr_string(f, "format") != "trident-tokens")
    throw IoError("'" + path + "' is an HDF5 file but not a Trident token file (no format = \"trident-tokens\")");
  const std::int64_t version = h5::read_attr_int(f, "format_version");
  if (version != kTokenFormatVersion)
    throw IoError("token file '" + path + "' has format_version " + std::to_string(version) + "; this build reads " +
                  std::to_string(kTokenFormatVersion));
  info_.tokenizer = h5::read_attr_string(f, "tokenizer");
  info_.vocab_size = h5::read_attr_int(f, "vocab_size");
  if (!parse_tokenizer_kind(info_.tokenizer))
    throw IoError("token file '" + path + "' names an unknown tokenizer '" + info_.tokenizer + "' (expected " +
                  tokenizer_kind_names() + ")");
  if (info_.vocab_size < 1 || info_.vocab_size > 2147483647)
    throw IoError("token file '" + path + "' has vocab_size " + std::to_string(info_.vocab_size) +
                  ", outside 1 .. 2^31 - 1");
  if (h5::has_attr(f, "source")) info_.source = h5::read_attr_string(f, "source");
  if (h5::has_attr(f, "content_xxh64")) info_.content_hash = h5::read_attr_string(f, "content_xxh64");
  for (const char* split : {"train", "val"})
    if (!h5::exists(f, split)) throw IoError("token file '" + path + "' has no /" + std::string(split) + " dataset");
  impl_->train = h5::Dataset(H5Dopen2(f, "train", H5P_DEFAULT), "opening /train in " + path);
  impl_->val = h5::Dataset(H5Dopen2(f, "val", H5P_DEFAULT), "opening /val in " + path);
  // Token ids are integers: a float dataset would be converted (and rounded) silently on read.
  for (const char* split : {"train", "val"}) {
    const hid_t d = std::string(split) == "train" ? impl_->train.id() : impl_->val.id();
    const hid_t t = H5Dget_type(d);
    const H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    if (t >= 0) H5Tclose(t);
    if (cls != H5T_INTEGER)
      throw IoError("token file '" + path + "': /" + split + " holds " +
                    (cls == H5T_FLOAT ? std::string("floating-point values") : std::string("values of a non-integer type")) +
                    ", not integer token ids; write it with `trident prep`");
  }
  info_.n_train = h5::extent_1d(impl_->train, "/train in " + path);
  info_.n_val = h5::extent_1d(impl_->val, "/val in " + path);
  if (h5::exists(f, "vocab")) {
    h5::Dataset d(H5Dopen2(f, "vocab", H5P_DEFAULT), "opening /vocab");
    info_.vocab.resize(static_cast<size_t>(h5::extent_1d(d, "/vocab in " + path)));
    h5::read_all(d, H5T_NATIVE_INT32, info_.vocab.data(), "/vocab from " + path);
  }
  const std::string model = "/" + std::string(kModelDataset);
  if (h5::exists(f, kModelDataset)) {
    h5::Dataset d(H5Dopen2(f, kModelDataset, H5P_DEFAULT), "opening " + model + " in " + path);
    info_.model.resize(static_cast<size_t>(h5::extent_1d(d, model + " in " + path)));
    h5::read_all(d, H5T_NATIVE_UINT8, info_.model.data(), model + " from " + path);
  }
  if (tokenizer_info(*parse_tokenizer_kind(info_.tokenizer)).stores_model && info_.model.empty())
    throw IoError("token file '" + path + "' has a " + info_.tokenizer + " tokenizer but no " + model +
                  " (its trained model); write it again with `trident prep --tokenizer " + info_.tokenizer + "`");
}

TokenFileReader::~TokenFileReader() {
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  impl_.reset();
}

std::int64_t TokenFileReader::size(const std::string& split) const {
  if (split == "train") return info_.n_train;
  if (split == "val") return info_.n_val;
  throw IoError("unknown split '" + split + "'");
}

void TokenFileReader::read(const std::string& split, std::int64_t offset, std::int64_t count, std::int32_t* out) const {
  std::lock_guard<std::recursive_mutex> hdf5_lock(h5::mutex());
  const std::int64_t n = size(split);
  if (offset < 0 || count < 0 || offset + count > n)
    throw IoError("token file '" + path_ + "': range [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                  ") is outside /" + split + " (" + std::to_string(n) + " tokens)");
  if (count == 0) return;
  hid_t d = split == "train" ? impl_->train.id() : impl_->val.id();
  h5::read_rows(d, H5T_NATIVE_INT32, static_cast<hsize_t>(offset), static_cast<hsize_t>(count), out,
                "/" + split + " [" + std::to_string(offset) + ", +" + std::to_string(count) + ") from " + path_);
}

TokenFileReader::Contents TokenFileReader::verify(const std::function<void(std::int64_t)>& progress) const {
  constexpr std::int64_t kPiece = std::int64_t{1} << 24;
  Contents c;
  TokenHash h;
  std::vector<std::int32_t> buf;
  for (const char* split : {"train", "val"}) {
    const std::int64_t n = size(split);
    for (std::int64_t off = 0; off < n; off += kPiece) {
      const std::int64_t m = std::min(kPiece, n - off);
      buf.resize(static_cast<std::size_t>(m));
      read(split, off, m, buf.data());
      h.update(buf.data(), buf.size());
      const auto [lo, hi] = std::minmax_element(buf.begin(), buf.end());
      c.min_id = c.tokens == 0 ? *lo : std::min(c.min_id, *lo);
      c.max_id = c.tokens == 0 ? *hi : std::max(c.max_id, *hi);
      c.tokens += m;
      if (progress) progress(c.tokens);
    }
  }
  c.hash = h.hex();
  return c;
}

}  // namespace trident
