// ONNX import of files that once crashed it, loaded what ONNX's checker or
// ONNX Runtime refuse, or said wrong numbers: a Reshape that folds the batch
// into the rows (an output {B * T, V}), external data through symbolic
// links, constants folded at import beyond their cap, and malformed opsets,
// attributes, external-data lengths, values written twice, Conv kernel
// shapes and integer weights.
#include <gtest/gtest.h>

#include "tensorgrad/io/onnx.h"
#include "test_support.h"

#ifdef TENSORGRAD_WITH_ONNX

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "onnx_tensors.h"

using namespace tensorgrad;

namespace {

onnx::TensorProto floats(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
  return test_support::onnx_float_tensor(name, dims, v);
}

onnx::TensorProto int64s(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& v) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t.add_dims(d);
  for (int64_t x : v) t.add_int64_data(x);
  return t;
}

// A model of opset 13 with a float input {batch, dims...}.
onnx::ModelProto model_with_input(const std::string& input, const std::vector<int64_t>& dims) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto& g = *m.mutable_graph();
  g.set_name("g");
  onnx::ValueInfoProto* v = g.add_input();
  v->set_name(input);
  onnx::TypeProto_Tensor* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}

onnx::NodeProto* node(onnx::ModelProto& m, const std::string& op, std::vector<std::string> in,
                      const std::string& out) {
  onnx::NodeProto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + out);
  for (const std::string& s : in) n->add_input(s);
  n->add_output(out);
  return n;
}

void output(onnx::ModelProto& m, const std::string& name) { m.mutable_graph()->add_output()->set_name(name); }

void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

nn::Model parse(const onnx::ModelProto& m) {
  const std::string bytes = m.SerializeAsString();
  return io::parse_onnx(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

std::string write(const onnx::ModelProto& m, const std::filesystem::path& path) {
  std::ofstream out(path, std::ios::binary);
  m.SerializeToOstream(&out);
  return path.string();
}

// x {B, 3, 4} reshaped to `shape` (an int64 initializer), then `after` ops (unary, in order).
onnx::ModelProto reshape_model(const std::vector<int64_t>& shape, const std::vector<std::string>& after = {}) {
  onnx::ModelProto m = model_with_input("x", {3, 4});
  *m.mutable_graph()->add_initializer() = int64s("shape", {int64_t(shape.size())}, shape);
  node(m, "Reshape", {"x", "shape"}, "r0");
  std::string last = "r0";
  for (size_t i = 0; i < after.size(); ++i) {
    const std::string out = "r" + std::to_string(i + 1);
    node(m, after[i], {last}, out);
    last = out;
  }
  output(m, last);
  return m;
}

std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f * float(i) - 3.0f;
  return v;
}

}  // namespace

// Reshape(x{B, 3, 4}, [-1, 4]) (PyTorch's logits.view(-1, V)) and
// Reshape(x, [-1]) once crashed the import (an output whose batch is folded
// into its first axis read a layout that was not there). Such an output is
// now given with the batch apart ({B, 3, 4}, {B, 12}): ONNX Runtime's values
// in its order. An output whose batch sits behind another axis is refused
// with a ValueError naming the node that wrote it.
TEST(OnnxMalformed, AReshapeThatFoldsTheBatchIntoTheRowsGivesOnnxRuntimesValues) {
  const std::vector<float> x = iota_floats(2 * 3 * 4);
  const Tensor input = Tensor::from_vector(x, {2, 3, 4});
  for (const auto& [shape, want] : std::vector<std::pair<std::vector<int64_t>, Shape>>{
           {{-1, 4}, Shape{2, 3, 4}}, {{-1}, Shape{2, 12}}, {{-1, 2}, Shape{2, 6, 2}}, {{-1, 12}, Shape{2, 12}}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    nn::Model model = parse(reshape_model(shape));
    const Tensor got = model.predict(input);
    EXPECT_EQ(got.shape(), want);
    EXPECT_EQ(got.to_vector(), x);
    // The same through load_onnx.
    nn::Model loaded = io::load_onnx(write(reshape_model(shape), ::testing::TempDir() + "/reshape_fold.onnx"));
    EXPECT_EQ(loaded.predict(input).to_vector(), x);
  }
  // Ops after the fold run on the folded rows: a softmax along the last axis.
  nn::Model soft = parse(reshape_model({-1, 4}, {"Softmax"}));
  const Tensor s = soft.predict(input);
  ASSERT_EQ(s.shape(), Shape({2, 3, 4}));
  for (int64_t row = 0; row < 6; ++row) {
    double sum = 0;
    for (int64_t k = 0; k < 4; ++k) sum += std::exp(double(x[size_t(row * 4 + k)]));
    for (int64_t k = 0; k < 4; ++k)
      EXPECT_NEAR(s.data<float>()[row * 4 + k], std::exp(double(x[size_t(row * 4 + k)])) / sum, 1e-6);
  }
  // {B * 3, 4} transposed to {4, B * 3}: the batch behind another axis.
  onnx::ModelProto behind = reshape_model({-1, 4});
  behind.mutable_graph()->clear_output();
  attr_ints(node(behind, "Transpose", {"r0"}, "t"), "perm", {1, 0});
  output(behind, "t");
  EXPECT_TRUE(test_support::throws<ValueError>([&] { parse(behind); },
                                               {"output 't'", "Transpose node 'Transpose_t'", "batch first"}));
  EXPECT_TRUE(test_support::throws<ValueError>(
      [&] { io::load_onnx(write(behind, ::testing::TempDir() + "/reshape_behind.onnx")); },
      {"output 't'", "Transpose node 'Transpose_t'"}));
}

// External data read through a symbolic link: a link in the model's folder
// to a file elsewhere (or a subfolder linked to another folder) is refused
// with both real paths; a link that stays inside the folder is read.
TEST(OnnxMalformed, ExternalDataThroughASymbolicLinkStaysInTheModelsFolder) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(::testing::TempDir()) / "onnx_symlinks";
  fs::remove_all(root);
  const fs::path dir = root / "model", elsewhere = root / "elsewhere";
  fs::create_directories(dir / "real_sub");
  fs::create_directories(elsewhere);
  const std::vector<float> w = iota_floats(4 * 2), secret(4 * 2, 7.0f);
  const std::string wb(reinterpret_cast<const char*>(w.data()), w.size() * 4),
      sb(reinterpret_cast<const char*>(secret.data()), secret.size() * 4);
  std::ofstream(dir / "w.bin", std::ios::binary) << wb;
  std::ofstream(elsewhere / "secret.bin", std::ios::binary) << sb;
  fs::create_symlink(elsewhere / "secret.bin", dir / "out.bin");  // leaves the folder
  fs::create_directory_symlink(elsewhere, dir / "sub");           // a folder that leaves it
  fs::create_symlink("w.bin", dir / "in.bin");                     // stays inside
  fs::copy_file(dir / "w.bin", dir / "real_sub" / "w.bin");
  fs::create_directory_symlink("real_sub", dir / "linked_sub");  // a folder inside

  // y = x {B, 4} @ W {4, 2}, W external.
  auto model = [&](const std::string& location, const std::string& length = "32") {
    onnx::ModelProto m = model_with_input("x", {4});
    onnx::TensorProto t = floats("W", {4, 2}, {});
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [k, v] : {std::pair<std::string, std::string>{"location", location}, {"length", length}}) {
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    *m.mutable_graph()->add_initializer() = t;
    node(m, "MatMul", {"x", "W"}, "y");
    output(m, "y");
    return write(m, dir / "m.onnx");
  };
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 0, 0, 0, 1}, {2, 4});
  const std::vector<float> want{w[0], w[1], w[6], w[7]};
  for (const char* inside : {"w.bin", "in.bin", "linked_sub/w.bin"}) {
    SCOPED_TRACE(inside);
    EXPECT_EQ(io::load_onnx(model(inside)).predict(x).to_vector(), want);
  }
  const std::string real_dir = fs::canonical(dir).string(), real_secret = fs::canonical(elsewhere / "secret.bin");
  EXPECT_TRUE(test_support::throws<ValueError>([&] { io::load_onnx(model("out.bin")); },
                                               {"'out.bin'", real_secret, real_dir, "outside the model's folder"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { io::load_onnx(model("sub/secret.bin")); },
                                               {"'sub/secret.bin'", real_secret, real_dir}));
  // A length or offset that is not a plain count of bytes.
  for (const char* length : {"-48", "48abc", "+32", " 32", "99999999999999999999"}) {
    SCOPED_TRACE(length);
    EXPECT_TRUE(test_support::throws<FormatError>([&] { io::load_onnx(model("w.bin", length)); },
                                                  {"initializer 'W'", "length '" + std::string(length) + "'"}));
  }
  // An empty one is absent, as ONNX Runtime reads it: the rest of the file.
  EXPECT_EQ(io::load_onnx(model("w.bin", "")).predict(x).to_vector(), want);
  fs::remove_all(root);
}

// Constants computed at import are capped at 2^24 values, whatever op
// computes them (an Expand of a float constant loaded 1.5 GiB before),
// with the node named and the true element count.
TEST(OnnxMalformed, EveryConstantFoldedAtImportIsCapped) {
  auto expand = [](onnx::TensorProto value, const std::vector<int64_t>& shape) {
    onnx::ModelProto m = model_with_input("x", {2});
    value.set_name("v");
    *m.mutable_graph()->add_initializer() = value;
    *m.mutable_graph()->add_initializer() = int64s("shape", {int64_t(shape.size())}, shape);
    node(m, "Expand", {"v", "shape"}, "big");
    node(m, "Add", {"x", "big"}, "y");  // never reached
    output(m, "y");
    return m;
  };
  // 3 * 2^27 float32 values: 1.5 GiB.
  EXPECT_TRUE(test_support::throws<FormatError>([&] { parse(expand(floats("", {1}, {1.0f}), {3, 1 << 27})); },
                                                {"Expand node 'Expand_big'", "402653184 elements", "2^24"}));
  EXPECT_TRUE(test_support::throws<FormatError>([&] { parse(expand(int64s("", {1}, {1}), {3, 1 << 27})); },
                                                {"Expand node 'Expand_big'", "402653184 elements", "2^24"}));
  // Within the cap it folds.
  EXPECT_NO_THROW(parse(expand(floats("", {1}, {1.0f}), {2})));
  // An int64 broadcast of two 2^13-value constants: 2^26 values.
  {
    onnx::ModelProto m = model_with_input("x", {2});
    *m.mutable_graph()->add_initializer() = int64s("a", {8192, 1}, std::vector<int64_t>(8192, 1));
    *m.mutable_graph()->add_initializer() = int64s("b", {1, 8192}, std::vector<int64_t>(8192, 2));
    node(m, "Mul", {"a", "b"}, "ab");
    node(m, "Reshape", {"x", "ab"}, "y");
    output(m, "y");
    EXPECT_TRUE(test_support::throws<FormatError>([&] { parse(m); }, {"Mul node 'Mul_ab'", "67108864 elements"}));
  }
  // ConstantOfShape of 2^36 values says so (it said "16777217 elements").
  {
    onnx::ModelProto m = model_with_input("x", {2});
    *m.mutable_graph()->add_initializer() = int64s("s", {3}, {4096, 4096, 4096});
    node(m, "ConstantOfShape", {"s"}, "c");
    node(m, "Add", {"x", "c"}, "y");
    output(m, "y");
    EXPECT_TRUE(test_support::throws<FormatError>(
        [&] { parse(m); }, {"ConstantOfShape node 'ConstantOfShape_c'", "68719476736 elements"}));
  }
}

// Folding at the ends of int64's range: a Range whose steps span it
// (start + i * delta overflowed), a ConstantOfShape of int64's largest
// value (it went through a double), and a Cast of NaN to an integer
// (undefined in C++ and in ONNX: refused).
TEST(OnnxMalformed, ConstantsFoldedAtTheEndsOfInt64sRangeAreExact) {
  // y = x + float(folded int64 constant {n}).
  auto added = [](const std::function<void(onnx::ModelProto&)>& make_c, int64_t n = 4) {
    onnx::ModelProto m = model_with_input("x", {n});
    make_c(m);
    onnx::NodeProto* cast = node(m, "Cast", {"c"}, "cf");
    attr_int(cast, "to", 1);
    node(m, "Add", {"x", "cf"}, "y");
    output(m, "y");
    return parse(m).predict(Tensor::zeros({1, n})).to_vector();
  };
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(added([&](onnx::ModelProto& m) {
              *m.mutable_graph()->add_initializer() = int64s("start", {}, {lo + 5});
              *m.mutable_graph()->add_initializer() = int64s("limit", {}, {hi});
              *m.mutable_graph()->add_initializer() = int64s("delta", {}, {3 * (int64_t(1) << 61)});
              node(m, "Range", {"start", "limit", "delta"}, "c");
            }, 3),
            (std::vector<float>{float(lo + 5), float(-(int64_t(1) << 61) + 5), float((int64_t(1) << 62) + 5)}));
  EXPECT_EQ(added([&](onnx::ModelProto& m) {
              *m.mutable_graph()->add_initializer() = int64s("s", {1}, {4});
              onnx::NodeProto* c = node(m, "ConstantOfShape", {"s"}, "c");
              onnx::AttributeProto* a = c->add_attribute();
              a->set_name("value");
              a->set_type(onnx::AttributeProto::TENSOR);
              *a->mutable_t() = int64s("", {1}, {hi});
            }),
            std::vector<float>(4, float(hi)));
  // A file's value where the importer codes the batch size is not read as the batch.
  {
    onnx::ModelProto m = model_with_input("x", {3, 4});
    *m.mutable_graph()->add_initializer() = int64s("shape", {2}, {-(int64_t(1) << 62), 12});
    node(m, "Reshape", {"x", "shape"}, "y");
    output(m, "y");
    EXPECT_TRUE(test_support::throws<ValueError>([&] { parse(m); },
                                                 {"initializer 'shape'", "-4611686018427387904", "batch size"}));
  }
  EXPECT_TRUE(test_support::throws<ValueError>(
      [&] {
        added([&](onnx::ModelProto& m) {
          *m.mutable_graph()->add_initializer() = floats("f", {4}, {1, std::nanf(""), 3, 4});
          attr_int(node(m, "Cast", {"f"}, "c"), "to", 7);
        });
      },
      {"Cast node 'Cast_c'", "outside int64's range"}));
}

// What ONNX's checker or ONNX Runtime refuse is refused here too, with the
// file's own numbers in the message.
TEST(OnnxMalformed, WhatOnnxsCheckerRefusesIsATypedError) {
  auto relu = [](int64_t opset) {
    onnx::ModelProto m = model_with_input("x", {2});
    m.mutable_opset_import(0)->set_version(opset);
    node(m, "Relu", {"x"}, "y");
    output(m, "y");
    return m;
  };
  EXPECT_NO_THROW(parse(relu(13)));
  // An opset of 2^32 + 13 was read as 13; 2^62 was reported as opset 0.
  EXPECT_TRUE(
      test_support::throws<ValueError>([&] { parse(relu((int64_t(1) << 32) + 13)); }, {"opset 4294967309", "6 to 17"}));
  EXPECT_TRUE(
      test_support::throws<ValueError>([&] { parse(relu(int64_t(1) << 62)); }, {"opset 4611686018427387904"}));
  {
    const std::string path = write(relu((int64_t(1) << 32) + 13), ::testing::TempDir() + "/opset_big.onnx");
    EXPECT_EQ(io::read_onnx_info(path).opset, (int64_t(1) << 32) + 13);
  }
  // An attribute the op is not read with: a ValueError naming it.
  {
    onnx::ModelProto m = relu(13);
    attr_int(m.mutable_graph()->mutable_node(0), "alpha", 2);
    EXPECT_TRUE(test_support::throws<ValueError>([&] { parse(m); }, {"Relu node 'Relu_y'", "attribute 'alpha'"}));
    onnx::ModelProto g = model_with_input("x", {2});
    *g.mutable_graph()->add_initializer() = floats("W", {3, 2}, iota_floats(6));
    onnx::NodeProto* gemm = node(g, "Gemm", {"x", "W"}, "y");
    attr_int(gemm, "transB", 1);
    attr_int(gemm, "transpose_everything", 1);
    output(g, "y");
    EXPECT_TRUE(test_support::throws<ValueError>(
        [&] { parse(g); }, {"Gemm node 'Gemm_y'", "attribute 'transpose_everything'", "alpha, beta, transA, transB"}));
  }
  // A value written by two nodes (ONNX's single static assignment), or over an input.
  {
    onnx::ModelProto m = model_with_input("x", {2});
    node(m, "Relu", {"x"}, "y");
    node(m, "Sigmoid", {"x"}, "y");
    output(m, "y");
    EXPECT_TRUE(test_support::throws<FormatError>([&] { parse(m); }, {"Sigmoid node 'Sigmoid_y'", "writes 'y'"}));
    onnx::ModelProto over = model_with_input("x", {2});
    node(over, "Relu", {"x"}, "x");
    output(over, "x");
    EXPECT_TRUE(test_support::throws<FormatError>([&] { parse(over); }, {"Relu node 'Relu_x'", "writes 'x'"}));
  }
  // A Conv whose kernel_shape contradicts its weight.
  {
    onnx::ModelProto m = model_with_input("x", {1, 5, 5});
    *m.mutable_graph()->add_initializer() = floats("W", {2, 1, 3, 3}, iota_floats(18));
    onnx::NodeProto* conv = node(m, "Conv", {"x", "W"}, "y");
    attr_ints(conv, "kernel_shape", {2, 2});
    output(m, "y");
    EXPECT_TRUE(test_support::throws<FormatError>(
        [&] { parse(m); }, {"Conv node 'Conv_y'", "kernel_shape {2, 2}", "{2, 1, 3, 3}"}));
    conv->mutable_attribute(0)->set_ints(0, 3);
    conv->mutable_attribute(0)->set_ints(1, 3);
    EXPECT_NO_THROW(parse(m));
  }
  // A group that does not divide the weight's filters, or a weight {F, C/group, kh, kw} whose channels
  // times group disagree with the input's; a group that fits is read.
  {
    onnx::ModelProto m = model_with_input("x", {4, 5, 5});
    *m.mutable_graph()->add_initializer() = floats("W", {6, 2, 3, 3}, iota_floats(108));
    onnx::NodeProto* conv = node(m, "Conv", {"x", "W"}, "y");
    attr_int(conv, "group", 4);
    output(m, "y");
    EXPECT_TRUE(test_support::throws<FormatError>(
        [&] { parse(m); }, {"Conv node 'Conv_y'", "group 4", "divide the filters", "{6, 2, 3, 3}"}));
    conv->mutable_attribute(0)->set_i(3);
    EXPECT_TRUE(test_support::throws<FormatError>(
        [&] { parse(m); }, {"Conv node 'Conv_y'", "4 channels", "group 3", "takes 6"}));
    conv->mutable_attribute(0)->set_i(2);
    EXPECT_NO_THROW(parse(m));
  }
  // An integer constant where a float32 weight is read (it said "B must have rank 2; got shape {3}").
  {
    onnx::ModelProto m = model_with_input("x", {2});
    *m.mutable_graph()->add_initializer() = int64s("W", {3}, {1, 2, 3});
    *m.mutable_graph()->add_initializer() = floats("C", {3}, {1, 2, 3});
    node(m, "Gemm", {"x", "W", "C"}, "y");
    output(m, "y");
    EXPECT_TRUE(test_support::throws<TypeError>([&] { parse(m); },
                                                {"Gemm node 'Gemm_y'", "input 1 ('W')", "integer constant", "{3}"}));
    onnx::ModelProto add = model_with_input("x", {3});
    *add.mutable_graph()->add_initializer() = int64s("k", {3}, {1, 2, 3});
    node(add, "Add", {"x", "k"}, "y");
    output(add, "y");
    EXPECT_TRUE(test_support::throws<TypeError>([&] { parse(add); }, {"Add node 'Add_y'", "input 1 ('k')"}));
    // Pow's exponent may be an integer (ONNX's T1): read as float.
    onnx::ModelProto pow = model_with_input("x", {3});
    *pow.mutable_graph()->add_initializer() = int64s("e", {}, {2});
    node(pow, "Pow", {"x", "e"}, "y");
    output(pow, "y");
    EXPECT_EQ(parse(pow).predict(Tensor::from_vector(std::vector<float>{1, 2, 3}, {1, 3})).to_vector(),
              (std::vector<float>{1, 4, 9}));
  }
}

#endif
