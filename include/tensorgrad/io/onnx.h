#pragma once
// ONNX import: a trained model from PyTorch's exporter (torch.onnx.export) or
// any other ONNX writer, as a functional nn::Model that predicts what the
// file computes and can be compiled and trained further.
#include <string>

#include "tensorgrad/nn/model.h"

namespace tensorgrad::io {

/// Options of load_onnx.
struct OnnxOptions {
  /// Whether the file's initializers (its weights) are trainable weights of
  /// the model; false freezes them all (Keras' layer.trainable = False).
  /// Constant nodes' values are never trained.
  bool trainable = true;
  /// The model's name; empty: the ONNX graph's name.
  std::string name = "";
};

/// Whether this build reads ONNX files (built with Debian's libonnx-dev:
/// the CMake option TENSORGRAD_ONNX).
bool onnx_available();

/// Loads the ONNX model at `path` (ONNX's protobuf format, opsets 7 to 17)
/// as a functional model. The graph's inputs become Inputs whose first
/// dimension is the batch (symbolic or not: the model then runs any
/// batch); its outputs are the model's, named by their ONNX names.
/// Initializers become weights named "<layer>/<ONNX name>" in the file's
/// layout (a Gemm with transB = 1 multiplies by the transpose without a
/// copy). Each node becomes one layer of type "OnnxNode", so the model
/// compiles, trains and saves its weights (save_weights, load_weights into
/// a model loaded from the same file) as any other; io::load_model cannot
/// rebuild an imported model's layers yet (load the ONNX file again).
///
/// Images: an input read by a convolution or pooling is taken in the
/// file's NCHW layout; the model converts it to the engine's NHWC once, at
/// its first image op, keeps NHWC through the element-wise ops after it, and
/// converts back before an op that reads the layout (Flatten, Reshape, ...)
/// or an output, so callers give and get what the file does.
///
/// The ops read so far: Conv (2-D, group 1, explicit pads), MaxPool and
/// AveragePool (2-D, ceil_mode 0; AveragePool without padding),
/// GlobalAveragePool, BatchNormalization (inference: its scale and bias
/// train, its statistics stay the file's), Gemm (transA 0), MatMul (by a
/// weight), Add, Sub,
/// Mul, Div (NumPy broadcasting), Neg, Pow (a scalar exponent), Clip,
/// Relu, LeakyRelu, Elu, Softplus, Sigmoid, Tanh, Erf, Exp, Log, Sqrt,
/// Softmax and LogSoftmax (the last axis), Flatten (axis 1), Reshape (to a
/// constant shape; its first entry is the batch), Squeeze, Unsqueeze,
/// Transpose and Concat (not across the batch axis), ReduceMean, ReduceSum
/// and ReduceMax (over given axes other than the batch's), Identity,
/// Dropout (the identity in inference, as the exporters write it),
/// Constant.
///
/// Throws IOError when the file cannot be read; FormatError for a file
/// that is not a well-formed ONNX model (a truncated or corrupt protobuf, a
/// node reading an undefined value, a weight whose data does not fit its
/// shape, an absurd dimension); ValueError for an op or attribute this
/// importer does not read (naming the op type, the node and the opset, and
/// listing the ops it reads), an opset outside 7 to 17, or an input without
/// a batch dimension; TypeError for tensor types other than float32 (and
/// int64 shapes); StateError when the build has no ONNX support
/// (onnx_available() is false).
nn::Model load_onnx(const std::string& path, const OnnxOptions& options = {});

}  // namespace tensorgrad::io
