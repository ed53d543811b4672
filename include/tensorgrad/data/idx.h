#pragma once
// Reader for Yann LeCun's IDX format, the file format of MNIST and
// Fashion-MNIST (http://yann.lecun.com/exdb/mnist/), plain or gzipped.
//
// An IDX file is a 4-byte magic number (two zero bytes, an element type code,
// the number of dimensions), then each dimension as a big-endian uint32,
// outermost first, then the elements in row-major order. Only the type code
// 0x08 (unsigned byte), the type of every MNIST-style file, is supported.
//
// Files are read through zlib's gzread, so a file may be stored plain or
// gzip-compressed whatever its name; the reader tells them apart by content.
//
// Strictness: the element count the header announces must be present exactly.
// Missing bytes throw FormatError (naming how many were expected and how many
// came); bytes left over after the last element also throw FormatError, since
// they mean the header and the data disagree (a wrong or corrupted file).
//
// Sizes: dimensions are unsigned 32-bit, so a header can announce sizes no
// tensor can hold. Before any Shape is made or any data allocated, every
// reader checks that the product of the nonzero dimensions (and so every
// sub-product, such as rows x cols of an image file whose count is 0) fits
// in int64, for read_idx_images and read_idx_labels also in bytes of the
// float32 / int32 tensor they return, and that the file can hold the data
// announced (a plain file: its size after the header; a gzipped one: 1032
// times its compressed size, deflate's largest expansion). Each failure is a
// FormatError naming the dimensions, their values and the size that does not
// fit.
#include <cstdint>
#include <string>
#include <vector>

#include "tensorgrad/core/tensor.h"

namespace tensorgrad::data {

/// Raw IDX array: dims outermost first, unsigned-byte elements (type code 0x08).
/// `values.size()` is the product of `dims` (1 for zero dimensions).
struct IdxArray {
  std::vector<int64_t> dims;    ///< the dimensions, outermost first
  std::vector<uint8_t> values;  ///< the elements, row-major
};

/// Reads one file in Yann LeCun's MNIST IDX format, plain or gzipped.
///
/// Returns the dimensions (outermost first) and the raw unsigned-byte elements
/// in row-major order.
///
/// Throws IOError when the file cannot be opened or read (missing, a
/// directory, no permission, a read failure); FormatError when its contents
/// are not a valid unsigned-byte IDX array: nonzero magic bytes, an element
/// type code other than 0x08 (the message names the code), a header or data
/// shorter than announced (the message gives expected and found byte counts),
/// bytes after the last element, a corrupt gzip stream, dimensions whose
/// nonzero product does not fit in int64 (the message names the dimensions,
/// their values and the product), or more data announced than the file can
/// hold (checked before the data is read).
IdxArray read_idx(const std::string& path);

/// Reads an IDX image file (3 dimensions: count, rows, cols, as
/// train-images-idx3-ubyte) in Yann LeCun's MNIST IDX format, plain or gzipped.
///
/// Returns float32 pixels scaled to [0, 1] (byte value / 255), of shape
/// `{n, rows * cols}` when `flatten` is true, else `{n, rows, cols, 1}`
/// (Keras channels-last, one channel).
///
/// Throws as read_idx, and FormatError when the file does not have exactly
/// 3 dimensions (a label file passed by mistake, say) or when count x rows x
/// cols (zero dimensions left out) as 4-byte float32 pixels does not fit in
/// int64: a header of 0 x 4294967295 x 4294967295 is rejected, naming rows x
/// cols and their product, not turned into a negative Shape.
Tensor read_idx_images(const std::string& path, bool flatten = true);

/// Reads an IDX label file (1 dimension: count, as train-labels-idx1-ubyte) in
/// Yann LeCun's MNIST IDX format, plain or gzipped.
///
/// Returns the class ids as int32, shape `{n}`, values 0..255 as stored
/// (0..9 for MNIST and Fashion-MNIST).
///
/// Throws as read_idx, and FormatError when the file does not have exactly
/// 1 dimension (an image file passed by mistake, say), checked before its
/// sizes.
Tensor read_idx_labels(const std::string& path);

/// A dataset split: inputs `x` (float32) and class ids `y` (int32, shape {n}).
struct Dataset {
  Tensor x;  ///< the inputs, one row per example
  Tensor y;  ///< the class ids {n}
};

/// The standard train and test splits of MNIST or Fashion-MNIST.
struct MnistFiles {
  Dataset train;  ///< the train-* files
  Dataset test;   ///< the t10k-* files
};

/// Loads MNIST or Fashion-MNIST (Yann LeCun's MNIST IDX format) from
/// `directory`, which holds the four standard files
///   train-images-idx3-ubyte, train-labels-idx1-ubyte,
///   t10k-images-idx3-ubyte,  t10k-labels-idx1-ubyte,
/// each either plain or with a `.gz` suffix (the plain name is tried first).
///
/// `x` is as read_idx_images (float32 in [0, 1], `{n, rows * cols}` when
/// `flatten`, else `{n, rows, cols, 1}`), `y` as read_idx_labels (int32 `{n}`).
/// For the standard datasets: train 60000 rows, test 10000 rows, 28 x 28 pixels.
///
/// Throws IOError when the directory or one of the files is missing (the
/// message names the file and the directory and suggests installing Debian's
/// dataset-fashion-mnist package, whose files are in
/// /usr/share/datasets/fashion-mnist/); FormatError, besides the cases of
/// read_idx_images and read_idx_labels, when a split's image count differs
/// from its label count or the train and test images differ in size.
MnistFiles load_mnist(const std::string& directory, bool flatten = true);

}  // namespace tensorgrad::data
