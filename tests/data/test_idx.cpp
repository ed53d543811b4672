// Tests of the IDX (MNIST format) reader: plain and gzipped files written into
// a temporary directory, exact values, shapes, and every error by type and message.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/data/idx.h"
#include "test_files.h"

namespace fs = std::filesystem;
using namespace tensorgrad;
using namespace tensorgrad::data;

namespace {

// Bytes of an IDX file: magic 00 00 <type> <rank>, big-endian dims, data.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                               uint8_t type = 0x08) {
  std::vector<uint8_t> b = {0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims) {
    b.push_back(uint8_t(d >> 24));
    b.push_back(uint8_t(d >> 16));
    b.push_back(uint8_t(d >> 8));
    b.push_back(uint8_t(d));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_plain(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

void write_gz(const fs::path& p, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(p.string().c_str(), "wb");
  ASSERT_NE(f, nullptr) << p;
  if (!bytes.empty()) ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Expects `f()` to throw exactly exception type E with `needle` in its message.
template <class E, class F>
void expect_throw_with(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing \"" << needle << "\"; nothing was thrown";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << needle << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type; message: " << e.what();
  }
}

// Each test's files in a fresh folder, removed when the test ends.
class TempDirTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return tmp_ / name; }
  const test_support::TempDir tmp_{"tensorgrad_idx"};
  const fs::path dir_ = tmp_.path;
};

class IdxTest : public TempDirTest {};
class MnistTest : public TempDirTest {
 protected:
  // Writes the four standard files: n_train / n_test images of 2 x 3 pixels,
  // pixel k of image i = (i * 6 + k) % 256, label of image i = i % 10.
  void write_set(int n_train, int n_test, int n_train_labels, int n_test_labels, bool gz) {
    auto images = [](int n) {
      std::vector<uint8_t> v(size_t(n) * 6);
      for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i % 256);
      return idx_bytes({uint32_t(n), 2, 3}, v);
    };
    auto labels = [](int n) {
      std::vector<uint8_t> v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i % 10);
      return idx_bytes({uint32_t(n)}, v);
    };
    auto write = [&](const std::string& name, const std::vector<uint8_t>& b) {
      if (gz) write_gz(dir_ / (name + ".gz"), b);
      else write_plain(dir_ / name, b);
    };
    write("train-images-idx3-ubyte", images(n_train));
    write("train-labels-idx1-ubyte", labels(n_train_labels));
    write("t10k-images-idx3-ubyte", images(n_test));
    write("t10k-labels-idx1-ubyte", labels(n_test_labels));
  }
};

const std::vector<uint8_t> kPixels = {0, 51, 255, 102, 1, 254, 10, 20, 30, 40, 50, 60};  // 2 images 2 x 3

}  // namespace

TEST_F(IdxTest, ReadsPlainArray) {
  write_plain(path("a"), idx_bytes({2, 2, 3}, kPixels));
  IdxArray a = read_idx(path("a"));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(a.values, kPixels);
}

TEST_F(IdxTest, ReadsGzippedArray) {
  write_gz(path("a.gz"), idx_bytes({2, 2, 3}, kPixels));
  IdxArray a = read_idx(path("a.gz"));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(a.values, kPixels);
}

TEST_F(IdxTest, ReadsLargeGzippedArrayAcrossChunks) {
  // Over one read chunk (1 MiB), so the chunked read loop is exercised.
  std::vector<uint8_t> v(3 * 1000 * 1000 / 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t((i * 7919) % 251);
  write_gz(path("big.gz"), idx_bytes({1500, 1000}, v));
  IdxArray a = read_idx(path("big.gz"));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{1500, 1000}));
  EXPECT_EQ(a.values, v);
}

TEST_F(IdxTest, ImagesFlattenedScaledToUnitRange) {
  write_plain(path("img"), idx_bytes({2, 2, 3}, kPixels));
  Tensor x = read_idx_images(path("img"));
  EXPECT_EQ(x.dtype(), DType::Float32);
  EXPECT_EQ(x.shape(), (Shape{2, 6}));
  const float* p = x.data<float>();
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[1], 0.2f);  // 51 / 255, exactly the float nearest 0.2
  EXPECT_EQ(p[2], 1.0f);  // 255 -> 1
  EXPECT_EQ(p[3], 0.4f);  // 102 / 255
  for (size_t i = 0; i < kPixels.size(); ++i) EXPECT_EQ(p[i], float(kPixels[i]) / 255.0f) << i;
}

TEST_F(IdxTest, ImagesUnflattenedChannelsLast) {
  write_gz(path("img.gz"), idx_bytes({2, 2, 3}, kPixels));
  Tensor x = read_idx_images(path("img.gz"), /*flatten=*/false);
  EXPECT_EQ(x.shape(), (Shape{2, 2, 3, 1}));
  const float* p = x.data<float>();
  // Image 1, row 1, col 2 is the last byte (60).
  EXPECT_EQ(p[1 * 6 + 1 * 3 + 2], 60.0f / 255.0f);
  EXPECT_EQ(p[2], 1.0f);
}

TEST_F(IdxTest, LabelsAsInt32) {
  write_plain(path("lab"), idx_bytes({5}, {3, 0, 9, 255, 7}));
  Tensor y = read_idx_labels(path("lab"));
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(y.shape(), (Shape{5}));
  const int32_t* p = y.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(p, p + 5), (std::vector<int32_t>{3, 0, 9, 255, 7}));
}

TEST_F(IdxTest, EmptyArrayAllowed) {
  write_plain(path("lab"), idx_bytes({0}, {}));
  Tensor y = read_idx_labels(path("lab"));
  EXPECT_EQ(y.shape(), (Shape{0}));
}

TEST_F(IdxTest, MissingFileIsIOError) {
  expect_throw_with<IOError>([&] { read_idx(path("nope")); }, "no such file");
  expect_throw_with<IOError>([&] { read_idx_images(path("nope")); }, path("nope"));
}

TEST_F(IdxTest, DirectoryIsIOError) {
  expect_throw_with<IOError>([&] { read_idx(dir_.string()); }, "is a directory");
}

TEST_F(IdxTest, EmptyFileIsFormatError) {
  write_plain(path("empty"), {});
  expect_throw_with<FormatError>([&] { read_idx(path("empty")); }, "found 0 bytes");
}

TEST_F(IdxTest, BadMagicIsFormatError) {
  std::vector<uint8_t> b = idx_bytes({2}, {1, 2});
  b[0] = 0x12;
  b[1] = 0x34;
  write_plain(path("bad"), b);
  expect_throw_with<FormatError>([&] { read_idx(path("bad")); }, "not an IDX file");
  expect_throw_with<FormatError>([&] { read_idx(path("bad")); }, "found 0x12 0x34 0x08 0x01");
  write_plain(path("text"), {'h', 'e', 'l', 'l', 'o', '\n'});
  expect_throw_with<FormatError>([&] { read_idx_labels(path("text")); }, "expected magic bytes 0x00 0x00");
}

TEST_F(IdxTest, UnsupportedTypeCodeIsFormatError) {
  write_plain(path("f32"), idx_bytes({1}, {0, 0, 0, 0}, 0x0D));
  expect_throw_with<FormatError>([&] { read_idx(path("f32")); }, "type code 0x0D (float32)");
  expect_throw_with<FormatError>([&] { read_idx(path("f32")); }, "only type code 0x08");
  write_gz(path("weird.gz"), idx_bytes({1}, {0}, 0x42));
  expect_throw_with<FormatError>([&] { read_idx(path("weird.gz")); }, "0x42");
}

TEST_F(IdxTest, TruncatedDataIsFormatError) {
  std::vector<uint8_t> b = idx_bytes({2, 3}, {1, 2, 3, 4});  // 6 announced, 4 present
  write_plain(path("short"), b);
  expect_throw_with<FormatError>([&] { read_idx(path("short")); }, "truncated");
  expect_throw_with<FormatError>([&] { read_idx(path("short")); }, "2 x 3 = 6 data bytes, found 4");
  write_gz(path("short.gz"), b);
  expect_throw_with<FormatError>([&] { read_idx(path("short.gz")); }, "6 data bytes, found 4");
}

TEST_F(IdxTest, TruncatedHeaderIsFormatError) {
  std::vector<uint8_t> b = idx_bytes({2, 3}, {});
  b.resize(9);  // magic + one dim + 1 byte of the second
  write_plain(path("hdr"), b);
  expect_throw_with<FormatError>([&] { read_idx(path("hdr")); }, "expected 8 bytes of sizes, found 5");
}

TEST_F(IdxTest, TruncatedGzipStreamIsFormatError) {
  std::vector<uint8_t> data(4096);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t((i * 31) ^ (i >> 3));
  write_gz(path("full.gz"), idx_bytes({4096}, data));
  std::vector<uint8_t> gz = read_all(path("full.gz"));
  gz.resize(gz.size() / 2);
  write_plain(path("cut.gz"), gz);
  EXPECT_THROW(read_idx(path("cut.gz")), FormatError);
  expect_throw_with<FormatError>([&] { read_idx(path("cut.gz")); }, "download it again");
}

TEST_F(IdxTest, CorruptGzipChecksumIsFormatError) {
  write_gz(path("ok.gz"), idx_bytes({3}, {1, 2, 3}));
  std::vector<uint8_t> gz = read_all(path("ok.gz"));
  gz[gz.size() - 8] ^= 0xFF;  // CRC-32 of the gzip trailer
  write_plain(path("crc.gz"), gz);
  expect_throw_with<FormatError>([&] { read_idx(path("crc.gz")); }, "corrupted");
}

TEST_F(IdxTest, TrailingBytesAreFormatError) {
  write_plain(path("long"), idx_bytes({2}, {1, 2, 3, 4, 5}));
  expect_throw_with<FormatError>([&] { read_idx(path("long")); }, "3 bytes after its data");
}

TEST_F(IdxTest, WrongRankIsFormatError) {
  write_plain(path("lab"), idx_bytes({3}, {1, 2, 3}));
  write_plain(path("img"), idx_bytes({1, 1, 2}, {1, 2}));
  expect_throw_with<FormatError>([&] { read_idx_images(path("lab")); }, "has 1 dimensions (3); expected 3");
  expect_throw_with<FormatError>([&] { read_idx_labels(path("img")); }, "has 3 dimensions (1 x 1 x 2); expected 1");
}

// Dimensions are big-endian uint32s, so a header can announce sizes whose
// products no int64 (and so no Shape) can hold. Every reader must reject them
// with FormatError before it makes a Shape or allocates anything.
TEST_F(IdxTest, ImageDimensionsWhoseProductOverflowsAreFormatError) {
  // The defect report's header: count 0, rows 4294967295, cols 4294967295.
  write_plain(path("img"), idx_bytes({0, 4294967295u, 4294967295u}, {}));
  for (bool flatten : {true, false}) {
    auto read = [&] { read_idx_images(path("img"), flatten); };
    expect_throw_with<FormatError>(read, path("img"));
    expect_throw_with<FormatError>(read, "rows x cols (4294967295 x 4294967295 = 18446744065119617025 elements)");
    expect_throw_with<FormatError>(read, "does not fit in a signed 64-bit size");
  }
  // Through load_mnist as well.
  write_plain(path("train-images-idx3-ubyte"), idx_bytes({0, 4294967295u, 4294967295u}, {}));
  write_plain(path("train-labels-idx1-ubyte"), idx_bytes({0}, {}));
  expect_throw_with<FormatError>([&] { load_mnist(dir_.string()); }, "4294967295 x 4294967295");
}

TEST_F(IdxTest, GenericReaderRejectsOverflowingDimensions) {
  write_plain(path("zero_count"), idx_bytes({0, 4294967295u, 4294967295u}, {}));
  expect_throw_with<FormatError>([&] { read_idx(path("zero_count")); },
                                 "dimensions 1 and 2 (4294967295 x 4294967295 = 18446744065119617025 elements)");
  write_plain(path("all_huge"), idx_bytes({4294967295u, 4294967295u, 4294967295u}, {}));
  expect_throw_with<FormatError>([&] { read_idx(path("all_huge")); },
                                 "dimensions 0 and 1 (4294967295 x 4294967295 = 18446744065119617025 elements)");
  expect_throw_with<FormatError>([&] { read_idx(path("all_huge")); }, "does not fit in a signed 64-bit size");
  // A label file has one dimension, which always fits; an image file read as
  // labels is a rank error, not an overflow.
  expect_throw_with<FormatError>([&] { read_idx_labels(path("all_huge")); }, "has 3 dimensions");
}

TEST_F(IdxTest, ImagesWhoseFloatBytesOverflowAreFormatError) {
  // 2^31 x 2^31 = 2^62 pixels fit in int64, but not as 4-byte float32 values.
  write_plain(path("img"), idx_bytes({0, 2147483648u, 2147483648u}, {}));
  for (bool flatten : {true, false}) {
    auto read = [&] { read_idx_images(path("img"), flatten); };
    expect_throw_with<FormatError>(read, "rows x cols (2147483648 x 2147483648 = 4611686018427387904 elements)");
    expect_throw_with<FormatError>(read, "4 bytes per float32 pixel");
    expect_throw_with<FormatError>(read, "does not fit in a signed 64-bit size");
  }
}

TEST_F(IdxTest, HeaderAnnouncingMoreThanThePlainFileHoldsIsFormatError) {
  write_plain(path("lab"), idx_bytes({4294967295u}, {1, 2, 3}));
  expect_throw_with<FormatError>([&] { read_idx_labels(path("lab")); }, "4294967295 = 4294967295 data bytes, found 3");
  expect_throw_with<FormatError>([&] { read_idx_labels(path("lab")); }, "the file is 11 bytes: 8 of header and 3 of data");
  write_plain(path("img"), idx_bytes({1, 65536, 65536}, {1, 2, 3, 4, 5, 6}));
  for (bool flatten : {true, false})
    expect_throw_with<FormatError>([&] { read_idx_images(path("img"), flatten); },
                                   "1 x 65536 x 65536 = 4294967296 data bytes, found 6 (the file is 22 bytes");
  expect_throw_with<FormatError>([&] { read_idx(path("img")); }, "download it again");
}

TEST_F(IdxTest, HeaderAnnouncingMoreThanTheGzipFileCanHoldIsFormatError) {
  write_gz(path("img.gz"), idx_bytes({1, 65536, 65536}, {1, 2, 3, 4, 5, 6}));
  const auto gz_size = std::to_string(fs::file_size(path("img.gz")));
  for (bool flatten : {true, false}) {
    auto read = [&] { read_idx_images(path("img.gz"), flatten); };
    expect_throw_with<FormatError>(read, "1 x 65536 x 65536 = 4294967296 data bytes");
    expect_throw_with<FormatError>(read, "more than its " + gz_size + " compressed bytes can hold");
    expect_throw_with<FormatError>(read, "1032");
  }
}

TEST_F(IdxTest, HighlyCompressedGzipFileStillReads) {
  // Zeros compress close to deflate's limit; the size bound must not reject them.
  std::vector<uint8_t> zeros(4 * 1000 * 1000, 0);
  write_gz(path("zeros.gz"), idx_bytes({4000, 1000}, zeros));
  ASSERT_LT(fs::file_size(path("zeros.gz")), 10000u);
  IdxArray a = read_idx(path("zeros.gz"));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{4000, 1000}));
  EXPECT_EQ(a.values, zeros);
}

TEST_F(MnistTest, LoadsPlainDirectory) {
  write_set(5, 3, 5, 3, /*gz=*/false);
  MnistFiles m = load_mnist(dir_.string());
  EXPECT_EQ(m.train.x.shape(), (Shape{5, 6}));
  EXPECT_EQ(m.train.y.shape(), (Shape{5}));
  EXPECT_EQ(m.test.x.shape(), (Shape{3, 6}));
  EXPECT_EQ(m.test.y.shape(), (Shape{3}));
  EXPECT_EQ(m.train.y.dtype(), DType::Int32);
  EXPECT_EQ(m.train.x.data<float>()[29], 29.0f / 255.0f);
  EXPECT_EQ(m.train.y.data<int32_t>()[4], 4);
}

TEST_F(MnistTest, LoadsGzippedDirectoryUnflattened) {
  write_set(4, 2, 4, 2, /*gz=*/true);
  MnistFiles m = load_mnist(dir_.string(), /*flatten=*/false);
  EXPECT_EQ(m.train.x.shape(), (Shape{4, 2, 3, 1}));
  EXPECT_EQ(m.test.x.shape(), (Shape{2, 2, 3, 1}));
  EXPECT_EQ(m.test.x.data<float>()[11], 11.0f / 255.0f);
  EXPECT_EQ(m.test.y.data<int32_t>()[1], 1);
}

TEST_F(MnistTest, PrefersPlainOverGz) {
  write_set(4, 2, 4, 2, /*gz=*/true);
  write_plain(dir_ / "train-labels-idx1-ubyte", idx_bytes({4}, {9, 9, 9, 9}));
  MnistFiles m = load_mnist(dir_.string());
  EXPECT_EQ(m.train.y.data<int32_t>()[0], 9);
}

TEST_F(MnistTest, MissingFileNamesFileDirectoryAndDebianPackage) {
  write_set(4, 2, 4, 2, /*gz=*/false);
  fs::remove(dir_ / "t10k-labels-idx1-ubyte");
  auto load = [&] { load_mnist(dir_.string()); };
  expect_throw_with<IOError>(load, "t10k-labels-idx1-ubyte");
  expect_throw_with<IOError>(load, dir_.string());
  expect_throw_with<IOError>(load, "dataset-fashion-mnist");
  expect_throw_with<IOError>(load, "/usr/share/datasets/fashion-mnist");
}

TEST_F(MnistTest, MissingDirectoryIsIOError) {
  std::string missing = (dir_ / "no_such_dir").string();
  expect_throw_with<IOError>([&] { load_mnist(missing); }, missing);
  expect_throw_with<IOError>([&] { load_mnist(missing); }, "dataset-fashion-mnist");
}

TEST_F(MnistTest, MismatchedCountsAreFormatError) {
  write_set(5, 3, 4, 3, /*gz=*/false);
  expect_throw_with<FormatError>([&] { load_mnist(dir_.string()); }, "holds 5 images but");
  expect_throw_with<FormatError>([&] { load_mnist(dir_.string()); }, "holds 4 labels");
}

TEST(MnistFashionTest, LoadsInstalledFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " not installed (Debian package dataset-fashion-mnist)";
  MnistFiles m = load_mnist(dir);
  ASSERT_EQ(m.train.x.shape(), (Shape{60000, 784}));
  ASSERT_EQ(m.train.y.shape(), (Shape{60000}));
  ASSERT_EQ(m.test.x.shape(), (Shape{10000, 784}));
  ASSERT_EQ(m.test.y.shape(), (Shape{10000}));
  for (const Dataset* d : {&m.train, &m.test}) {
    const float* x = d->x.data<float>();
    float lo = 1.0f, hi = 0.0f;
    for (int64_t i = 0; i < d->x.numel(); ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    EXPECT_GE(lo, 0.0f);
    EXPECT_LE(hi, 1.0f);
    EXPECT_EQ(hi, 1.0f);  // some pixel is saturated
    const int32_t* y = d->y.data<int32_t>();
    for (int64_t i = 0; i < d->y.numel(); ++i) {
      ASSERT_GE(y[i], 0) << i;
      ASSERT_LE(y[i], 9) << i;
    }
  }
}
