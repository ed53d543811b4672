// IDX reader (Yann LeCun's MNIST format), plain or gzipped through zlib.
// See include/tensorgrad/data/idx.h for the format and the strictness rules.
#include "tensorgrad/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>

#include "tensorgrad/core/error.h"

namespace tensorgrad::data {

namespace {

namespace fs = std::filesystem;

constexpr uint8_t kTypeUnsignedByte = 0x08;
constexpr size_t kDataChunk = size_t(16) << 20;  // bytes per growth step of the data buffer
constexpr unsigned kReadChunk = 1u << 20;         // bytes per gzread call

const char* kDebianHint =
    "install Debian's dataset-fashion-mnist package (apt install dataset-fashion-mnist), "
    "which puts the files in /usr/share/datasets/fashion-mnist/, and pass that directory";

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

std::string hex_byte(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v & 0xFFu);
  return buf;
}

const char* type_code_name(unsigned code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type code";
  }
}

std::string dims_str(const std::vector<int64_t>& dims) {
  if (dims.empty()) return "(no dimensions)";
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += " x ";
    s += std::to_string(dims[i]);
  }
  return s;
}

// Throws for the error zlib recorded on `f` while reading `path`.
[[noreturn]] void throw_read_error(gzFile f, const std::string& path, int saved_errno) {
  int code = Z_OK;
  const char* msg = gzerror(f, &code);
  std::string zmsg = msg ? msg : "";
  if (code == Z_ERRNO || code == Z_OK)
    throw IOError("cannot read IDX file " + in_quotes(path) + ": " + std::strerror(saved_errno) +
                  "; check that the file is readable");
  if (code == Z_MEM_ERROR)
    throw IOError("cannot read IDX file " + in_quotes(path) + ": zlib ran out of memory");
  if (code == Z_BUF_ERROR)
    throw FormatError("the gzip stream of IDX file " + in_quotes(path) + " ends early (zlib: " + zmsg +
                      "); the file is truncated, download it again");
  throw FormatError("IDX file " + in_quotes(path) + " is not a valid gzip stream (zlib: " + zmsg +
                    "); the file is corrupted, download it again");
}

// Reads up to n bytes; returns fewer only at the end of the (decompressed) data.
// `progress`, when given, counts the bytes delivered so far, also when it throws
// (zlib may drop the last partial block of a broken stream, so it is a lower bound).
size_t read_up_to(gzFile f, uint8_t* buf, size_t n, const std::string& path, size_t* progress = nullptr) {
  size_t got = 0;
  while (got < n) {
    unsigned want = unsigned(std::min<size_t>(n - got, kReadChunk));
    errno = 0;
    int r = gzread(f, buf + got, want);
    int saved_errno = errno;
    if (r < 0) throw_read_error(f, path, saved_errno);
    if (r == 0) {
      int code = Z_OK;
      gzerror(f, &code);
      if (code != Z_OK) throw_read_error(f, path, saved_errno);
      break;
    }
    got += size_t(r);
    if (progress) *progress = got;
  }
  return got;
}

GzFile open_idx(const std::string& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st))
    throw IOError("cannot open IDX file " + in_quotes(path) + ": no such file; check the path");
  if (fs::is_directory(st))
    throw IOError("cannot open IDX file " + in_quotes(path) +
                  ": it is a directory; pass the path of a file (or use load_mnist for a directory)");
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    throw IOError("cannot open IDX file " + in_quotes(path) + ": " +
                  (errno ? std::strerror(errno) : "zlib could not open it") +
                  "; check that it exists and is readable");
  gzbuffer(f, 1u << 17);
  return GzFile(f);
}

// What a typed reader (images, labels) requires of a file; the generic
// read_idx requires nothing beyond the format.
struct IdxExpect {
  const char* kind;                          // "image", "label": for messages
  size_t rank;                               // exact number of dimensions
  std::vector<const char*> dim_names;        // one per dimension, outermost first
  const char* rank_advice;                   // after "expected <rank> (" in the wrong-rank message
  uint64_t element_bytes;                    // bytes per element of the tensor returned
  const char* element_desc;                  // "float32 pixel", "int32 label"
};

const IdxExpect kImageFile{"image", 3, {"count", "rows", "cols"},
                           "count x rows x cols, as *-images-idx3-ubyte); pass an image file, not a label file",
                           sizeof(float), "float32 pixel"};
const IdxExpect kLabelFile{"label", 1, {"count"},
                           "count, as *-labels-idx1-ubyte); pass a label file, not an image file",
                           sizeof(int32_t), "int32 label"};

constexpr uint64_t kMaxSize = uint64_t(std::numeric_limits<int64_t>::max());  // Shape's element count and byte sizes
// deflate's largest expansion: a 258-byte match coded in 2 bits, 1032 bytes
// per compressed byte; gzip headers and block headers only lower it.
constexpr uint64_t kMaxDeflateRatio = 1032;

std::string u128_str(unsigned __int128 v) {
  if (v == 0) return "0";
  std::string s;
  while (v) {
    s.insert(s.begin(), char('0' + int(v % 10)));
    v /= 10;
  }
  return s;
}

// "rows x cols" for a typed reader, "dimensions 1 and 2" for the generic one.
std::string dims_label(const std::vector<size_t>& idx, const IdxExpect* e) {
  std::string s;
  if (e) {
    for (size_t k = 0; k < idx.size(); ++k) s += (k ? " x " : "") + std::string(e->dim_names[idx[k]]);
    return s;
  }
  s = idx.size() == 1 ? "dimension " : "dimensions ";
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k) s += k + 1 == idx.size() ? " and " : ", ";
    s += std::to_string(idx[k]);
  }
  return s;
}

// Throws FormatError unless the product of the nonzero dimensions, and that
// product in bytes of the tensor the reader returns, fit in int64: then no
// Shape, sub-product (image size, row size) or byte count built from them
// can overflow, whatever the count (a count of 0 leaves the rest unchecked
// by the element count alone).
void check_dim_products(const std::string& path, const std::vector<int64_t>& dims, const IdxExpect* e) {
  const uint64_t elem = e ? e->element_bytes : 1;
  unsigned __int128 prod = 1;
  std::vector<size_t> used;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) continue;
    used.push_back(i);
    prod *= uint64_t(dims[i]);  // < 2^63 * 2^32 before this check fails: no 128-bit overflow
    const bool elements_overflow = prod > kMaxSize;
    if (!elements_overflow && prod * elem <= kMaxSize) continue;
    std::string values;
    for (size_t k = 0; k < used.size(); ++k) values += (k ? " x " : "") + std::to_string(dims[used[k]]);
    std::string what = "the product of " + dims_label(used, e) + " (" + values + " = " + u128_str(prod) +
                       " elements)";
    if (!elements_overflow)
      what += ", which at " + std::to_string(elem) + " bytes per " + e->element_desc + " is " +
              u128_str(prod * elem) + " bytes,";
    std::string names;
    if (e) {
      names = " (";
      for (size_t k = 0; k < dims.size(); ++k) names += (k ? " x " : "") + std::string(e->dim_names[k]);
      names += ")";
    }
    throw FormatError("IDX file " + in_quotes(path) + " announces dimensions " + dims_str(dims) + names + ": " +
                      what + " does not fit in a signed 64-bit size (at most " + std::to_string(kMaxSize) +
                      "), so no tensor shape can hold it; the header is corrupted or this is not an IDX " +
                      (e ? std::string(e->kind) + " " : std::string()) + "file, download it again");
  }
}

// Throws FormatError when the header announces more data than the file can
// hold: for a plain file its exact size after the header, for a gzipped one
// deflate's largest expansion of its compressed size. Skipped where the size
// is unknown (not a regular file); the chunked read still stops at the end.
void check_file_capacity(gzFile f, const std::string& path, const std::vector<int64_t>& dims, uint64_t header_bytes,
                         uint64_t data_bytes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;
  const uintmax_t file_bytes = fs::file_size(path, ec);
  if (ec) return;
  if (gzdirect(f)) {
    const uint64_t held = file_bytes > header_bytes ? uint64_t(file_bytes) - header_bytes : 0;
    if (data_bytes > held)
      throw FormatError("IDX file " + in_quotes(path) + " is truncated: its header announces " + dims_str(dims) +
                        " = " + std::to_string(data_bytes) + " data bytes, found " + std::to_string(held) +
                        " (the file is " + std::to_string(file_bytes) + " bytes: " + std::to_string(header_bytes) +
                        " of header and " + std::to_string(held) +
                        " of data); the file is incomplete or its header corrupted, download it again");
    return;
  }
  const unsigned __int128 most = (unsigned __int128)file_bytes * kMaxDeflateRatio;
  if ((unsigned __int128)header_bytes + data_bytes > most)
    throw FormatError("IDX file " + in_quotes(path) + " announces " + dims_str(dims) + " = " +
                      std::to_string(data_bytes) + " data bytes, more than its " + std::to_string(file_bytes) +
                      " compressed bytes can hold (deflate expands at most " + std::to_string(kMaxDeflateRatio) +
                      "-fold, so they decompress to at most " + u128_str(most) + " bytes, " +
                      std::to_string(header_bytes) +
                      " of them the header); the header is corrupted or the file truncated, download it again");
}

IdxArray read_idx_checked(const std::string& path, const IdxExpect* expect) {
  GzFile file = open_idx(path);
  gzFile f = file.get();

  // Magic: 00 00 <type code> <number of dimensions>.
  uint8_t magic[4];
  size_t got = read_up_to(f, magic, 4, path);
  if (got < 4)
    throw FormatError("IDX file " + in_quotes(path) + " is too short: expected a 4-byte magic number " +
                      "(Yann LeCun's MNIST IDX format), found " + std::to_string(got) +
                      " bytes; the file is empty or truncated, download it again");
  if (magic[0] != 0 || magic[1] != 0)
    throw FormatError("file " + in_quotes(path) + " is not an IDX file: expected magic bytes 0x00 0x00 " +
                      "<type> <rank> (Yann LeCun's MNIST IDX format), found " + hex_byte(magic[0]) + " " +
                      hex_byte(magic[1]) + " " + hex_byte(magic[2]) + " " + hex_byte(magic[3]) +
                      "; pass an MNIST-style *-idx?-ubyte file, plain or gzipped");
  if (magic[2] != kTypeUnsignedByte)
    throw FormatError("IDX file " + in_quotes(path) + " has element type code " + hex_byte(magic[2]) + " (" +
                      type_code_name(magic[2]) + "); only type code 0x08 (unsigned byte), the type of " +
                      "MNIST and Fashion-MNIST files, is supported; convert the file to unsigned bytes");

  // Dimensions: big-endian uint32 each, outermost first.
  const size_t rank = magic[3];
  std::vector<uint8_t> header(4 * rank);
  got = read_up_to(f, header.data(), header.size(), path);
  if (got < header.size())
    throw FormatError("IDX file " + in_quotes(path) + " has a truncated header: its magic announces " +
                      std::to_string(rank) + " dimensions, so expected " + std::to_string(header.size()) +
                      " bytes of sizes, found " + std::to_string(got) + "; download the file again");
  IdxArray out;
  out.dims.resize(rank);
  for (size_t i = 0; i < rank; ++i) {
    const uint8_t* b = header.data() + 4 * i;
    out.dims[i] = int64_t((uint64_t(b[0]) << 24) | (uint64_t(b[1]) << 16) | (uint64_t(b[2]) << 8) | uint64_t(b[3]));
  }
  if (expect && rank != expect->rank)
    throw FormatError("IDX " + std::string(expect->kind) + " file " + in_quotes(path) + " has " +
                      std::to_string(rank) + " dimensions (" + dims_str(out.dims) + "); expected " +
                      std::to_string(expect->rank) + " (" + expect->rank_advice);

  // Sizes, all checked before anything is allocated for the data.
  check_dim_products(path, out.dims, expect);
  uint64_t expected = 1;
  for (int64_t d : out.dims) expected *= uint64_t(d);  // fits: the nonzero product is <= INT64_MAX
  if (expected > uint64_t(std::numeric_limits<size_t>::max()))
    throw FormatError("IDX file " + in_quotes(path) + " announces " + std::to_string(expected) +
                      " elements, more than this machine can address");
  check_file_capacity(f, path, out.dims, 4 + header.size(), expected);

  // Data, grown chunk by chunk so that a corrupted header announcing a huge
  // array fails on the missing bytes rather than on one huge allocation (the
  // capacity check cannot size a stream that is not a regular file).
  const size_t want = size_t(expected);
  size_t have = 0;
  while (have < want) {
    size_t step = std::min(want - have, kDataChunk);
    out.values.resize(have + step);
    size_t r = 0, progress = 0;
    try {
      r = read_up_to(f, out.values.data() + have, step, path, &progress);
    } catch (const FormatError& e) {
      throw FormatError(std::string(e.what()) + " (its header announces " + dims_str(out.dims) + " = " +
                        std::to_string(want) + " data bytes; at least " + std::to_string(have + progress) +
                        " came before the stream broke)");
    }
    have += r;
    if (r < step) break;
  }
  if (have < want)
    throw FormatError("IDX file " + in_quotes(path) + " is truncated: its header announces " +
                      dims_str(out.dims) + " = " + std::to_string(want) + " data bytes, found " +
                      std::to_string(have) + "; the file is incomplete, download it again");

  // Nothing may follow the last element (this also makes zlib verify the
  // gzip trailer's checksum).
  uint64_t extra = 0;
  std::vector<uint8_t> scratch(64 * 1024);
  for (;;) {
    size_t r = read_up_to(f, scratch.data(), scratch.size(), path);
    extra += r;
    if (r < scratch.size()) break;
  }
  if (extra > 0)
    throw FormatError("IDX file " + in_quotes(path) + " has " + std::to_string(extra) +
                      " bytes after its data: the header announces " + dims_str(out.dims) + " = " +
                      std::to_string(want) + " data bytes, found " + std::to_string(want + extra) +
                      "; header and data disagree, the file is corrupted or not an IDX file");
  return out;
}

}  // namespace

IdxArray read_idx(const std::string& path) { return read_idx_checked(path, nullptr); }

Tensor read_idx_images(const std::string& path, bool flatten) {
  IdxArray a = read_idx_checked(path, &kImageFile);
  // read_idx_checked has checked rank 3 and that every product of these, in
  // float32 bytes, fits in int64.
  const int64_t n = a.dims[0], rows = a.dims[1], cols = a.dims[2];
  Tensor t = flatten ? Tensor::empty(Shape{n, rows * cols}, DType::Float32)
                     : Tensor::empty(Shape{n, rows, cols, 1}, DType::Float32);
  float* dst = t.data<float>();
  // Division (not multiplication by 1/255) so that each value is the correctly
  // rounded v / 255: 255 -> 1.0f exactly, 51 -> 0.2f.
  for (size_t i = 0; i < a.values.size(); ++i) dst[i] = float(a.values[i]) / 255.0f;
  return t;
}

Tensor read_idx_labels(const std::string& path) {
  IdxArray a = read_idx_checked(path, &kLabelFile);  // rank 1 checked
  Tensor t = Tensor::empty(Shape{a.dims[0]}, DType::Int32);
  int32_t* dst = t.data<int32_t>();
  for (size_t i = 0; i < a.values.size(); ++i) dst[i] = int32_t(a.values[i]);
  return t;
}

namespace {

// The path of `name` in `directory`, plain first, then with .gz.
std::string find_mnist_file(const std::string& directory, const std::string& name) {
  fs::path plain = fs::path(directory) / name;
  fs::path gz = fs::path(directory) / (name + ".gz");
  std::error_code ec;
  if (fs::is_regular_file(plain, ec)) return plain.string();
  if (fs::is_regular_file(gz, ec)) return gz.string();
  throw IOError("load_mnist: cannot find " + in_quotes(name) + " (nor " + in_quotes(name + ".gz") +
                ") in directory " + in_quotes(directory) +
                "; put the four MNIST or Fashion-MNIST IDX files there, or " + kDebianHint);
}

Dataset load_split(const std::string& directory, const std::string& prefix, bool flatten) {
  std::string images_path = find_mnist_file(directory, prefix + "-images-idx3-ubyte");
  std::string labels_path = find_mnist_file(directory, prefix + "-labels-idx1-ubyte");
  Dataset d{read_idx_images(images_path, flatten), read_idx_labels(labels_path)};
  if (d.x.shape()[0] != d.y.shape()[0])
    throw FormatError("load_mnist: " + in_quotes(images_path) + " holds " + std::to_string(d.x.shape()[0]) +
                      " images but " + in_quotes(labels_path) + " holds " + std::to_string(d.y.shape()[0]) +
                      " labels; expected one label per image, the files do not belong together");
  return d;
}

}  // namespace

MnistFiles load_mnist(const std::string& directory, bool flatten) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec))
    throw IOError("load_mnist: directory " + in_quotes(directory) +
                  " does not exist (or is not a directory); expected a directory holding "
                  "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
                  "t10k-labels-idx1-ubyte (plain or .gz); " + kDebianHint);
  MnistFiles m{load_split(directory, "train", flatten), load_split(directory, "t10k", flatten)};
  Shape train_item = m.train.x.shape().with_rows(1), test_item = m.test.x.shape().with_rows(1);
  if (train_item != test_item)
    throw FormatError("load_mnist: train images in " + in_quotes(directory) + " have item shape " +
                      train_item.str() + " but test images " + test_item.str() +
                      "; expected the same image size, the files come from different datasets");
  return m;
}

}  // namespace tensorgrad::data
