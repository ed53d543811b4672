// io::read_onnx_info (io/onnx.h): an ONNX file summarized from its protobuf,
// for tensorgrad-inspect and for callers that look before importing.
#include "tensorgrad/core/error.h"
#include "tensorgrad/io/onnx.h"

#ifdef TENSORGRAD_WITH_ONNX

#include <onnx/onnx_pb.h>

#include <fstream>
#include <iterator>
#include <map>

namespace tensorgrad::io {

namespace {

std::string type_name(int type) {
  const std::string s = onnx::TensorProto_DataType_Name(type);
  return s.empty() ? "type " + std::to_string(type) : s;
}

OnnxValueInfo value_info(const onnx::ValueInfoProto& v) {
  OnnxValueInfo out;
  out.name = v.name();
  const onnx::TypeProto_Tensor& t = v.type().tensor_type();
  out.type = v.type().has_tensor_type() ? type_name(t.elem_type()) : "not a tensor";
  for (const onnx::TensorShapeProto_Dimension& d : t.shape().dim())
    out.dims.push_back(d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : "?");
  return out;
}

}  // namespace

OnnxInfo read_onnx_info(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IOError("read_onnx_info: cannot open '" + path + "'; check the path");
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in))
    throw FormatError("read_onnx_info: '" + path + "' is not an ONNX model (the protobuf is truncated or corrupt)");
  OnnxInfo info;
  info.ir_version = model.ir_version();
  info.producer_name = model.producer_name();
  info.producer_version = model.producer_version();
  info.graph_name = model.graph().name();
  for (const onnx::OperatorSetIdProto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") info.opset = o.version();
  std::map<std::string, int> ops;
  for (const onnx::NodeProto& n : model.graph().node())
    ++ops[n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type() : n.domain() + "." + n.op_type()];
  info.op_counts.assign(ops.begin(), ops.end());
  std::map<std::string, bool> initializer;
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    OnnxTensorInfo ti;
    ti.name = t.name();
    ti.type = type_name(t.data_type());
    ti.dims.assign(t.dims().begin(), t.dims().end());
    ti.bytes = int64_t(t.raw_data().size()) + 4 * int64_t(t.float_data_size() + t.int32_data_size()) +
               8 * int64_t(t.int64_data_size() + t.double_data_size());
    info.initializers.push_back(ti);
    initializer[t.name()] = true;
  }
  for (const onnx::ValueInfoProto& v : model.graph().input())
    if (!initializer.count(v.name())) info.inputs.push_back(value_info(v));
  for (const onnx::ValueInfoProto& v : model.graph().output()) info.outputs.push_back(value_info(v));
  return info;
}

}  // namespace tensorgrad::io

#else  // built without ONNX

namespace tensorgrad::io {

OnnxInfo read_onnx_info(const std::string& path) {
  throw StateError("read_onnx_info('" + path +
                   "'): this build of tensorgrad has no ONNX support; install libonnx-dev (scripts/setup.sh does) "
                   "and configure again with -DTENSORGRAD_ONNX=AUTO or ON");
}

}  // namespace tensorgrad::io

#endif
