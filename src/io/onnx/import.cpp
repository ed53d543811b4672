// io::load_onnx (io/onnx.h): an ONNX graph read with libonnx's protobuf
// classes, each node made one layer ("OnnxNode") of a functional model. A
// node's operands are the model's activations (symbolic tensors) or the
// file's constants (initializers, Constant nodes), which the layer holds as
// weights; nodes of constants only are folded at import (io/onnx/fold.cpp);
// the lowering of each op (io/onnx/lower.cpp) serves both the layer's shape
// rule (on a scratch graph) and its call.
#include "tensorgrad/core/error.h"
#include "tensorgrad/io/onnx.h"

#ifdef TENSORGRAD_WITH_ONNX

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "io/onnx/held.h"
#include "io/onnx/node.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/graph/graph.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/nn/normalization.h"

namespace tensorgrad::io {

namespace {

using namespace onnx_import;

// What the reader accepts before allocating: a file or a tensor beyond these
// is refused as malformed rather than allocated.
constexpr int64_t kMaxFileBytes = int64_t(1) << 31;
constexpr int64_t kMaxElements = int64_t(1) << 31;
// The most values a row of any node's result may hold (1 GiB of float32).
constexpr int64_t kMaxRowElements = int64_t(1) << 28;

// The ops that read an image in ONNX's NCHW and run here on the engine's
// NHWC (channels last): their input is converted once, and their output
// stays NHWC for the ops that do not care (element-wise ones) until an op
// that reads the layout needs NCHW again.
const std::set<std::string> kImageOps = {"Conv",          "MaxPool",           "AveragePool", "GlobalAveragePool",
                                         "GlobalMaxPool", "BatchNormalization"};
// The ops that give the same result in either layout (the constants they
// read are converted to NHWC at import).
const std::set<std::string> kLayoutFree = {
    "Relu",        "Sigmoid",   "Tanh", "Erf",  "Exp",   "Log", "Sqrt", "LeakyRelu", "Elu",  "Identity",   "Dropout",
    "Neg",         "Softplus",  "Clip", "Pow",  "Add",   "Sub", "Mul",  "Div",       "Abs",  "Reciprocal", "Softsign",
    "HardSigmoid", "HardSwish", "Selu", "Celu", "PRelu", "Max", "Min",  "Sum",       "Mean", "Cast"};
// The element-wise ops, masks' included.
bool layout_free(const std::string& op) { return kLayoutFree.count(op) || is_mask_op(op); }

class OnnxNode final : public nn::Layer {
 public:
  explicit OnnxNode(std::shared_ptr<const NodeSpec> spec) : Layer("onnx_node"), spec_(std::move(spec)) {}
  const char* type() const override { return "OnnxNode"; }
  // An embedding (a Gather of a table of the file) reads the model's token ids.
  bool takes_token_ids() const override {
    return spec_->op_type == "Gather" && spec_->slots.size() == 2 && spec_->slots[0] >= 0;
  }

  Shape build(const Shape& input_shape) override { return build_inputs({&input_shape, 1}); }
  Shape build_inputs(std::span<const Shape> shapes) override {
    if (ids_.empty())
      for (size_t i = 0; i < spec_->weights.size(); ++i) {
        const Tensor value = spec_->weights[i].second;
        ids_.push_back(
            add_weight({spec_->weights[i].first, value.shape(), [value](const Shape&) { return value.clone(); },
                        spec_->weight_trainable[i], value.dtype()}));
      }
    // The shape rule is the lowering's, run on a scratch graph of one row.
    Graph g;
    std::vector<Value> operands;
    size_t next = 0;
    for (int slot : spec_->slots) {
      if (slot >= 0) {
        operands.push_back(g.parameter(spec_->weights[size_t(slot)].second, "w", false));
      } else {
        Shape s = shapes[next];
        if (s.rank() >= Shape::kMaxRank)
          throw unsupported(*spec_, "an input of rank " + std::to_string(s.rank() + 1) + " (at most " +
                                        std::to_string(Shape::kMaxRank) + " dimensions are read)");
        std::vector<int64_t> dims{1};
        for (int d = 0; d < s.rank(); ++d) dims.push_back(s[d]);
        operands.push_back(
            g.input("x" + std::to_string(next), Shape(dims), takes_token_ids() ? DType::Int32 : DType::Float32));
        ++next;
      }
    }
    out_shapes_.clear();
    for (Value v : lower(*spec_, g, operands)) {
      const Shape out = g.shape(v);
      if (out.rank() < 2 || out[0] != 1)
        throw unsupported(*spec_, "its result " + out.str() + " has no batch dimension and no other");
      std::vector<int64_t> dims;
      for (int d = 1; d < out.rank(); ++d) dims.push_back(out[d]);
      int64_t values = 1;
      for (int64_t d : dims) values = d > 0 && values > kMaxRowElements / d ? kMaxRowElements + 1 : values * d;
      if (values > kMaxRowElements)
        throw FormatError("load_onnx: " + spec_->where() + ": its result " + out.str() +
                          " holds more than 2^28 values a row (an absurd size, refused before allocating)");
      out_shapes_.emplace_back(dims);
    }
    return out_shapes_.at(0);
  }
  // The shapes of every output (without the batch), once built.
  const std::vector<Shape>& output_shapes() const { return out_shapes_; }
  Value call(Builder& b, Value x, const nn::CallOptions& options) override { return call_inputs(b, {&x, 1}, options); }
  Value call_inputs(Builder& b, std::span<const Value> inputs, const nn::CallOptions& options) override {
    return call_outputs(b, inputs, options).at(0);
  }
  std::vector<Value> call_outputs(Builder& b, std::span<const Value> inputs, const nn::CallOptions&) override {
    std::vector<Value> operands;
    size_t next = 0;
    for (int slot : spec_->slots) operands.push_back(slot >= 0 ? bind_weight(b, ids_[size_t(slot)]) : inputs[next++]);
    return lower(*spec_, b, operands);
  }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }
  nn::LayerConfig config() const override {
    nn::LayerConfig c(type());
    c.set("op_type", spec_->op_type).set("onnx_node", spec_->node_name);
    return c;
  }

 private:
  std::shared_ptr<const NodeSpec> spec_;
  std::vector<nn::WeightId> ids_;
  std::vector<Shape> out_shapes_;
};

int64_t checked_elements(const google::protobuf::RepeatedField<int64_t>& dims, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > kMaxElements / d))
      throw FormatError("load_onnx: " + what + " has an impossible shape (a dimension " + std::to_string(d) +
                        ", or more than 2^31 elements)");
    n *= d;
  }
  return n;
}

// The bytes of a tensor's raw_data for n elements of `width` bytes, checked.
const std::string& raw_bytes(const onnx::TensorProto& t, int64_t n, int width, const char* type,
                             const std::string& what) {
  if (int64_t(t.raw_data().size()) != n * width)
    throw FormatError("load_onnx: " + what + " holds " + std::to_string(t.raw_data().size()) + " bytes of data for " +
                      std::to_string(n) + " " + type + " elements");
  return t.raw_data();
}

void check_count(int have, int64_t n, const std::string& what) {
  if (have != n)
    throw FormatError("load_onnx: " + what + " holds " + std::to_string(have) + " values for " + std::to_string(n) +
                      " elements");
}

// An initializer or Constant value (little-endian, as ONNX writes it):
// float32 as it is, float64 converted to float32 with a warning, int64,
// int32 and bool as int64 constants (shapes, axes, indices, masks).
Constant read_constant(const onnx::TensorProto& t, const std::string& what, const std::string& folder);

// A tensor whose data is in an external file (ONNX's external data: a
// location relative to the model's folder, an offset and a length), read
// into raw_data. A location outside the model's folder is refused.
Constant read_external(const onnx::TensorProto& t, const std::string& what, const std::string& folder) {
  if (folder.empty())
    throw ValueError("load_onnx: " + what +
                     " keeps its data in an external file; a model in memory has no folder "
                     "to read it from (use load_onnx on the file)");
  std::string location;
  int64_t offset = 0, length = -1;
  for (const onnx::StringStringEntryProto& e : t.external_data()) {
    if (e.key() != "offset" && e.key() != "length") {
      if (e.key() == "location") location = e.value();
      continue;
    }
    if (e.value().empty()) continue;  // as absent, as ONNX Runtime reads it
    // A count of bytes: decimal digits only (ONNX Runtime refuses anything
    // after the number, and a negative length does not fit the file).
    const std::string& v = e.value();
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0])) || ec != std::errc() || end != v.data() + v.size())
      throw FormatError("load_onnx: " + what + " has external data " + e.key() + " '" + v +
                        "'; expected a number of bytes (decimal digits, at most 2^63 - 1)");
    (e.key() == "offset" ? offset : length) = n;
  }
  const std::filesystem::path rel(location);
  bool escapes = location.empty() || rel.is_absolute();
  for (const std::filesystem::path& part : rel) escapes = escapes || part == "..";
  if (escapes)
    throw ValueError("load_onnx: " + what + " keeps its data in '" + location +
                     "', outside the model's folder; external data is read only from the model's own folder");
  // The real paths, symbolic links resolved: a link may stay inside the
  // folder (Hugging Face's cache links its files), never lead out of it.
  std::error_code ec;
  const std::filesystem::path real_folder = std::filesystem::weakly_canonical(folder, ec);
  const std::filesystem::path file =
      ec ? std::filesystem::path() : std::filesystem::weakly_canonical(real_folder / rel, ec);
  if (ec)
    throw IOError("load_onnx: " + what + " keeps its data in '" + (std::filesystem::path(folder) / rel).string() +
                  "', whose real path cannot be resolved: " + ec.message());
  const auto [in_folder, in_file] = std::mismatch(real_folder.begin(), real_folder.end(), file.begin(), file.end());
  if (in_folder != real_folder.end() || in_file == file.end())
    throw ValueError("load_onnx: " + what + " keeps its data in '" + location + "', whose real path '" +
                     file.string() + "' (through a symbolic link) is outside the model's folder '" +
                     real_folder.string() + "'; external data is read only from the model's own folder");
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) throw IOError("load_onnx: " + what + " keeps its data in '" + file.string() + "', which cannot be opened");
  const int64_t size = int64_t(in.tellg());
  if (length < 0) length = size - offset;
  if (offset < 0 || length < 0 || length > kMaxFileBytes || offset > size - length)
    throw FormatError("load_onnx: " + what + ": offset " + std::to_string(offset) + " and length " +
                      std::to_string(length) + " do not lie in '" + file.string() + "' (" + std::to_string(size) +
                      " bytes)");
  const int type = t.data_type();
  const int64_t width = type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::INT32    ? 4
                        : type == onnx::TensorProto::DOUBLE || type == onnx::TensorProto::INT64 ? 8
                        : type == onnx::TensorProto::BOOL                                       ? 1
                                                                                                : 0;
  if (width == 0)
    throw TypeError("load_onnx: " + what + " has ONNX data type " + std::to_string(type) +
                    "; float32, float64 (converted), int64, int32 and bool tensors are read");
  if (length != checked_elements(t.dims(), what) * width)  // checked before reading anything
    throw FormatError("load_onnx: " + what + " has " + std::to_string(length) + " bytes of external data for " +
                      std::to_string(checked_elements(t.dims(), what)) + " elements of " + std::to_string(width) +
                      " bytes");
  onnx::TensorProto inline_copy = t;
  inline_copy.clear_external_data();
  inline_copy.set_data_location(onnx::TensorProto::DEFAULT);
  std::string* raw = inline_copy.mutable_raw_data();
  raw->resize(size_t(length));
  in.seekg(offset);
  if (!in.read(raw->data(), length)) throw IOError("load_onnx: reading '" + file.string() + "' failed");
  return read_constant(inline_copy, what, folder);
}

Constant read_constant(const onnx::TensorProto& t, const std::string& what, const std::string& folder) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return read_external(t, what, folder);
  const int64_t n = checked_elements(t.dims(), what);
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  Constant c;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
      // The data is checked against the shape before anything is allocated.
      const std::string* raw = t.raw_data().empty() ? nullptr : &raw_bytes(t, n, 4, "float32", what);
      if (!raw) check_count(t.float_data_size(), n, what);
      c.f = Tensor::empty(Shape(dims));
      float* p = c.f.data<float>();
      if (raw) {
        std::memcpy(p, raw->data(), size_t(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) p[i] = t.float_data(int(i));
      }
      return c;
    }
    case onnx::TensorProto::DOUBLE: {
      const std::string* raw_data = t.raw_data().empty() ? nullptr : &raw_bytes(t, n, 8, "float64", what);
      if (!raw_data) check_count(t.double_data_size(), n, what);
      log_message(LogLevel::Warning, "load_onnx: " + what + " is float64; converted to float32");
      c.f = Tensor::empty(Shape(dims));
      float* p = c.f.data<float>();
      if (raw_data) {
        const std::string& raw = *raw_data;
        for (int64_t i = 0; i < n; ++i) {
          double d;
          std::memcpy(&d, raw.data() + i * 8, 8);
          p[i] = float(d);
        }
      } else {
        for (int64_t i = 0; i < n; ++i) p[i] = float(t.double_data(int(i)));
      }
      return c;
    }
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL: {
      c.is_int = true;
      c.ints.dims = dims;
      const int width = t.data_type() == onnx::TensorProto::INT64   ? 8
                        : t.data_type() == onnx::TensorProto::INT32 ? 4
                                                                    : 1;
      if (!t.raw_data().empty())
        raw_bytes(t, n, width, width == 8 ? "int64" : width == 4 ? "int32" : "bool", what);
      else
        check_count(width == 8 ? t.int64_data_size() : t.int32_data_size(), n, what);
      c.ints.v.resize(size_t(n));
      if (!t.raw_data().empty()) {
        const std::string& raw = t.raw_data();
        for (int64_t i = 0; i < n; ++i) {
          if (width == 8) {
            std::memcpy(&c.ints.v[size_t(i)], raw.data() + i * 8, 8);
          } else if (width == 4) {
            int32_t v;
            std::memcpy(&v, raw.data() + i * 4, 4);
            c.ints.v[size_t(i)] = v;
          } else {
            c.ints.v[size_t(i)] = raw[size_t(i)] != 0;
          }
        }
      } else if (width == 8) {
        for (int64_t i = 0; i < n; ++i) c.ints.v[size_t(i)] = t.int64_data(int(i));
      } else {  // int32 and bool are held in int32_data
        for (int64_t i = 0; i < n; ++i) c.ints.v[size_t(i)] = t.int32_data(int(i));
      }
      // The importer codes the batch size B and its multiples as int64
      // values from -2^62 to -2^62 + 2^40 (io/onnx/held.h); a file's own
      // value there would be read as the batch.
      if (const auto b = std::find_if(c.ints.v.begin(), c.ints.v.end(), is_batch); b != c.ints.v.end())
        throw ValueError("load_onnx: " + what + " holds " + std::to_string(*b) +
                         ", a value in the range this importer keeps for the batch size (-2^62 to -2^62 + 2^40); "
                         "such constants are not read");
      return c;
    }
    default:
      throw TypeError("load_onnx: " + what + " has ONNX data type " + std::to_string(t.data_type()) +
                      "; float32, float64 (converted), int64, int32 and bool tensors are read");
  }
}

// "{2, 3}", for dims a file gives (which a Shape may not hold); the batch
// and its multiples (io/onnx/held.h) as "B" and "B*k".
std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "{";
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = dims[i];
    s += (i ? ", " : "") + (!is_batch(d)           ? std::to_string(d)
                            : batch_factor(d) == 1 ? std::string("B")
                                                   : "B*" + std::to_string(batch_factor(d)));
  }
  return s + "}";
}

std::string layer_name(const std::string& raw, std::set<std::string>& taken) {
  std::string s;
  for (char c : raw) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  if (s.empty()) s = "onnx_node";
  std::string name = s;
  for (int k = 1; taken.count(name); ++k) name = s + "_" + std::to_string(k);
  taken.insert(name);
  return name;
}

// A value of the graph as the importer holds it: computed by the model (an
// activation) or known at import. An activation's engine tensor has the
// batch first; the file's view of it is `perm` (every file axis one held
// axis: held axis i is file axis perm[i]; empty, the file's order) or, when
// file axes merge held axes, `groups` (io/onnx/held.h). So NCHW images run
// as NHWC, a Transpose that moves the batch only relabels, and attention's
// {L, B * heads, d} is the held {B, L, heads, d}.
struct Held {
  bool is_activation = false;
  nn::SymbolicTensor x;
  std::vector<int64_t> perm;
  Groups groups;
  Constant constant;
  bool from_file = false;  // an initializer (trainable unless frozen)
  // Zeros whose shape holds the batch (the initial states an exporter makes
  // from the input's Shape): read as absent states, refused elsewhere.
  bool batch_zeros = false;
};

std::vector<int64_t> identity_perm(int64_t rank) {
  std::vector<int64_t> p(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) p[size_t(i)] = i;
  return p;
}

Groups groups_of(const Held& h) {
  if (!h.groups.empty()) return h.groups;
  return h.perm.empty() ? identity_groups(h.x.shape().rank() + 1) : groups_from_perm(h.perm);
}

// The held dims, the batch's (held[0]) as 1.
std::vector<int64_t> held_dims(const nn::SymbolicTensor& x) {
  std::vector<int64_t> d{1};
  for (int i = 0; i < x.shape().rank(); ++i) d.push_back(x.shape()[i]);
  return d;
}

// The file's dimensions of an activation, batch multiples coded.
std::vector<int64_t> file_dims(const Held& h) { return onnx_import::file_dims(groups_of(h), held_dims(h.x)); }

// Sets the view of h.x to `g`, as a perm when every group is one held axis.
void set_view(Held& h, const Groups& g) {
  const int64_t held_rank = h.x.shape().rank() + 1;
  std::vector<int64_t> perm;
  h.perm.clear();
  h.groups.clear();
  if (!singleton_perm(g, held_rank, &perm))
    h.groups = g;
  else if (perm != identity_perm(held_rank))
    h.perm = perm;
}

// A constant of rank <= r broadcast against a tensor the file sees with
// rank r, made for the held tensor whose held axis i is file axis perm[i].
Tensor held_constant(const Tensor& t, const std::vector<int64_t>& perm) {
  const int r = int(perm.size());
  std::vector<int64_t> file(size_t(r - t.shape().rank()), 1);
  for (int d = 0; d < t.shape().rank(); ++d) file.push_back(t.shape()[d]);
  std::vector<int64_t> held(perm.size()), stride(perm.size());
  for (int i = 0; i < r; ++i) held[size_t(i)] = file[size_t(perm[size_t(i)])];
  int64_t s = 1;
  for (int j = r - 1; j >= 0; --j) stride[size_t(j)] = s, s *= file[size_t(j)];
  Tensor out = Tensor::empty(Shape(held));
  const float* src = t.data<float>();
  float* dst = out.data<float>();
  std::vector<int64_t> idx(perm.size(), 0);
  for (int64_t k = 0; k < out.numel(); ++k) {
    int64_t from = 0;
    for (int i = 0; i < r; ++i) from += idx[size_t(i)] * stride[size_t(perm[size_t(i)])];
    dst[k] = src[from];
    for (int i = r - 1; i >= 0 && ++idx[size_t(i)] == held[size_t(i)]; --i) idx[size_t(i)] = 0;
  }
  return out;
}

// A constant broadcast against a tensor the file sees through groups `g`
// (io/onnx/held.h), made for its held tensor of rank `held_rank`: each file
// axis the constant spans must be one held axis other than the batch.
Tensor grouped_constant(const Tensor& t, const Groups& g, int held_rank, const NodeSpec& spec) {
  const int r = int(g.size());
  if (t.shape().rank() > r) throw unsupported(spec, "a constant of higher rank than the tensor it is applied to");
  std::vector<int64_t> held(size_t(held_rank), 1), from_axis(size_t(held_rank), -1);
  const int pad = r - t.shape().rank();
  for (int j = pad; j < r; ++j) {
    const int64_t d = t.shape()[j - pad];
    if (d == 1) continue;
    if (g[size_t(j)].size() != 1 || g[size_t(j)][0] == 0)
      throw unsupported(spec, "a constant along an axis merged with others or with the batch");
    held[size_t(g[size_t(j)][0])] = d;
    from_axis[size_t(g[size_t(j)][0])] = j - pad;
  }
  std::vector<int64_t> stride(size_t(t.shape().rank()));
  for (int64_t k = t.shape().rank() - 1, s = 1; k >= 0; --k) stride[size_t(k)] = s, s *= t.shape()[int(k)];
  Tensor out = Tensor::empty(Shape(held));
  std::vector<int64_t> idx(held.size(), 0);
  for (int64_t k = 0; k < out.numel(); ++k) {
    int64_t src = 0;
    for (size_t i = 0; i < held.size(); ++i)
      if (from_axis[i] >= 0) src += idx[i] * stride[size_t(from_axis[i])];
    out.data<float>()[k] = t.data<float>()[src];
    for (int i = held_rank - 1; i >= 0 && ++idx[size_t(i)] == held[size_t(i)]; --i) idx[size_t(i)] = 0;
  }
  return out;
}

// The model in `bytes`; `path` names it in messages ('<memory>' for
// parse_onnx), `folder` is where its external data lies (none in memory).
nn::Model import_model(std::string_view bytes, const std::string& path, const std::string& folder,
                       const OnnxOptions& options) {
  if (int64_t(bytes.size()) > kMaxFileBytes)
    throw FormatError("load_onnx: '" + path + "' is " + std::to_string(bytes.size()) +
                      " bytes; an ONNX protobuf holds at most 2 GiB (larger models keep their weights in "
                      "external data files)");
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), int(bytes.size())))
    throw FormatError("load_onnx: '" + path + "' is not an ONNX model (the protobuf is truncated or corrupt)");
  if (!model.has_graph()) throw FormatError("load_onnx: '" + path + "' has no graph");
  int64_t file_opset = 0;
  for (const onnx::OperatorSetIdProto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") file_opset = o.version();
  if (file_opset < kMinOpset || file_opset > kMaxOpset)
    throw ValueError("load_onnx: '" + path + "' uses opset " + std::to_string(file_opset) + "; opsets " +
                     std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) +
                     " are read (export with opset_version in that range)");
  const int opset = int(file_opset);

  const onnx::GraphProto& graph = model.graph();
  std::map<std::string, Held> values;
  for (const onnx::TensorProto& t : graph.initializer()) {
    Held h;
    h.constant = read_constant(t, "initializer '" + t.name() + "'", folder);
    h.from_file = true;
    values[t.name()] = std::move(h);
  }
  std::vector<nn::SymbolicTensor> inputs;
  for (const onnx::ValueInfoProto& v : graph.input()) {
    if (values.count(v.name())) continue;  // an initializer listed as an input (older exporters)
    const onnx::TypeProto_Tensor& tt = v.type().tensor_type();
    // int64 and int32 inputs are token ids, taken as int32 (checked against
    // the table they index when the model runs); bool inputs (masks) are
    // taken as float32 0 and 1.
    const bool ids = tt.elem_type() == onnx::TensorProto::INT64 || tt.elem_type() == onnx::TensorProto::INT32;
    if (tt.elem_type() != onnx::TensorProto::FLOAT && tt.elem_type() != onnx::TensorProto::BOOL && !ids)
      throw TypeError("load_onnx: input '" + v.name() + "' has ONNX data type " + std::to_string(tt.elem_type()) +
                      "; float32 inputs, bool masks (given as float32 0 and 1) and int64 or int32 token ids "
                      "are read");
    const auto& dims = tt.shape().dim();
    if (dims.size() < 2)
      throw ValueError("load_onnx: input '" + v.name() + "' has " + std::to_string(dims.size()) +
                       " dimension(s); an input needs a batch dimension first and at least one more");
    std::vector<int64_t> shape;
    for (int d = 1; d < dims.size(); ++d) {
      if (!dims[d].has_dim_value() || dims[d].dim_value() <= 0)
        throw ValueError("load_onnx: input '" + v.name() + "' has a symbolic or empty dimension " + std::to_string(d) +
                         "; only the first (the batch) may be symbolic");
      shape.push_back(dims[d].dim_value());
    }
    Held h;
    h.is_activation = true;
    h.x = nn::Input(Shape(shape), ids ? DType::Int32 : DType::Float32, v.name());
    inputs.push_back(h.x);
    values[v.name()] = std::move(h);
  }
  std::set<std::string> outputs_wanted;
  for (const onnx::ValueInfoProto& v : graph.output()) outputs_wanted.insert(v.name());

  std::set<std::string> taken;
  std::map<std::string, std::string> not_given;  // outputs the lowerings do not give (Dropout's mask), by node
  std::set<std::string> written;                 // the nodes' outputs so far
  std::map<std::pair<std::string, std::vector<int64_t>>, nn::SymbolicTensor> converted;
  // A layer of the importer's own making on held tensors, named `as` (or its node's name).
  auto own_layer = [&](std::shared_ptr<NodeSpec> spec, const std::vector<nn::SymbolicTensor>& xs,
                       const std::string& as = "") {
    auto layer = std::make_shared<OnnxNode>(spec);
    layer->set_name(layer_name(as.empty() ? spec->node_name : as, taken));
    try {
      return xs.size() == 1 ? (*layer)(xs[0]) : (*layer)(xs);
    } catch (const ShapeError& e) {
      throw FormatError("load_onnx: " + spec->where() + ": its inputs' shapes do not fit it: " + e.what());
    }
  };
  // Activation `name` (x) with its held axes reordered: held axis i of the
  // result is held axis order[i] of x; one Transpose layer, made the first
  // time it is asked for.
  auto held_transpose = [&](const std::string& name, const nn::SymbolicTensor& x, const std::vector<int64_t>& order,
                            const std::string& as = "") {
    if (order == identity_perm(int64_t(order.size()))) return x;
    auto key = std::make_pair(name, order);
    if (auto it = converted.find(key); it != converted.end()) return it->second;
    auto spec = std::make_shared<NodeSpec>();
    spec->op_type = "Transpose";
    spec->node_name = name + "_transposed";
    spec->opset = opset;
    spec->attrs["perm"].set = true;
    spec->attrs["perm"].ints = order;
    spec->slots.push_back(-1);
    return converted[key] = own_layer(spec, {x}, as);
  };
  // Activation `name` held as `from` (held axis i is file axis from[i];
  // empty, the file's order) held as `to` instead.
  auto to_layout = [&](const std::string& name, const nn::SymbolicTensor& x, std::vector<int64_t> from,
                       std::vector<int64_t> to, const std::string& as = "") {
    const int64_t rank = x.shape().rank() + 1;
    if (from.empty()) from = identity_perm(rank);
    if (to.empty()) to = identity_perm(rank);
    std::vector<int64_t> order;
    for (int64_t axis : to) order.push_back(std::find(from.begin(), from.end(), axis) - from.begin());
    return held_transpose(name, x, order, as);
  };
  // A view of x with the held dims `dims` (without the batch).
  auto held_reshape = [&](const std::string& name, const nn::SymbolicTensor& x, const std::vector<int64_t>& dims,
                          const std::string& as = "") {
    auto spec = std::make_shared<NodeSpec>();
    spec->op_type = "Reshape";
    spec->node_name = name + "_view";
    spec->opset = opset;
    IntValue target{{int64_t(dims.size()) + 1}, {kBatch}};
    target.v.insert(target.v.end(), dims.begin(), dims.end());
    spec->int_inputs[1] = target;
    spec->slots.push_back(-1);
    return own_layer(spec, {x}, as);
  };
  // h's held tensor with the file axes `tail` (negative: from the end) last,
  // in that order, each one held axis; the other held axes first (in the
  // file's order when `front_file_order`, else as held), the batch first.
  struct Arranged {
    nn::SymbolicTensor x;
    Groups groups;
  };
  auto arrange = [&](const Held& h, const std::string& name, std::vector<int64_t> tail, bool front_file_order,
                     const NodeSpec& at) {
    const Groups g = groups_of(h);
    const std::vector<int64_t> dims = held_dims(h.x);
    const int64_t r = int64_t(g.size());
    for (int64_t& t : tail) t = t < 0 ? t + r : t;
    auto in_tail = [&](int64_t a) {
      for (int64_t t : tail)
        if (std::find(g[size_t(t)].begin(), g[size_t(t)].end(), a) != g[size_t(t)].end()) return true;
      return false;
    };
    std::vector<int64_t> order;
    if (front_file_order) {
      for (int64_t j = 0; j < r; ++j)
        if (std::find(tail.begin(), tail.end(), j) == tail.end())
          order.insert(order.end(), g[size_t(j)].begin(), g[size_t(j)].end());
    } else {
      for (int64_t a = 0; a < int64_t(dims.size()); ++a)
        if (!in_tail(a)) order.push_back(a);
    }
    if (order.empty() || order[0] != 0)
      throw unsupported(at, "an op along an axis that holds the batch, or after axes the batch follows");
    const size_t front = order.size();
    std::vector<int64_t> new_dims;
    for (size_t i = 1; i < front; ++i) new_dims.push_back(dims[size_t(order[i])]);
    bool merge = false;
    for (int64_t t : tail) {
      int64_t p = 1;
      for (int64_t a : g[size_t(t)]) p *= dims[size_t(a)], order.push_back(a);
      merge = merge || g[size_t(t)].size() != 1;
      new_dims.push_back(p);
    }
    Arranged out;
    out.x = held_transpose(name, h.x, order);
    if (merge) out.x = held_reshape(name, out.x, new_dims);
    out.groups.resize(size_t(r));
    for (int64_t j = 0; j < r; ++j) {
      const auto t = std::find(tail.begin(), tail.end(), j);
      if (t != tail.end()) {
        out.groups[size_t(j)] = {int64_t(front) + (t - tail.begin())};
      } else {
        for (int64_t a : g[size_t(j)])
          out.groups[size_t(j)].push_back(std::find(order.begin(), order.begin() + int64_t(front), a) - order.begin());
      }
    }
    return out;
  };
  for (int k = 0; k < graph.node_size(); ++k) {
    const onnx::NodeProto& node = graph.node(k);
    auto spec = std::make_shared<NodeSpec>();
    spec->op_type = node.op_type();
    spec->node_name = node.name().empty() ? node.op_type() + "_" + std::to_string(k) : node.name();
    spec->opset = opset;
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      throw ValueError("load_onnx: node '" + spec->node_name + "' is in domain '" + node.domain() +
                       "'; only ONNX's default domain is read");
    for (const onnx::AttributeProto& a : node.attribute()) {
      Attr& at = spec->attrs[a.name()];
      at.set = true;
      at.i = a.i();
      at.f = a.f();
      at.ints.assign(a.ints().begin(), a.ints().end());
      at.s = a.s();
      if (a.has_t()) {
        const Constant c = read_constant(a.t(), spec->where() + " attribute '" + a.name() + "'", folder);
        if (c.is_int ? c.ints.v.size() != 1 : c.f.numel() != 1) {
          if (spec->op_type != "Constant") throw unsupported(*spec, "a tensor attribute of more than one value");
        } else {
          at.tensor_is_int = c.is_int;
          at.tensor_value = c.is_int ? double(c.ints.v[0]) : double(c.f.data<float>()[0]);
          at.tensor_int = c.is_int ? c.ints.v[0] : 0;
        }
      }
    }
    if (node.output_size() < 1) throw FormatError("load_onnx: " + spec->where() + " has no output");
    check_attributes(*spec);
    // Every value is written once (ONNX's single static assignment): by an
    // input, an initializer or one node's output.
    for (const std::string& out : node.output())
      if (!out.empty() && (values.count(out) || not_given.count(out) || !written.insert(out).second))
        throw FormatError("load_onnx: " + spec->where() + " writes '" + out +
                          "', which an input, an initializer or another node already defines (a value is "
                          "written once)");
    if (spec->op_type == "Constant") {
      if (node.attribute_size() != 1)
        throw FormatError("load_onnx: " + spec->where() + " has " + std::to_string(node.attribute_size()) +
                          " attributes; a Constant has exactly one value");
      Held h;
      if (node.attribute_size() == 1 && node.attribute(0).has_t()) {
        h.constant = read_constant(node.attribute(0).t(), "Constant '" + node.output(0) + "'", folder);
      } else if (spec->has_attr("value_float") || spec->has_attr("value_floats")) {
        std::vector<float> f = spec->has_attr("value_float") ? std::vector<float>{spec->float_attr("value_float", 0.0f)}
                                                             : std::vector<float>(node.attribute(0).floats().begin(),
                                                                                  node.attribute(0).floats().end());
        h.constant.f = Tensor::from_vector(std::span<const float>(f),
                                           spec->has_attr("value_float") ? Shape{} : Shape{int64_t(f.size())});
      } else if (spec->has_attr("value_int") || spec->has_attr("value_ints")) {
        h.constant.is_int = true;
        h.constant.ints.v = spec->has_attr("value_int") ? std::vector<int64_t>{spec->int_attr("value_int", 0)}
                                                        : spec->attrs.at("value_ints").ints;
        if (!spec->has_attr("value_int")) h.constant.ints.dims = {int64_t(h.constant.ints.v.size())};
        if (std::any_of(h.constant.ints.v.begin(), h.constant.ints.v.end(), is_batch))
          throw ValueError("load_onnx: " + spec->where() +
                           " holds a value in the range this importer keeps for the batch size (-2^62 to -2^62 + "
                           "2^40); such constants are not read");
      } else {
        throw unsupported(*spec, "a Constant without a tensor, float or int value");
      }
      values[node.output(0)] = std::move(h);
      continue;
    }
    spec->n_outputs = node.output_size();
    std::vector<const Held*> operands;  // per ONNX slot, null when absent
    bool any_activation = false;
    int n_inputs = node.input_size();
    if (spec->op_type == "Dropout") {
      // Its ratio matters in training mode only, which is refused.
      if (n_inputs > 2 && !node.input(2).empty()) {
        auto t = values.find(node.input(2));
        if (t == values.end() || !t->second.constant.is_int ||
            std::any_of(t->second.constant.ints.v.begin(), t->second.constant.ints.v.end(),
                        [](int64_t v) { return v != 0; }))
          throw unsupported(*spec, "a Dropout in training mode (training_mode true or computed)");
      }
      if (spec->int_attr("is_test", 1) == 0 && opset < 7) throw unsupported(*spec, "a Dropout with is_test = 0");
      n_inputs = std::min(n_inputs, 1);
    }
    for (int i = 0; i < n_inputs; ++i) {
      const std::string& name = node.input(i);
      if (name.empty()) {  // an absent optional input
        operands.push_back(nullptr);
        continue;
      }
      auto it = values.find(name);
      if (auto u = not_given.find(name); u != not_given.end())
        throw unsupported(*spec, "it reads '" + name + "', an output of " + u->second + " that is not computed");
      if (it == values.end())
        throw FormatError("load_onnx: " + spec->where() + " reads '" + name +
                          "', which no input, initializer or earlier node defines (the nodes must be in "
                          "topological order, without cycles)");
      operands.push_back(&it->second);
      any_activation = any_activation || it->second.is_activation;
    }
    const std::string& op = spec->op_type;
    for (const Held* h : operands)
      if (h && h->batch_zeros && !((op == "LSTM" || op == "GRU") && h != operands[0]))
        throw unsupported(*spec,
                          "a constant whose shape depends on the batch size (read only as the initial "
                          "states of LSTM and GRU)");
    // Operands by kind: activations in order, float constants as weights,
    // int64 constants as the shapes and axes the lowering reads.
    std::vector<nn::SymbolicTensor> args;
    std::vector<const Held*> arg_held;
    std::vector<std::string> arg_names;
    // A mask op beside a float operand reads its bool and int64 constants as float 0/1 and numbers.
    const bool float_masks = is_mask_op(op) && std::any_of(operands.begin(), operands.end(), [](const Held* h) {
                               return h && (h->is_activation || !h->constant.is_int);
                             });
    auto add_weight = [&](size_t i, const Tensor& value, bool trainable) {
      spec->weight_at[int(i)] = spec->weights.size();
      spec->slots.push_back(int(spec->weights.size()));
      // A weight's name may not hold '/' (the listing joins layer and weight with it).
      std::string weight_name = node.input(int(i));
      std::replace(weight_name.begin(), weight_name.end(), '/', '.');
      spec->weights.emplace_back(weight_name, value);
      spec->weight_trainable.push_back(trainable);
    };
    const bool all_int = std::all_of(operands.begin(), operands.end(),
                                     [](const Held* h) { return !h || (!h->is_activation && h->constant.is_int); });
    for (size_t i = 0; i < operands.size(); ++i) {
      const Held* h = operands[i];
      if (!h || h->batch_zeros) continue;
      // An integer constant where the op reads float32 (ONNX's type
      // constraints; an integer exponent of Pow is read as float).
      if (!h->is_activation && h->constant.is_int && !all_int && !float_masks && !(op == "Pow" && i == 1) &&
          !reads_int_constant(op, i))
        throw TypeError("load_onnx: " + spec->where() + ": input " + std::to_string(i) + " ('" + node.input(int(i)) +
                        "') is an integer constant of shape " + dims_str(h->constant.ints.dims) + "; " + op +
                        " reads a float32 tensor there (its inputs' types must agree)");
      if (is_mask_op(op) && h->is_activation && h->x.dtype() != DType::Float32)
        throw unsupported(*spec, "input '" + node.input(int(i)) +
                                     "' holds token ids (int64 and int32 inputs are read as the ids of an "
                                     "embedding's Gather only)");
      if (h->is_activation) {
        spec->slots.push_back(-1);
        args.push_back(h->x);
        arg_held.push_back(h);
        arg_names.push_back(node.input(int(i)));
      } else if (h->constant.is_int && (float_masks || (op == "Pow" && i == 1))) {
        const IntValue& c = h->constant.ints;
        if (std::any_of(c.v.begin(), c.v.end(), is_batch))
          throw unsupported(*spec, "the batch size of a computed tensor as an operand (a model plans for any batch)");
        const std::vector<float> f(c.v.begin(), c.v.end());
        add_weight(i, Tensor::from_vector(std::span<const float>(f), Shape(c.dims)), false);
      } else if (h->constant.is_int) {
        spec->int_inputs[int(i)] = h->constant.ints;
      } else {
        // A mask of the file, or an operand of a comparison, takes no gradient: it does not train.
        const bool a_mask = is_mask_op(op) && (op != "Where" || i == 0);
        add_weight(i, h->constant.f, options.trainable && h->from_file && !a_mask);
      }
    }
    if ((op == "Shape" || op == "Transpose") && (operands.size() != 1 || !operands[0]))
      throw FormatError("load_onnx: " + spec->where() + " needs exactly one input");
    if ((op == "LSTM" || op == "GRU") && !args.empty() && args[0].shape().rank() != 2)
      throw unsupported(
          *spec, "a sequence input of rank " + std::to_string(args[0].shape().rank() + 1) + " (expected {T, B, I})");
    if (op == "Shape" && any_activation) {
      // The activation's shape in the file's layout, its batch as the marker.
      const IntValue full{{}, file_dims(*operands.at(0))};
      const int64_t r = int64_t(full.v.size());
      int64_t start = spec->int_attr("start", 0), end = spec->int_attr("end", r);
      start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
      end = std::clamp<int64_t>(end < 0 ? end + r : end, start, r);
      Held h_out;
      h_out.constant.is_int = true;
      h_out.constant.ints = {{end - start}, std::vector<int64_t>(full.v.begin() + start, full.v.begin() + end)};
      values[node.output(0)] = std::move(h_out);
      continue;
    }
    if (!any_activation) {
      std::vector<const Constant*> in;
      for (const Held* h : operands) in.push_back(h ? &h->constant : nullptr);
      if (op == "ConstantOfShape" && in.at(0) && in[0]->is_int &&
          std::any_of(in[0]->ints.v.begin(), in[0]->ints.v.end(), is_batch)) {
        if (spec->has_attr("value") && spec->attrs.at("value").tensor_value != 0.0)
          throw unsupported(*spec, "a constant whose shape depends on the batch size, not zeros");
        Held h;
        h.batch_zeros = true;
        values[node.output(0)] = std::move(h);
        continue;
      }
      spec->constant_fold = true;
      std::vector<Constant> out = fold(*spec, in);
      for (size_t i = 0; i < out.size() && i < size_t(node.output_size()); ++i) {
        Held h;
        h.constant = std::move(out[i]);
        values[node.output(int(i))] = std::move(h);
      }
      continue;
    }
    if (op == "Transpose") {
      // A relabelling: new file axis j is old file axis p[j].
      const Held& in = *arg_held.at(0);
      const Groups g = groups_of(in);
      Groups moved;
      for (int64_t j : transpose_perm(*spec, int64_t(g.size()))) moved.push_back(g[size_t(j)]);
      Held h = in;
      set_view(h, moved);
      values[node.output(0)] = std::move(h);
      continue;
    }
    const bool merged = std::any_of(arg_held.begin(), arg_held.end(), [](const Held* h) { return !h->groups.empty(); });
    const bool batch_off_first = std::any_of(arg_held.begin(), arg_held.end(), [](const Held* h) {
      return !h->groups.empty() || (!h->perm.empty() && h->perm[0] != 0);
    });
    if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze") {
      // The file's result shape, batch multiples coded; a view of the held
      // tensor when it regroups its axes (io/onnx/held.h).
      const Held& in = *arg_held.at(0);
      const std::vector<int64_t> in_dims = file_dims(in);
      std::vector<int64_t> out;
      if (op == "Reshape") {
        const std::vector<int64_t> t = spec->ints("shape", 1);
        int64_t in_total = 1, known = 1, infer = -1;
        bool target_batch = false;
        for (int64_t d : in_dims) in_total = checked_mul(in_total, is_batch(d) ? batch_factor(d) : d, *spec);
        for (size_t i = 0; i < t.size(); ++i) {
          const int64_t d = t[i] == 0 && spec->int_attr("allowzero", 0) == 0 && i < in_dims.size() ? in_dims[i] : t[i];
          if (d == -1)
            infer = int64_t(i);
          else if (d < 0 && !is_batch(d))
            throw FormatError("load_onnx: " + spec->where() + ": a dimension " + std::to_string(d));
          else
            known = checked_mul(known, is_batch(d) ? batch_factor(d) : d, *spec);
          target_batch = target_batch || is_batch(d);
          out.push_back(d);
        }
        if (infer >= 0) {
          if (known <= 0 || in_total % known != 0) throw unsupported(*spec, "a reshape that changes the element count");
          out[size_t(infer)] = target_batch ? in_total / known : batch_times(in_total / known);
        }
      } else {
        std::vector<int64_t> axes = spec->ints("axes", 1);
        const int64_t r = int64_t(in_dims.size()) + (op == "Unsqueeze" ? int64_t(axes.size()) : 0);
        for (int64_t& ax : axes) ax = ax < 0 ? ax + r : ax;
        out = in_dims;
        if (op == "Squeeze") {
          if (axes.empty())
            for (int64_t i = 0; i < int64_t(out.size()); ++i)
              if (out[size_t(i)] == 1) axes.push_back(i);
          std::sort(axes.rbegin(), axes.rend());
          for (int64_t ax : axes) {
            if (ax < 0 || ax >= int64_t(out.size()) || out[size_t(ax)] != 1)
              throw unsupported(*spec, "squeezing an axis whose size is not 1");
            out.erase(out.begin() + ax);
          }
        } else {
          std::sort(axes.begin(), axes.end());
          for (int64_t ax : axes) {
            if (ax < 0 || ax > int64_t(out.size())) throw unsupported(*spec, "an axis out of range");
            out.insert(out.begin() + ax, 1);
          }
        }
      }
      // The file's own target holds a batch multiple, or the batch off the
      // first axis; or its -1 stands for a batch multiple ({B, T, F} to
      // {-1, F}), which a regrouping reads where one fits.
      const std::vector<int64_t> raw = op == "Reshape" ? spec->ints("shape", 1) : std::vector<int64_t>{};
      bool coded_target = false, inferred_multiple = false;
      for (size_t i = 0; i < raw.size(); ++i) {
        coded_target = coded_target || (is_batch(raw[i]) && (i != 0 || raw[i] != kBatch));
        inferred_multiple = inferred_multiple || (raw[i] == -1 && is_batch(out[i]) && (i != 0 || out[i] != kBatch));
      }
      // A tensor the file sees batch first, its axes only reordered (NHWC),
      // takes the file's order and the Reshape as written (below).
      const bool batch_first_perm = in.groups.empty() && (in.perm.empty() || in.perm[0] == 0);
      Regrouped r;
      const bool regroups =
          std::count_if(out.begin(), out.end(), is_batch) == 1 && regroup(groups_of(in), held_dims(in.x), out, r);
      if (!batch_first_perm || coded_target || (inferred_multiple && regroups)) {
        if (!regroups) throw unsupported(*spec, "a reshape that moves elements across the batch axis");
        Held h;
        h.is_activation = true;
        h.x = in.x;
        const std::vector<int64_t> before = held_dims(in.x);
        if (r.held_dims != std::vector<int64_t>(before.begin() + 1, before.end()))
          h.x = held_reshape(spec->node_name, in.x, r.held_dims);
        set_view(h, r.groups);
        values[node.output(0)] = std::move(h);
        continue;
      }
    }
    if (batch_off_first) {
      // Ops on a tensor whose batch is not the file's first axis, or is
      // merged with another: done on the held tensor where the op allows.
      const bool weight_matmul = (op == "MatMul" || op == "Gemm") && args.size() == 1 && spec->slots.size() >= 2 &&
                                 spec->slots[0] == -1 && spec->slots[1] >= 0 && spec->int_attr("transA", 0) == 0 &&
                                 spec->weights[size_t(spec->slots[1])].second.shape().rank() == 2;
      const bool last_axis_softmax =
          (op == "Softmax" || op == "LogSoftmax") &&
          (spec->int_attr("axis", opset < 13 ? 1 : -1) == -1 ||
           spec->int_attr("axis", opset < 13 ? 1 : -1) == int64_t(groups_of(*arg_held[0]).size()) - 1);
      if (weight_matmul || last_axis_softmax) {
        // Row by row over the file's last axis: that axis made the held tensor's last.
        const Arranged in = arrange(*arg_held[0], arg_names[0], {-1}, false, *spec);
        auto row_spec = std::make_shared<NodeSpec>(*spec);
        if (last_axis_softmax) {
          Attr last;
          last.i = -1;
          last.set = true;
          row_spec->attrs["axis"] = last;
          row_spec->opset = 13;
        }
        Held h;
        h.is_activation = true;
        h.x = own_layer(row_spec, {in.x});
        set_view(h, in.groups);
        values[node.output(0)] = std::move(h);
        continue;
      }
      if (op == "MatMul" && args.size() == 2 && groups_of(*arg_held[0]).size() >= 3 &&
          groups_of(*arg_held[0]).size() == groups_of(*arg_held[1]).size()) {
        // Batched: each operand as {leading held axes..., rows, columns}.
        const Arranged l = arrange(*arg_held[0], arg_names[0], {-2, -1}, true, *spec);
        const Arranged r = arrange(*arg_held[1], arg_names[1], {-2, -1}, true, *spec);
        std::vector<int64_t> ld = held_dims(l.x), rd = held_dims(r.x);
        if (ld.size() != rd.size() || !std::equal(ld.begin() + 1, ld.end() - 2, rd.begin() + 1))
          throw unsupported(*spec, "batched operands whose leading axes differ");
        Held h;
        h.is_activation = true;
        h.x = own_layer(std::make_shared<NodeSpec>(*spec), {l.x, r.x});
        set_view(h, l.groups);
        values[node.output(0)] = std::move(h);
        continue;
      }
      if (op == "Slice") {
        // Along file axes that are single held axes other than the batch.
        const Held& in = *arg_held[0];
        const Groups g = groups_of(in);
        const auto [starts, ends, axes, steps] = slice_params(*spec);
        auto held_spec = std::make_shared<NodeSpec>(*spec);
        held_spec->opset = 13;
        held_spec->attrs.clear();
        held_spec->int_inputs.clear();
        IntValue s_v{{int64_t(starts.size())}, starts}, e_v{{int64_t(ends.size())}, ends},
            a_v{{int64_t(axes.size())}, {}};
        for (int64_t ax : axes) {
          const int64_t j = ax < 0 ? ax + int64_t(g.size()) : ax;
          if (j < 0 || j >= int64_t(g.size()) || g[size_t(j)].size() != 1 || g[size_t(j)][0] == 0)
            throw unsupported(*spec, "a Slice along an axis merged with others or with the batch");
          a_v.v.push_back(g[size_t(j)][0]);
        }
        held_spec->int_inputs[1] = s_v;
        held_spec->int_inputs[2] = e_v;
        held_spec->int_inputs[3] = a_v;
        if (!steps.empty()) held_spec->int_inputs[4] = IntValue{{int64_t(steps.size())}, steps};
        Held h;
        h.is_activation = true;
        h.x = own_layer(held_spec, {in.x});
        set_view(h, g);
        values[node.output(0)] = std::move(h);
        continue;
      }
      if (merged && layout_free(op)) {
        // Element-wise on tensors seen alike: the others held as the first,
        // constants laid out on its held axes.
        const Groups g0 = groups_of(*arg_held[0]);
        const std::vector<int64_t> d0 = held_dims(args[0]);
        for (auto& [name, w] : spec->weights)
          if (w.numel() != 1) w = grouped_constant(w, g0, int(d0.size()), *spec);
        std::vector<nn::SymbolicTensor> aligned{args[0]};
        for (size_t i = 1; i < args.size(); ++i) {
          const Groups gi = groups_of(*arg_held[i]);
          const std::vector<int64_t> di = held_dims(args[i]);
          std::vector<int64_t> order(d0.size(), -1);  // order[held axis of the first] = held axis of this one
          bool alike = gi.size() == g0.size() && di.size() == d0.size();
          for (size_t j = 0; alike && j < g0.size(); ++j) {
            alike = gi[j].size() == g0[j].size();
            for (size_t k2 = 0; alike && k2 < g0[j].size(); ++k2) {
              order[size_t(g0[j][k2])] = gi[j][k2];
              alike = di[size_t(gi[j][k2])] == d0[size_t(g0[j][k2])];
            }
          }
          if (!alike) throw unsupported(*spec, "inputs held in different layouts");
          aligned.push_back(held_transpose(arg_names[i], args[i], order));
        }
        Held h;
        h.is_activation = true;
        h.x = own_layer(std::make_shared<NodeSpec>(*spec), aligned);
        set_view(h, g0);
        values[node.output(0)] = std::move(h);
        continue;
      }
      if (merged)
        throw unsupported(*spec,
                          "an input whose batch is merged with another axis (read by MatMul, Gemm, Softmax, "
                          "Slice, Reshape, Transpose and element-wise ops)");
    }
    check_node(*spec);
    // Layouts: an image op reads NHWC; a recurrent op reads its sequence
    // batch first; a layout-free op keeps its first input's layout (its other
    // inputs and its constants are converted); any other op reads the file's.
    std::vector<std::vector<int64_t>> want(args.size());
    std::vector<int64_t> out_perm;
    if (op == "BatchNormalization" && args.size() == 1 && args[0].shape().rank() == 1) {
      // {N, C}: the channels are already last.
    } else if (kImageOps.count(op)) {
      for (size_t i = 0; i < args.size(); ++i)
        if (args[i].shape().rank() != 3) throw unsupported(*spec, "an image input that is not {N, C, H, W}");
      want.assign(args.size(), {0, 2, 3, 1});
      out_perm = {0, 2, 3, 1};
    } else if (op == "LSTM" || op == "GRU") {
      if (spec->int_attr("layout", 0) == 0) want[0] = {1, 0, 2};
    } else if (layout_free(op)) {
      for (const Held* h : arg_held)
        if (!h->perm.empty()) {
          out_perm = h->perm;
          break;
        }
      for (size_t i = 0; i < args.size(); ++i) {
        if (!out_perm.empty() && args[i].shape().rank() + 1 != int(out_perm.size()))
          throw unsupported(*spec, "inputs of different ranks, one held in another layout");
        want[i] = out_perm;
      }
    }
    for (size_t i = 0; i < args.size(); ++i) {
      const std::vector<int64_t>& from = arg_held[i]->perm;
      if (!from.empty() && from[0] != 0 && (want[i].empty() || want[i][0] != from[0]))
        throw unsupported(*spec, "an input whose batch is its axis " + std::to_string(from[0]) +
                                     " (the batch must be the first axis here)");
      args[i] = to_layout(arg_names[i], args[i], from, want[i]);
    }
    if (op == "PRelu" && opset < 7 && spec->weight_at.count(1)) {
      // Before opset 7 a slope of C values is per channel (axis 1).
      Tensor& w = spec->weights[spec->weight_at.at(1)].second;
      if (w.shape().rank() == 1 && w.numel() > 1) {
        std::vector<int64_t> d{w.numel()};
        d.resize(size_t(args[0].shape().rank()), 1);
        w = w.reshape(Shape(d));
      }
    }
    if (op == "Conv") {  // {F, C, kh, kw} -> the engine's {kh, kw, C, F}
      Tensor& w = spec->weights[size_t(spec->slots[1])].second;
      w = held_constant(w, {2, 3, 1, 0});
    } else if (op == "LSTM" || op == "GRU") {
      recurrent_weights(*spec);
    } else if (!out_perm.empty() && layout_free(op)) {
      for (auto& [name, w] : spec->weights)
        if (w.shape().rank() >= 1 && w.numel() > 1) {
          if (w.shape().rank() > int(out_perm.size()))
            throw unsupported(*spec, "a constant of higher rank than the tensor it is applied to");
          w = held_constant(w, out_perm);
        }
    }
    if (op == "BatchNormalization" && options.trainable) {
      // Keras' batch-norm layer over the channels (last here): gamma and beta
      // train, the moving statistics start as the file's and update in
      // training (ONNX's momentum is Keras'); frozen, the inference form below.
      auto bn = std::make_shared<nn::BatchNormalization>(spec->float_attr("momentum", 0.9f),
                                                         spec->float_attr("epsilon", 1e-5f));
      bn->set_name(layer_name(spec->node_name, taken));
      Held h;
      h.is_activation = true;
      h.x = (*bn)(args[0]);
      h.perm = out_perm;
      const std::vector<nn::Weight> w = bn->weights();  // gamma, beta, moving mean, moving variance
      for (size_t i = 0; i < 4; ++i) {
        const Tensor& from = spec->weights[spec->weight_at.at(int(i) + 1)].second;
        if (from.shape() != w.at(i).value.shape())
          throw FormatError("load_onnx: " + spec->where() + ": input " + std::to_string(i + 1) + " is " +
                            from.shape().str() + "; expected " + w.at(i).value.shape().str() + " (one per channel)");
        Tensor(w[i].value).copy_from(from);
      }
      values[node.output(0)] = std::move(h);
      for (int i = 1; i < node.output_size(); ++i)
        if (!node.output(i).empty()) not_given[node.output(i)] = spec->where();
      continue;
    }
    auto layer = std::make_shared<OnnxNode>(spec);
    const bool is_output = outputs_wanted.count(node.output(0)) != 0;
    layer->set_name(layer_name(is_output && out_perm.empty() ? node.output(0) : spec->node_name, taken));
    nn::SymbolicTensor first;
    try {
      first = args.size() == 1 ? (*layer)(args[0]) : (*layer)(args);
    } catch (const ShapeError& e) {
      throw FormatError("load_onnx: " + spec->where() + ": its inputs' shapes do not fit it: " + e.what());
    }
    const std::vector<Shape>& shapes = layer->output_shapes();
    if (shapes.size() > 1) {
      // Several outputs (Split, LayerNormalization's statistics): one call, a tensor per output.
      auto call = std::const_pointer_cast<nn::LayerCall>(first.call());
      for (size_t i = 0; i < shapes.size(); ++i) {
        if (i > 0) call->more_shapes.push_back(shapes[i]);
        call->output_names.push_back(layer->name() + (i ? "/" + std::to_string(i) : ""));
      }
    }
    for (int i = 0; i < node.output_size(); ++i) {
      if (node.output(i).empty()) continue;
      if (size_t(i) >= shapes.size()) {  // an error only when read
        not_given[node.output(i)] = spec->where();
        continue;
      }
      Held h;
      h.is_activation = true;
      h.x = nn::SymbolicTensor(first.call(), i);
      h.perm = out_perm;
      // A recurrent op's Y {T, dirs, B, H} and states {dirs, B, H}, held batch first.
      if ((op == "LSTM" || op == "GRU") && spec->int_attr("layout", 0) == 0)
        h.perm = i == 0 ? std::vector<int64_t>{2, 0, 1, 3} : std::vector<int64_t>{1, 0, 2};
      values[node.output(i)] = std::move(h);
    }
  }
  std::vector<nn::SymbolicTensor> outputs;
  for (const onnx::ValueInfoProto& v : graph.output()) {
    auto a = values.find(v.name());
    if (a == values.end() || !a->second.is_activation)
      throw ValueError("load_onnx: output '" + v.name() + "' is not computed from the inputs by a node read here");
    const Held& h = a->second;
    // The node that wrote it, for messages.
    std::string by = "an input";
    for (int k = 0; k < graph.node_size(); ++k) {
      const onnx::NodeProto& n = graph.node(k);
      for (const std::string& o : n.output())
        if (o == v.name())
          by = n.op_type() + " node '" + (n.name().empty() ? n.op_type() + "_" + std::to_string(k) : n.name()) + "'";
    }
    const Groups g = groups_of(h);
    if (g.empty() || g[0].empty() || g[0][0] != 0) {
      int64_t axis = 0;
      auto holds_batch = [](const std::vector<int64_t>& group) {
        return std::find(group.begin(), group.end(), 0) != group.end();
      };
      while (axis < int64_t(g.size()) && !holds_batch(g[size_t(axis)])) ++axis;
      throw ValueError("load_onnx: output '" + v.name() + "' (written by " + by + ") has the batch inside its axis " +
                       std::to_string(axis) + " " + dims_str(file_dims(h)) +
                       " behind other axes; a model's outputs have the batch first (B * k counts as the batch "
                       "followed by k)");
    }
    if (h.groups.empty()) {
      outputs.push_back(to_layout(v.name(), h.x, h.perm, {}, v.name()));
      continue;
    }
    // The batch folded into the first axis ({B * T, V}, PyTorch's
    // view(-1, V)): the file's values in the file's order are the held
    // tensor in the groups' order, given with the batch apart ({B, T, V}).
    std::vector<int64_t> order, dims;
    for (const std::vector<int64_t>& group : g) order.insert(order.end(), group.begin(), group.end());
    const std::vector<int64_t> held = held_dims(h.x);
    for (int64_t i = 0; i < int64_t(held.size()); ++i)  // size-1 held axes no group names
      if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
    for (size_t j = 0; j < g.size(); ++j) {
      int64_t p = 1;
      for (int64_t i : g[j]) p *= i == 0 ? 1 : held[size_t(i)];
      if (j > 0 || p != 1) dims.push_back(p);
    }
    if (dims.empty()) dims.push_back(1);  // {B}: a value per row
    const nn::SymbolicTensor x = held_transpose(v.name(), h.x, order);
    outputs.push_back(held_reshape(v.name(), x, dims, v.name()));
  }
  if (inputs.empty() || outputs.empty()) throw FormatError("load_onnx: '" + path + "' has no inputs or no outputs");
  return nn::Model(inputs, outputs, options.name.empty() ? graph.name() : options.name);
}

}  // namespace

bool onnx_available() { return true; }

nn::Model load_onnx(const std::string& path, const OnnxOptions& options) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw IOError("load_onnx: cannot open '" + path + "'; check the path");
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxFileBytes)
    throw FormatError("load_onnx: '" + path + "' is " + std::to_string(size) +
                      " bytes; an ONNX protobuf holds at most 2 GiB (larger models keep their weights in "
                      "external data files)");
  in.seekg(0);
  std::string bytes(size_t(size), '\0');
  if (!in.read(bytes.data(), size)) throw IOError("load_onnx: reading '" + path + "' failed");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return import_model(bytes, path, parent.empty() ? "." : parent.string(), options);
}

nn::Model parse_onnx(std::span<const uint8_t> bytes, const OnnxOptions& options) {
  return import_model(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "<memory>", "",
                      options);
}

}  // namespace tensorgrad::io

#else  // built without ONNX

namespace tensorgrad::io {

bool onnx_available() { return false; }

nn::Model load_onnx(const std::string& path, const OnnxOptions&) {
  throw StateError("load_onnx('" + path +
                   "'): this build of tensorgrad has no ONNX support; install libonnx-dev (scripts/setup.sh does) "
                   "and configure again with -DTENSORGRAD_ONNX=AUTO or ON");
}

nn::Model parse_onnx(std::span<const uint8_t>, const OnnxOptions&) {
  throw StateError(
      "parse_onnx: this build of tensorgrad has no ONNX support; install libonnx-dev (scripts/setup.sh "
      "does) and configure again with -DTENSORGRAD_ONNX=AUTO or ON");
}

}  // namespace tensorgrad::io

#endif
