#pragma once
// Reading ONNX's stored tensors in tests (needs ONNX's protobuf classes).
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/core/tensor.h"

namespace test_support {

// A float32 ONNX tensor named `name` of shape `dims` holding `v` (raw data,
// little-endian), as an initializer or a Constant's value.
inline onnx::TensorProto onnx_float_tensor(const std::string& name, const std::vector<int64_t>& dims,
                                           const std::vector<float>& v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  return t;
}

// An ONNX TensorProto file (ONNX test data, the PyTorch fixtures): float32 as
// it is, int64 (token ids) as int32, bool (masks) as float32 0 and 1, as the
// importer takes them; other types, and ranks above Shape::kMaxRank, undefined.
inline tensorgrad::Tensor read_onnx_tensor(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  onnx::TensorProto t;
  if (!t.ParseFromIstream(&in)) return tensorgrad::Tensor();
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  if (dims.size() > size_t(tensorgrad::Shape::kMaxRank)) return tensorgrad::Tensor();
  if (t.data_type() == onnx::TensorProto::INT64) {
    std::vector<int32_t> v;
    for (size_t i = 0; i + 8 <= t.raw_data().size(); i += 8) {
      int64_t x;
      std::memcpy(&x, t.raw_data().data() + i, 8);
      v.push_back(int32_t(x));
    }
    for (int64_t x : t.int64_data()) v.push_back(int32_t(x));
    return tensorgrad::Tensor::from_vector(std::span<const int32_t>(v), tensorgrad::Shape(dims));
  }
  if (t.data_type() == onnx::TensorProto::BOOL) {
    std::vector<float> v;
    for (char c : t.raw_data()) v.push_back(c != 0 ? 1.0f : 0.0f);
    for (int32_t x : t.int32_data()) v.push_back(x != 0 ? 1.0f : 0.0f);
    return tensorgrad::Tensor::from_vector(std::span<const float>(v), tensorgrad::Shape(dims));
  }
  if (t.data_type() != onnx::TensorProto::FLOAT) return tensorgrad::Tensor();
  tensorgrad::Tensor out = tensorgrad::Tensor::empty(tensorgrad::Shape(dims));
  if (!t.raw_data().empty()) {
    if (t.raw_data().size() != size_t(out.numel()) * 4) return tensorgrad::Tensor();
    std::memcpy(out.data<float>(), t.raw_data().data(), t.raw_data().size());
  } else {
    if (t.float_data_size() != out.numel()) return tensorgrad::Tensor();
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = t.float_data(int(i));
  }
  return out;
}

}  // namespace test_support
