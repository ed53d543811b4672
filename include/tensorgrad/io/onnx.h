#pragma once
// ONNX import and export: a trained model from PyTorch's exporter
// (torch.onnx.export) or any other ONNX writer, as a functional nn::Model
// that predicts what the file computes and can be compiled and trained
// further; and any model written as an ONNX file for ONNX Runtime.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

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

/// A graph input or output as an ONNX file declares it.
struct OnnxValueInfo {
  std::string name;               ///< the value's name in the graph
  std::string type;               ///< ONNX's element type name ("FLOAT", "INT64", ...)
  std::vector<std::string> dims;  ///< each a size, or the symbolic name ("batch"), or "?"
};

/// An initializer of an ONNX file.
struct OnnxTensorInfo {
  std::string name;           ///< the initializer's name in the graph
  std::string type;           ///< ONNX's element type name
  std::vector<int64_t> dims;  ///< ONNX's order (outermost first)
  int64_t bytes = 0;          ///< of its data in the file (0 for external data)
};

/// What an ONNX file holds, read without importing it (as
/// onnx.helper.printable_graph summarizes a model).
struct OnnxInfo {
  int64_t ir_version = 0;        ///< the ONNX IR version the file declares
  std::string producer_name;     ///< e.g. "pytorch"
  std::string producer_version;  ///< e.g. "1.13.0"
  std::string graph_name;        ///< the graph's name
  int64_t opset = 0;             ///< of ONNX's default domain
  std::vector<OnnxValueInfo> inputs;   ///< the graph's inputs but the initializers listed as inputs
  std::vector<OnnxValueInfo> outputs;  ///< the graph's outputs
  std::vector<std::pair<std::string, int>> op_counts;  ///< op type and node count, by op type
  std::vector<OnnxTensorInfo> initializers;           ///< in the file's order
};

/// Reads the summary of the ONNX file at `path`. Throws IOError when it
/// cannot be read, FormatError when it is not an ONNX model, StateError
/// without ONNX support.
OnnxInfo read_onnx_info(const std::string& path);

/// Whether this build reads ONNX files (built with Debian's libonnx-dev:
/// the CMake option TENSORGRAD_ONNX).
bool onnx_available();

/// Loads the ONNX model at `path` (ONNX's protobuf format, opsets 6 to 17)
/// as a functional model. The graph's inputs become Inputs whose first
/// dimension is the batch (symbolic or not: the model then runs any
/// batch); float32 inputs stay float32, int64 and int32 inputs (token ids
/// for an embedding) are taken as int32 and checked against the table they
/// index when the model runs, bool inputs (masks) are taken as float32
/// holding 0 and 1 (give them so: any non-zero reads as true). Its outputs are the model's, in the file's
/// order and layout; an output that folds the batch into its first axis
/// ({B * T, V}, PyTorch's logits.view(-1, V); {B * 12}, x.reshape(-1)) is
/// given with the batch apart ({B, T, V}, {B, 12}): ONNX Runtime's values
/// in its order. Initializers become weights named
/// "<layer>/<ONNX name>" (a Conv weight converted to {kh, kw, C, F}, LSTM
/// and GRU weights to a kernel, recurrent kernel and bias per direction;
/// float64 ones converted to float32 with a warning; external data, ONNX's
/// form for models over 2 GiB, read from files in the model's own folder,
/// symbolic links resolved: a link that stays in the folder is read, one
/// whose real path leaves it is refused).
/// Nodes whose inputs
/// are all constants (the shape computations exporters write: Shape,
/// Gather, Concat, Unsqueeze, Range, ConstantOfShape ...) are computed at
/// import, the batch size kept symbolic, each result at most 2^24 values;
/// every other node becomes one layer
/// of type "OnnxNode", so the model compiles, trains and saves its weights
/// (save_weights, load_weights into a model loaded from the same file) as
/// any other; io::load_model cannot rebuild an imported model's layers yet
/// (load the ONNX file again).
///
/// Layouts: an input read by a convolution or pooling is taken in the
/// file's NCHW layout; the model converts it to the engine's NHWC once, at
/// its first image op, keeps NHWC through the element-wise ops after it, and
/// converts back before an op that reads the layout or at an output. A
/// Transpose that moves the batch axis (a sequence-first LSTM's input, as
/// PyTorch exports batch_first layers) only relabels axes, and a Reshape
/// that folds the batch into another axis (attention's {L, B * heads, d})
/// only regroups the held axes ({B, L, heads, d}); MatMul, Gemm, Softmax,
/// Slice and element-wise ops run on such tensors as held, any other op on
/// them is refused.
///
/// Ops read: Conv (2-D, any group: grouped and depthwise; pads, strides, dilations, auto_pad),
/// MaxPool, AveragePool (ceil_mode, count_include_pad), GlobalAveragePool,
/// GlobalMaxPool, BatchNormalization (Keras' BatchNormalization layer over
/// the channels: gamma and beta train, the moving statistics start as the
/// file's and update in training with the file's momentum; with
/// `trainable = false`, the inference form), LayerNormalization, Gemm (the
/// batch as A's rows), MatMul (activations by a 2-D weight, a weight by
/// activations, or two batched activations of one rank), LSTM and GRU
/// (forward, reverse, bidirectional; ONNX's gate orders; zero initial
/// states; GRU with linear_before_reset = 1, as PyTorch exports), Gather
/// (constant indices, or an embedding table by token ids), element-wise Add,
/// Sub, Mul, Div, Max, Min, Sum, Mean (NumPy broadcasting), Neg, Abs,
/// Reciprocal, Pow (a scalar exponent), Clip, Relu, LeakyRelu, PRelu, Elu,
/// Selu, Celu, Softplus, Softsign, HardSigmoid, HardSwish, Sigmoid, Tanh,
/// Erf, Exp, Log, Sqrt, Softmax and LogSoftmax (any axis but the batch),
/// Flatten, Reshape, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice
/// (step 1), Pad (constant), Expand, Cast (to float32, or to bool: a 0/1
/// mask of x != 0), ReduceMean, Sum,
/// Max, Min, L1, L2, SumSquare, LogSum and LogSumExp (over axes other than
/// the batch's), Identity, Dropout (inference), Constant; on masks (bool
/// tensors, held as float32 0 and 1, so a bool output is a float32 one)
/// Equal, Less, Greater, LessOrEqual, GreaterOrEqual (a NaN compares false),
/// Not, And, Or, Xor and Where (torch.where's rule: the branch not taken
/// never reaches the result; its gradient goes to the branch taken); and on
/// constants also Shape, Size, Range, ConstantOfShape.
///
/// Throws IOError when the file cannot be read; FormatError for a file
/// that is not a well-formed ONNX model (a truncated or corrupt protobuf, a
/// node reading an undefined value or one of a later node (a cycle), a
/// weight whose data does not fit its shape, an absurd dimension refused
/// before allocating, inputs whose shapes do not fit a node, external data
/// whose offset and length are not counts of bytes or do not fit its file
/// or its shape, a value written twice (by two nodes, or a node over an
/// input or initializer), a Conv kernel_shape other than its weight's, a
/// constant computed at import of more than 2^24 values); ValueError
/// for an op or attribute this importer does not read (naming the op type,
/// the node and the opset, and listing the ops it reads), an op across the
/// batch axis, external data outside the model's folder (or given to
/// parse_onnx, or whose real path leaves the folder through a symbolic
/// link), an opset outside 6 to 17, an input without a batch dimension, or
/// an output whose batch is not the major part of its first axis;
/// TypeError for tensor types other than float32, float64, int64, int32
/// and bool, or an integer constant where an op reads float32 (an int64
/// weight of a Gemm; a Pow's integer exponent is read); StateError when
/// the build has no ONNX support
/// (onnx_available() is false).
nn::Model load_onnx(const std::string& path, const OnnxOptions& options = {});

/// The layout an exported file takes image inputs in.
enum class OnnxImageLayout {
  NHWC,  ///< channels last, as the model was trained (Keras' default)
  NCHW,  ///< channels first, PyTorch's and most ONNX runtimes' convention: the file transposes once at the input
};

/// Options of save_onnx.
struct OnnxExportOptions {
  /// How the file takes inputs of rank 3 without the batch ({H, W, C}
  /// images): as they are (NHWC), or as {C, H, W} (NCHW). Other inputs are
  /// taken as they are, and so is an input the model already reads as NCHW
  /// (only through a permutation to channels last: an imported ONNX
  /// model's image input).
  OnnxImageLayout image_layout = OnnxImageLayout::NHWC;
};

/// Writes `model`'s inference graph to `path` as an ONNX model (opset 17,
/// IR version 8) that ONNX Runtime and other runtimes run: the graph
/// predict() runs (dropout removed, batch normalization with its moving
/// statistics), the batch dimension symbolic ("batch"), the model's inputs
/// and outputs by their names (float32, or int32 token ids), every weight
/// an initializer named "<layer>/<weight>" in tensorgrad's layouts (a
/// Conv2D kernel {kh, kw, C / groups, F}, transposed to ONNX's in the
/// graph; grouped and depthwise ones with Conv's `group`).
/// Every op of the graph is written as ONNX ops: GELU in its Erf or Tanh
/// form (ONNX's Gelu is later than opset 17), convolutions and poolings as
/// ONNX's NCHW ones between transposes, LSTM and GRU layers as ONNX's LSTM
/// and GRU (PyTorch's reset-after GRU, linear_before_reset = 1), masks as
/// Where. Any layer built from tensorgrad's ops exports, custom ones
/// included; nested models export inline. The file is checked with ONNX's
/// checker and strict shape inference before it is written, and written
/// atomically (a crash leaves the old file or the new one, never a part).
///
/// Throws ValueError naming the layer when its graph has an op with no
/// ONNX form at inference (dropout applied at inference, a loss, an
/// optimizer update, batch statistics), reads an LSTM's or GRU's cell state
/// or gates, or computes across the batch (a reduction over the batch axis);
/// StateError for a model that is not built or whose weights were released;
/// IOError when `path` cannot be written (nothing is left behind);
/// StateError when the build has no ONNX support (onnx_available()).
void save_onnx(const nn::Model& model, const std::string& path, const OnnxExportOptions& options = {});

/// load_onnx of a model held in memory (the bytes of an ONNX file, as
/// onnx.load_from_string reads them); messages name it "&lt;memory&gt;". Throws
/// as load_onnx, but no IOError.
nn::Model parse_onnx(std::span<const uint8_t> bytes, const OnnxOptions& options = {});

}  // namespace tensorgrad::io
