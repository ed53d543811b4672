// ONNX import (io::load_onnx): models written with ONNX's own protobuf
// classes (as PyTorch's exporter writes an MLP: Gemm with transB = 1) give
// what a reference computed here by hand gives, train, and refuse malformed
// files with FormatError; ONNX's backend node cases (Debian's
// libonnx-testdata) whose ops are read pass at ONNX's tolerances.
#include <gtest/gtest.h>

#include "tensorgrad/io/onnx.h"
#include "test_support.h"

#ifdef TENSORGRAD_WITH_ONNX

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "onnx_tensors.h"

using namespace tensorgrad;

namespace {

onnx::TensorProto initializer(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
  return test_support::onnx_float_tensor(name, dims, v);
}

void add_input(onnx::GraphProto& g, const std::string& name, const std::vector<int64_t>& dims, bool batch_symbolic) {
  onnx::ValueInfoProto* v = g.add_input();
  v->set_name(name);
  onnx::TypeProto_Tensor* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (size_t i = 0; i < dims.size(); ++i) {
    onnx::TensorShapeProto_Dimension* d = tt->mutable_shape()->add_dim();
    if (i == 0 && batch_symbolic)
      d->set_dim_param("batch");
    else
      d->set_dim_value(dims[i]);
  }
}

onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op, std::vector<std::string> in,
                          const std::string& out) {
  onnx::NodeProto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + out);
  for (const std::string& s : in) n->add_input(s);
  n->add_output(out);
  return n;
}

void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// n values uniform in [-1, 1] drawn from `seed`.
std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  return test_support::uniform(Shape{int64_t(n)}, rng, -1.0f, 1.0f).to_vector();
}

// PyTorch's export of Linear(4, 8) -> ReLU -> Linear(8, 3) -> Softmax:
// Gemm nodes with transB = 1 and weights {out, in}.
struct Mlp {
  std::vector<float> w1 = uniform(8 * 4, 1), b1 = uniform(8, 2), w2 = uniform(3 * 8, 3), b2 = uniform(3, 4);
  onnx::ModelProto proto(int opset = 13) const {
    onnx::ModelProto m;
    m.set_ir_version(7);
    m.add_opset_import()->set_version(opset);
    onnx::GraphProto& g = *m.mutable_graph();
    g.set_name("mlp");
    add_input(g, "input", {1, 4}, true);
    *g.add_initializer() = initializer("fc1.weight", {8, 4}, w1);
    *g.add_initializer() = initializer("fc1.bias", {8}, b1);
    *g.add_initializer() = initializer("fc2.weight", {3, 8}, w2);
    *g.add_initializer() = initializer("fc2.bias", {3}, b2);
    set_int(add_node(g, "Gemm", {"input", "fc1.weight", "fc1.bias"}, "h"), "transB", 1);
    add_node(g, "Relu", {"h"}, "r");
    set_int(add_node(g, "Gemm", {"r", "fc2.weight", "fc2.bias"}, "logits"), "transB", 1);
    set_int(add_node(g, "Softmax", {"logits"}, "probs"), "axis", -1);
    g.add_output()->set_name("probs");
    return m;
  }
  // The same by hand, in double.
  std::vector<double> forward(const std::vector<float>& x, int64_t rows) const {
    std::vector<double> out;
    for (int64_t r = 0; r < rows; ++r) {
      double h[8], z[3], zmax = -1e300, s = 0;
      for (int j = 0; j < 8; ++j) {
        h[j] = b1[j];
        for (int k = 0; k < 4; ++k) h[j] += double(x[size_t(r * 4 + k)]) * w1[size_t(j * 4 + k)];
        h[j] = std::max(h[j], 0.0);
      }
      for (int j = 0; j < 3; ++j) {
        z[j] = b2[j];
        for (int k = 0; k < 8; ++k) z[j] += h[k] * w2[size_t(j * 8 + k)];
        zmax = std::max(zmax, z[j]);
      }
      for (int j = 0; j < 3; ++j) s += std::exp(z[j] - zmax);
      for (int j = 0; j < 3; ++j) out.push_back(std::exp(z[j] - zmax) / s);
    }
    return out;
  }
};

std::string write(const onnx::ModelProto& m, const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream out(path, std::ios::binary);
  m.SerializeToOstream(&out);
  return path;
}

}  // namespace

TEST(Onnx, AnExportedMlpPredictsAsByHandAndTrains) {
  const Mlp mlp;
  const std::string path = write(mlp.proto(), "mlp.onnx");
  nn::Model model = io::load_onnx(path);
  const std::vector<float> x = uniform(5 * 4, 9);
  const std::vector<float> got = model.predict(Tensor::from_vector(x, {5, 4})).to_vector();
  const std::vector<double> want = mlp.forward(x, 5);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-6) << i;
  // The weights keep the file's names and layout.
  bool found = false;
  for (const nn::Weight& w : model.weights())
    if (w.name.find("fc1.weight") != std::string::npos) {
      found = true;
      EXPECT_EQ(w.value.shape(), Shape({8, 4}));
      EXPECT_TRUE(w.trainable);
    }
  EXPECT_TRUE(found);
  // It trains: a few steps on labels of its own argmax flipped lower the loss.
  model.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy");
  std::vector<int32_t> labels(64);
  const std::vector<float> xs = uniform(64 * 4, 11);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = xs[i * 4] > 0.0f ? 2 : 0;
  nn::FitOptions fo;
  fo.epochs = 30;
  fo.batch_size = 16;
  fo.verbose = 0;
  const nn::History h = model.fit(Tensor::from_vector(xs, {64, 4}), Tensor::from_vector(labels, {64}), fo);
  EXPECT_LT(h.history.at("loss").back(), 0.7 * h.history.at("loss").front());
}

namespace {

void set_ints(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// PyTorch's export of Conv2d(3, 4, 3, padding=1) -> BatchNorm2d(4) (eval)
// -> ReLU -> MaxPool2d(2) -> AdaptiveAvgPool2d(1) -> Flatten -> Linear(4, 2),
// on NCHW images {N, 3, 6, 6}.
struct Cnn {
  std::vector<float> w = uniform(4 * 3 * 3 * 3, 21), bias = uniform(4, 22), gamma = uniform(4, 23),
                     beta = uniform(4, 24), mean = uniform(4, 25), var = uniform(4, 26), fc = uniform(2 * 4, 27),
                     fc_b = uniform(2, 28);
  Cnn() {
    for (float& v : var) v = std::abs(v) + 0.5f;
  }
  onnx::ModelProto proto() const {
    onnx::ModelProto m;
    m.set_ir_version(7);
    m.add_opset_import()->set_version(13);
    onnx::GraphProto& g = *m.mutable_graph();
    g.set_name("cnn");
    add_input(g, "image", {1, 3, 6, 6}, true);
    *g.add_initializer() = initializer("conv.weight", {4, 3, 3, 3}, w);
    *g.add_initializer() = initializer("conv.bias", {4}, bias);
    *g.add_initializer() = initializer("bn.weight", {4}, gamma);
    *g.add_initializer() = initializer("bn.bias", {4}, beta);
    *g.add_initializer() = initializer("bn.running_mean", {4}, mean);
    *g.add_initializer() = initializer("bn.running_var", {4}, var);
    *g.add_initializer() = initializer("fc.weight", {2, 4}, fc);
    *g.add_initializer() = initializer("fc.bias", {2}, fc_b);
    onnx::NodeProto* conv = add_node(g, "Conv", {"image", "conv.weight", "conv.bias"}, "c");
    set_ints(conv, "kernel_shape", {3, 3});
    set_ints(conv, "pads", {1, 1, 1, 1});
    set_ints(conv, "strides", {1, 1});
    add_node(g, "BatchNormalization", {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, "n");
    add_node(g, "Relu", {"n"}, "r");
    onnx::NodeProto* pool = add_node(g, "MaxPool", {"r"}, "p");
    set_ints(pool, "kernel_shape", {2, 2});
    set_ints(pool, "strides", {2, 2});
    add_node(g, "GlobalAveragePool", {"p"}, "gap");
    add_node(g, "Flatten", {"gap"}, "flat");
    set_int(add_node(g, "Gemm", {"flat", "fc.weight", "fc.bias"}, "logits"), "transB", 1);
    g.add_output()->set_name("logits");
    return m;
  }
  // The same by hand on NCHW, in double.
  std::vector<double> forward(const std::vector<float>& x, int64_t n) const {
    std::vector<double> out;
    for (int64_t b = 0; b < n; ++b) {
      double feat[4];
      for (int f = 0; f < 4; ++f) {
        double r[6][6];
        for (int i = 0; i < 6; ++i)
          for (int j = 0; j < 6; ++j) {
            double acc = bias[size_t(f)];
            for (int c = 0; c < 3; ++c)
              for (int u = 0; u < 3; ++u)
                for (int v = 0; v < 3; ++v) {
                  const int y = i + u - 1, z = j + v - 1;
                  if (y < 0 || y >= 6 || z < 0 || z >= 6) continue;
                  acc += double(x[size_t(((b * 3 + c) * 6 + y) * 6 + z)]) * w[size_t(((f * 3 + c) * 3 + u) * 3 + v)];
                }
            const double bn =
                (acc - mean[size_t(f)]) / std::sqrt(double(var[size_t(f)]) + 1e-5) * gamma[size_t(f)] + beta[size_t(f)];
            r[i][j] = std::max(bn, 0.0);
          }
        double sum = 0;
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j)
            sum += std::max(std::max(r[2 * i][2 * j], r[2 * i][2 * j + 1]),
                            std::max(r[2 * i + 1][2 * j], r[2 * i + 1][2 * j + 1]));
        feat[f] = sum / 9.0;
      }
      for (int o = 0; o < 2; ++o) {
        double z = fc_b[size_t(o)];
        for (int f = 0; f < 4; ++f) z += feat[f] * fc[size_t(o * 4 + f)];
        out.push_back(z);
      }
    }
    return out;
  }
};

}  // namespace

// NCHW images stay NCHW for the caller: one transpose at the input, the
// convolution's weight converted at import, and the ops between in NHWC.
TEST(Onnx, AnExportedCnnOnNchwImagesPredictsAsByHandAndTrains) {
  const Cnn cnn;
  nn::Model model = io::load_onnx(write(cnn.proto(), "cnn.onnx"));
  const std::vector<float> x = uniform(2 * 3 * 6 * 6, 29);
  const std::vector<float> got = model.predict(Tensor::from_vector(x, {2, 3, 6, 6})).to_vector();
  const std::vector<double> want = cnn.forward(x, 2);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i]) + 1e-5) << i;
  for (const nn::Weight& w : model.weights())
    if (w.name.find("conv.weight") != std::string::npos) EXPECT_EQ(w.value.shape(), Shape({3, 3, 3, 4}));
  // The batch norm is Keras' layer: its moving statistics start as the
  // file's, are not trained, and update in training.
  auto moving_mean = [&] {
    for (const nn::Weight& w : model.weights())
      if (w.name.find("moving_mean") != std::string::npos) {
        EXPECT_FALSE(w.trainable);
        return w.value.to_vector();
      }
    ADD_FAILURE() << "no moving_mean weight";
    return std::vector<float>{};
  };
  const std::vector<float> file_mean = moving_mean();
  for (size_t c = 0; c < file_mean.size(); ++c) EXPECT_EQ(file_mean[c], cnn.mean[c]) << c;
  model.compile(OptimizerSpec::adam(1e-2f), "mse");
  const std::vector<float> xs = uniform(16 * 3 * 6 * 6, 30), ys = uniform(16 * 2, 31);
  nn::FitOptions fo;
  fo.epochs = 20;
  fo.batch_size = 8;
  fo.verbose = 0;
  const nn::History h = model.fit(Tensor::from_vector(xs, {16, 3, 6, 6}), Tensor::from_vector(ys, {16, 2}), fo);
  EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front());
  const std::vector<float> trained_mean = moving_mean();
  for (size_t c = 0; c < file_mean.size(); ++c) EXPECT_NE(trained_mean[c], file_mean[c]) << c;
}

// ONNX's external data: an initializer's bytes in a file beside the model
// (location, offset, length) read as if inline; a location leaving the
// model's folder, a length that does not fit, and a model in memory with
// external data are refused.
TEST(Onnx, ExternalDataIsReadFromTheModelsFolderOnly) {
  const Mlp mlp;
  onnx::ModelProto m = mlp.proto();
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);  // fc1.weight {8, 4}
  const std::string bytes = w->raw_data();
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "onnx_external";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "weights.bin", std::ios::binary) << std::string(16, 'x') << bytes;
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto set = [&](onnx::TensorProto* t, const std::string& location, const std::string& length) {
    t->clear_external_data();
    for (const auto& [k, v] :
         {std::pair<std::string, std::string>{"location", location}, {"offset", "16"}, {"length", length}}) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
  };
  set(w, "weights.bin", std::to_string(bytes.size()));
  {
    std::ofstream out(dir / "mlp.onnx", std::ios::binary);
    m.SerializeToOstream(&out);
  }
  nn::Model model = io::load_onnx((dir / "mlp.onnx").string());
  const std::vector<float> x = uniform(2 * 4, 5);
  const std::vector<float> got = model.predict(Tensor::from_vector(x, {2, 4})).to_vector();
  const std::vector<double> want = mlp.forward(x, 2);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-6) << i;

  set(w, "../weights.bin", std::to_string(bytes.size()));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { io::load_onnx(write(m, "escape.onnx")); },
                                               {"'../weights.bin'", "outside the model's folder"}));
  set(w, "weights.bin", "12");
  {
    std::ofstream out(dir / "short.onnx", std::ios::binary);
    m.SerializeToOstream(&out);
  }
  EXPECT_TRUE(test_support::throws<FormatError>([&] { io::load_onnx((dir / "short.onnx").string()); },
                                                {"fc1.weight", "12 bytes of external data", "32 elements"}));
  const std::string serialized = m.SerializeAsString();
  EXPECT_TRUE(test_support::throws<ValueError>(
      [&] {
        io::parse_onnx(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(serialized.data()), serialized.size()));
      },
      {"external file", "load_onnx on the file"}));
  std::filesystem::remove_all(dir);
}

TEST(Onnx, FrozenWeightsAndOpsetsOlderThan13) {
  const Mlp mlp;
  nn::Model model = io::load_onnx(write(mlp.proto(11), "mlp11.onnx"), {.trainable = false});
  for (const nn::Weight& w : model.weights()) EXPECT_FALSE(w.trainable) << w.name;
  const std::vector<float> x = uniform(3 * 4, 5);
  const std::vector<float> got = model.predict(Tensor::from_vector(x, {3, 4})).to_vector();
  const std::vector<double> want = mlp.forward(x, 3);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i]) + 1e-6) << i;
}

TEST(Onnx, MalformedAndUnsupportedFilesAreTypedErrors) {
  EXPECT_TRUE(test_support::throws<IOError>([] { io::load_onnx("/nonexistent/model.onnx"); }, {"cannot open"}));
  const std::string junk = ::testing::TempDir() + "/junk.onnx";
  {
    std::ofstream out(junk, std::ios::binary);
    out << "\x08\x07\x12\xff\xff\xff\xff\x0f not a protobuf";
  }
  EXPECT_TRUE(test_support::throws<FormatError>([&] { io::load_onnx(junk); }, {"not an ONNX model"}));
  const Mlp mlp;
  onnx::ModelProto m = mlp.proto();
  std::string bytes = m.SerializeAsString();
  {
    std::ofstream out(::testing::TempDir() + "/truncated.onnx", std::ios::binary);
    out << bytes.substr(0, bytes.size() / 2);
  }
  EXPECT_THROW(io::load_onnx(::testing::TempDir() + "/truncated.onnx"), FormatError);

  onnx::ModelProto old = mlp.proto(5);
  EXPECT_TRUE(test_support::throws<ValueError>([&] { io::load_onnx(write(old, "old.onnx")); }, {"opset 5", "6 to 17"}));
  onnx::ModelProto unknown = mlp.proto();
  unknown.mutable_graph()->mutable_node(1)->set_op_type("Hardmax");
  EXPECT_TRUE(test_support::throws<ValueError>([&] { io::load_onnx(write(unknown, "hardmax.onnx")); },
                                               {"Hardmax node", "opset 13", "The ops read so far", "Gemm"}));
  onnx::ModelProto dangling = mlp.proto();
  dangling.mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
  EXPECT_TRUE(test_support::throws<FormatError>([&] { io::load_onnx(write(dangling, "dangling.onnx")); },
                                                {"reads 'nowhere'", "topological order"}));
  onnx::ModelProto short_data = mlp.proto();
  short_data.mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(12);
  EXPECT_TRUE(test_support::throws<FormatError>([&] { io::load_onnx(write(short_data, "short.onnx")); },
                                                {"fc1.weight", "12 bytes", "32 float32 elements"}));
  onnx::ModelProto huge = mlp.proto();
  huge.mutable_graph()->mutable_initializer(0)->set_dims(0, int64_t(1) << 40);
  EXPECT_TRUE(
      test_support::throws<FormatError>([&] { io::load_onnx(write(huge, "huge.onnx")); }, {"impossible shape"}));
}

namespace {

// The first dimension of a stored tensor, -1 for a scalar or a file that is not a tensor.
int64_t first_dim(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  onnx::TensorProto t;
  return t.ParseFromIstream(&in) && t.dims_size() > 0 ? t.dims(0) : -1;
}

// The case's model with its inputs after the first made initializers holding
// the case's stored values, as an exporter writes weights, shapes and axes;
// an empty path when it has one input.
std::string with_bound_inputs(const std::filesystem::path& dir, const std::filesystem::path& data) {
  onnx::ModelProto m;
  {
    std::ifstream in(dir / "model.onnx", std::ios::binary);
    if (!m.ParseFromIstream(&in)) return "";
  }
  onnx::GraphProto* g = m.mutable_graph();
  std::set<std::string> bound;
  for (int i = 1; i < g->input_size(); ++i) {
    if (!g->input(i).type().has_tensor_type()) return "";  // a sequence or an optional
    std::ifstream in(data / ("input_" + std::to_string(i) + ".pb"), std::ios::binary);
    onnx::TensorProto t;
    if (!t.ParseFromIstream(&in)) return "";
    t.set_name(g->input(i).name());
    *g->add_initializer() = t;
    bound.insert(g->input(i).name());
  }
  if (bound.empty()) return "";
  auto* in = g->mutable_input();
  in->erase(in->begin() + 1, in->end());
  const std::string path = ::testing::TempDir() + "/bound_" + dir.filename().string() + ".onnx";
  std::ofstream out(path, std::ios::binary);
  m.SerializeToOstream(&out);
  return path;
}

}  // namespace

// ONNX's backend test cases (Debian's libonnx-testdata: node, pytorch-converted
// and pytorch-operator): every case whose model loads is run on its stored
// inputs and each float32 output is compared with the stored one at ONNX's
// tolerances (rtol 1e-3, atol 1e-7). A model takes a batch of rows, so a case
// is loaded as it is first and, when that fails, with its inputs after the
// first bound as initializers from the stored data (the form an exporter
// writes weights, shapes and axes in). A case that loads neither way is
// skipped with the importer's reason; the reasons are printed, grouped.
// Beside unsupported ops they are: a first input without a batch axis (rank
// 0 or 1), non-float32 inputs (int64 targets of the loss ops, strings), ops
// across the batch axis (a reduction over every axis, a Concat or softmax
// along axis 0, a Transpose that moves it, a Flatten that merges it), and
// opsets before 7.
TEST(Onnx, TheBackendCasesThatLoadPass) {
  const std::filesystem::path root = "/usr/include/onnx/backend/test/data";
  if (!std::filesystem::exists(root / "node")) GTEST_SKIP() << "no ONNX backend test data (Debian: libonnx-testdata)";
  int run = 0, passed = 0, skipped_op = 0, skipped_other = 0, bound = 0;
  std::vector<std::string> failed;
  std::map<std::string, int> reasons;
  for (const char* suite : {"node", "pytorch-converted", "pytorch-operator"}) {
    std::vector<std::filesystem::path> cases;
    for (const auto& e : std::filesystem::directory_iterator(root / suite)) cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    for (const std::filesystem::path& dir : cases) {
      const std::filesystem::path data = dir / "test_data_set_0";
      if (!std::filesystem::exists(dir / "model.onnx") || !std::filesystem::exists(data)) continue;
      std::unique_ptr<nn::Model> model;
      std::string reason;
      bool inputs_bound = false;
      // Inputs of different first dimensions are not rows of one batch (a
      // broadcast case): only the form with the later ones bound is tried.
      bool one_batch = true;
      for (int i = 1; std::filesystem::exists(data / ("input_" + std::to_string(i) + ".pb")); ++i)
        one_batch =
            one_batch && first_dim(data / ("input_" + std::to_string(i) + ".pb")) == first_dim(data / "input_0.pb");
      for (int attempt = one_batch ? 0 : 1; attempt < 2 && !model; ++attempt) {
        const std::string path = attempt == 0 ? (dir / "model.onnx").string() : with_bound_inputs(dir, data);
        if (path.empty()) {
          if (reason.empty()) reason = "inputs of different first dimensions that cannot be bound as initializers";
          break;
        }
        try {
          model = std::make_unique<nn::Model>(io::load_onnx(path));
          inputs_bound = attempt == 1;
        } catch (const ValueError& e) {
          if (reason.empty()) reason = e.what();
        } catch (const TypeError& e) {
          if (reason.empty()) reason = e.what();
        } catch (const std::exception& e) {  // a valid file refused otherwise: a failure
          reason = "FAILED";
          failed.push_back(std::string(suite) + "/" + dir.filename().string() + " (loading: " + e.what() + ")");
          break;
        }
      }
      if (reason == "FAILED") continue;
      if (!model) {
        const bool op = reason.find("this op is not read") != std::string::npos;
        ++(op ? skipped_op : skipped_other);
        if (!op) {
          // The reason without the node's name, so that alike ones group.
          std::string r = reason.substr(0, reason.find(". The ops read"));
          if (auto q = r.find(" node '"); q != std::string::npos) r.erase(q, r.find('\'', q + 7) - q + 1);
          if (auto q = r.find("input '"); q != std::string::npos) r.erase(q + 6, r.find('\'', q + 7) - q - 5);
          if (auto q = r.find(" '/"); q != std::string::npos) r.erase(q, r.find('\'', q + 2) - q + 1);
          ++reasons[r];
        }
        continue;
      }
      ++run;
      bound += inputs_bound;
      std::vector<Tensor> inputs{test_support::read_onnx_tensor(data / "input_0.pb")};
      if (!inputs_bound)
        for (int i = 1; std::filesystem::exists(data / ("input_" + std::to_string(i) + ".pb")); ++i)
          inputs.push_back(test_support::read_onnx_tensor(data / ("input_" + std::to_string(i) + ".pb")));
      const std::string name = std::string(suite) + "/" + dir.filename().string();
      try {
        const int64_t rows = inputs.at(0).shape()[0];
        const std::vector<Tensor> got = model->predict(inputs, rows);
        bool ok = !got.empty();
        int compared = 0;
        for (size_t k = 0; ok && k < got.size(); ++k) {
          const Tensor want = test_support::read_onnx_tensor(data / ("output_" + std::to_string(k) + ".pb"));
          if (!want.defined() || want.dtype() != DType::Float32) continue;  // indices (int64)
          ++compared;
          ok = got[k].numel() == want.numel();
          for (int64_t i = 0; ok && i < want.numel(); ++i) {
            const float g = got[k].data<float>()[i], w = want.data<float>()[i];
            ok = std::abs(g - w) <= 1e-7f + 1e-3f * std::abs(w) || (std::isnan(g) && std::isnan(w)) || g == w;
          }
        }
        if (ok && compared > 0)
          ++passed;
        else
          failed.push_back(name);
      } catch (const std::exception& e) {
        failed.push_back(name + " (" + e.what() + ")");
      }
    }
  }
  std::printf(
      "ONNX backend cases: run %d, passed %d (%d with inputs bound as initializers), skipped %d "
      "(unsupported op) and %d (other reasons, below)\n",
      run, passed, bound, skipped_op, skipped_other);
  for (const auto& [r, n] : reasons) std::printf("  %4d  %s\n", n, r.c_str());
  RecordProperty("run", run);
  RecordProperty("passed", passed);
  for (const std::string& f : failed) ADD_FAILURE() << "failed: " << f;
  EXPECT_GE(passed, 250);
}

// The fuzzing corpus (fuzz/onnx-corpus/, made by scripts/fuzz.sh onnx) as a
// regression suite: every file imports and predicts a row of zeros, or is
// refused with a tensorgrad::Error; any other exception fails.
TEST(Onnx, EveryFuzzCorpusFileImportsOrGivesATypedError) {
  const std::filesystem::path dir = TENSORGRAD_ONNX_CORPUS;
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << dir << " not present";
  int imported = 0, refused = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      nn::Model model =
          io::parse_onnx(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      std::vector<Tensor> zeros;
      for (const nn::SymbolicTensor& x : model.inputs())
        zeros.push_back(Tensor::zeros(x.shape().with_batch(1), x.dtype()));
      (void)model.predict(zeros, 1);
      ++imported;
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& ex) {
      ADD_FAILURE() << e.path().filename() << ": " << ex.what();
    }
  }
  std::printf("ONNX fuzz corpus: %d imported, %d refused with a typed error\n", imported, refused);
  EXPECT_GT(imported + refused, 0);
}

#else

TEST(Onnx, WithoutOnnxLoadOnnxSaysHowToGetIt) {
  EXPECT_FALSE(tensorgrad::io::onnx_available());
  EXPECT_TRUE(test_support::throws<tensorgrad::StateError>([] { tensorgrad::io::load_onnx("model.onnx"); },
                                                           {"no ONNX support", "libonnx-dev"}));
}

#endif
