#pragma once
// Keras-style layers (keras.layers). A layer is built once for its input
// shape (which creates its weights, drawn from the global seed) and then
// called into any Builder: the training graph, the prediction graph, or the
// eager API (ag::EagerBuilder), all sharing the same weight tensors.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad::nn {

/// A named weight: "<layer>/<weight>" with Keras' names ("dense/kernel").
struct Weight {
  std::string name;       ///< "<layer>/<weight>"
  Tensor value;           ///< the weight's tensor itself (not a copy)
  bool trainable = true;  ///< updated by the optimizer (declared trainable, layer trainable)
  /// false for running statistics (batch-norm moving mean and variance):
  /// target-network updates copy them whole instead of averaging.
  bool averaged = true;
};

/// Makes a weight's first value for its shape (Keras' initializers): a
/// tensor of exactly that shape, drawn from the global generator where it is
/// random (core/random.h), so weights are drawn after a manual_seed in
/// declaration order.
using Initializer = std::function<Tensor(const Shape& shape)>;

/// Keras' built-in initializers by their Keras names.
namespace initializers {
/// Glorot (Xavier) uniform, Keras' default kernel initializer: U(-l, l),
/// l = sqrt(6 / (fan_in + fan_out)), the fans from the shape as Keras'
/// compute_fans: {in, out} for a matrix; for a convolution kernel
/// {..., in, out} each times the product of the leading (receptive field)
/// sizes. Throws ShapeError for a shape of rank below 2.
Initializer glorot_uniform();
/// Keras' Orthogonal for a {rows, cols} matrix: rows (rows <= cols) or
/// columns orthonormal. Throws ShapeError for any other rank.
Initializer orthogonal();
/// U(low, high) (Keras' RandomUniform).
Initializer random_uniform(float low, float high);
/// Every element `value` (Keras' Zeros, Ones, Constant).
Initializer constant(float value);
/// Every element 0 (Keras' Zeros).
inline Initializer zeros() { return constant(0.0f); }
/// Every element 1 (Keras' Ones).
inline Initializer ones() { return constant(1.0f); }
}  // namespace initializers

/// What a layer declares about one weight (Keras' Layer.add_weight
/// arguments); designated initializers read as Keras' keywords:
/// add_weight({.name = "kernel", .shape = {in, units}, .initializer = initializers::glorot_uniform()}).
struct WeightSpec {
  /// The weight's own name ("kernel"); the layer's listing prefixes it with
  /// the layer's name ("dense/kernel"), which saved files and state dicts use.
  std::string name;
  Shape shape;              ///< the weight's full shape
  Initializer initializer;  ///< makes the first value; required
  /// false for state that no gradient reaches (batch-norm moving statistics,
  /// Keras' non_trainable_weights): never updated by the optimizer, and
  /// copied whole, not averaged, by target-network updates.
  bool trainable = true;
  DType dtype = DType::Float32;  ///< the weight's dtype (the initializer must make it)
};

/// A layer's handle on one of its declared weights (what add_weight
/// returns). An index into the layer's declarations, so it stays valid in
/// copies of the layer (clone); invalid until the weight is declared.
class WeightId {
 public:
  /// Invalid: no weight yet.
  WeightId() = default;
  /// Whether it names a declared weight.
  bool valid() const { return index_ >= 0; }

 private:
  friend class Layer;
  explicit WeightId(int index) : index_(index) {}
  int index_ = -1;
};

class Layer;
// GCC 12 at -O3 reports a false -Wstringop-overflow on the Tensor assignment
// in clone_layer when weight_slots() has a single entry (Embedding's).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
/// A copy of `layer` whose weight tensors (listed by weight_slots) are
/// deep-copied; the helper every Layer::clone uses.
template <class T>
std::shared_ptr<Layer> clone_layer(const T& layer) {
  auto copy = std::make_shared<T>(layer);
  for (Tensor* t : copy->weight_slots())
    if (t->defined()) *t = t->clone();
  return copy;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// How a layer is being called.
struct CallOptions {
  bool training = false;   ///< dropout active, batch statistics (and their moving averages updated)
  bool calibrate = false;  ///< batch normalization: set the moving statistics to this batch's, exactly
  /// Keras' masks of the inputs, one per input: float32 {batch, steps} (1
  /// for a token, 0 for padding), or an invalid Value for an input without
  /// one; empty when no input carries a mask. Only layers that
  /// supports_masking() receive masks.
  std::span<const Value> masks = {};
};

struct LayerCall;
/// A symbolic tensor (Keras' KerasTensor): the output of Input() or of a
/// layer called on symbolic tensors. It carries a shape without the batch
/// and a dtype, and remembers the call that made it, so a Model can take the
/// graph between its inputs and outputs. Copies share the same node.
class SymbolicTensor {
 public:
  /// Undefined: no call.
  SymbolicTensor() = default;
  /// Output `index` of `call` (a nested model with several outputs has one
  /// call and a tensor per output).
  explicit SymbolicTensor(std::shared_ptr<const LayerCall> call, int index = 0)
      : call_(std::move(call)), index_(index) {}
  /// Whether it comes from a call (a default-constructed one does not).
  bool defined() const { return call_ != nullptr; }
  /// Shape without the batch, and dtype. Throw StateError when undefined.
  ///@{
  const Shape& shape() const;
  DType dtype() const;
  ///@}
  /// The name of the layer that made it (or of the Input); for output k > 0
  /// of a nested model, that model's name for the output.
  const std::string& name() const;
  /// The call that made it (null when undefined).
  const std::shared_ptr<const LayerCall>& call() const { return call_; }
  /// Which of the call's outputs this is (0 but for nested models).
  int index() const { return index_; }

 private:
  std::shared_ptr<const LayerCall> call_;
  int index_ = 0;
};

/// A model input (keras.Input): `shape` without the batch, dtype float32 or
/// int32 (token ids for an Embedding). Named "input_layer", "input_layer_1",
/// ... unless `name` is given. Throws ShapeError for an empty or
/// non-positive shape, TypeError for another dtype.
SymbolicTensor Input(const Shape& shape, DType dtype = DType::Float32, const std::string& name = "");

/// Activations by their Keras names.
enum class Activation {
  Linear, Relu, Sigmoid, Tanh, Softmax, Gelu, Silu, Elu, LeakyRelu, Softplus, GeluTanh, Relu6, HardSigmoid, HardSwish
};
/// "linear" (or ""), "relu", "sigmoid", "tanh", "softmax", "gelu" (exact
/// erf form), "gelu_tanh" (its tanh approximation: Keras' gelu(approximate=True),
/// PyTorch's gelu(approximate="tanh")), "silu" (or "swish"), "elu" (alpha 1), "leaky_relu" (slope 0.2,
/// Keras 3's default), "softplus", "relu6" (min(max(x, 0), 6)), "hard_sigmoid"
/// (Keras 3's and PyTorch's relu6(x + 3) / 6), "hard_swish" (or "hard_silu":
/// x * hard_sigmoid(x), MobileNetV3's); throws ValueError for any other
/// name, listing these.
Activation activation_from_name(const std::string& name);
/// The Keras name of `a` ("relu"; "linear" for Linear), as
/// activation_from_name reads it back.
const char* activation_name(Activation a);
/// Applies `a` to x (softmax along the last axis), as Keras' activation of
/// that name. Throws ValueError for a value that is none of the enumerators
/// (made by a cast).
Value apply_activation(Builder& b, Activation a, Value x);

/// A layer's configuration (Keras' get_config): the arguments that rebuild
/// it, by Keras' argument names ("units", "activation", "kernel_size", ...).
/// io::save_model stores it (with the layer's type, name and trainable flag)
/// and io::load_model hands it to the type's factory (register_layer).
class LayerConfig {
 public:
  /// One argument's value: a flag, an integer, a number, a string or a list
  /// of integers (a shape, kernel sizes).
  using Value = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;
  /// An empty configuration of no named type.
  LayerConfig() = default;
  /// `type` names the layer type in error messages.
  explicit LayerConfig(std::string type) : type_(std::move(type)) {}
  /// Sets `key` (replacing an earlier value).
  LayerConfig& set(const std::string& key, Value value);
  /// Whether `key` is set.
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  /// Typed access; each throws ValueError naming the layer type, the key and
  /// what it holds when the key is missing or of another kind. get_double
  /// also reads an integer; get_int refuses a fractional double.
  ///@{
  bool get_bool(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;
  ///@}
  /// Every key and its value, sorted by key.
  const std::map<std::string, Value>& values() const { return values_; }
  /// The layer type the configuration is for (the constructor's).
  const std::string& type() const { return type_; }

 private:
  std::string type_;
  std::map<std::string, Value> values_;
};

/// Resets the automatic layer names, so the next Dense is "dense" again (as
/// keras.backend.clear_session()).
void clear_session();

/// A layer (keras.layers.Layer). Hold layers by std::shared_ptr to share
/// them: calling the same object twice shares its weights.
class Layer : public std::enable_shared_from_this<Layer> {
 public:
  virtual ~Layer() = default;
  /// The layer's name: Keras' automatic one ("dense", "dense_1", ...) unless set.
  const std::string& name() const { return name_; }
  /// Renames the layer; do it before calling the layer, since a call records
  /// the name the layer had then (LayerCall::name).
  void set_name(std::string name) { name_ = std::move(name); }
  /// Keras' class name ("Dense").
  virtual const char* type() const = 0;
  /// Creates the weights for `input_shape` (no batch dimension) and returns
  /// the output shape. Throws ShapeError when the input does not fit the layer.
  virtual Shape build(const Shape& input_shape) = 0;
  /// The layer applied to x {batch, input_shape...}. Called after build.
  virtual Value call(Builder& b, Value x, const CallOptions& options) = 0;
  /// For layers of several inputs (merge layers): builds for the inputs'
  /// shapes (no batch) and returns the output shape. The default takes
  /// exactly one input (ValueError naming the layer otherwise) and calls
  /// build_once.
  virtual Shape build_inputs(std::span<const Shape> input_shapes);
  /// The layer applied to its inputs; the default calls call() on the one input.
  virtual Value call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options);
  /// Every output of the layer applied to its inputs: {call_inputs(...)} but
  /// for nested models with several outputs.
  virtual std::vector<Value> call_outputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) {
    return {call_inputs(b, inputs, options)};
  }
  /// True for layers that read int32 token ids (Embedding); every other
  /// layer takes float32 and refuses an int32 symbolic tensor.
  virtual bool takes_token_ids() const { return false; }
  /// Whether a call on an input of `input_shape` (without the batch) reads
  /// it as token ids: takes_token_ids() for every call, but a layer called
  /// both on ids and on features (ReversibleEmbedding) says per call.
  virtual bool reads_token_ids(const Shape& input_shape) const {
    (void)input_shape;
    return takes_token_ids();
  }
  /// Keras' masking: an Embedding(mask_zero = true) marks padding (token id
  /// 0) with a mask {batch, steps} that travels with its output. Whether
  /// this layer takes inputs that carry one (Keras' supports_masking): layers
  /// that act on each step alone (Dense, Dropout, LayerNormalization,
  /// activations, merges) pass it on; attention layers read it
  /// (CallOptions::masks). The default, false, makes calling the layer on a
  /// masked tensor a ValueError, rather than reading padding as data.
  virtual bool supports_masking() const { return false; }
  /// Whether the output carries a mask, given which inputs do (one flag per
  /// input). The default: supports_masking() and some input masked.
  virtual bool produces_mask(const std::vector<bool>& input_masked) const;
  /// The output's mask {batch, steps} (float32 0/1) when produces_mask:
  /// from the inputs and their masks (invalid Values for inputs without
  /// one). The default gives the first input's mask (Keras' compute_mask).
  virtual Value compute_mask(Builder& b, std::span<const Value> inputs, std::span<const Value> masks);

  /// Calls the layer on symbolic tensors (Keras' functional API): builds it
  /// for their shapes on first use and records the call. A layer held by a
  /// std::shared_ptr is recorded itself; one that is not (a temporary:
  /// Dense(64)(x), or a local variable) is copied into the graph on its first
  /// call, with weights of its own, and later calls of the same object reuse
  /// that copy. Calling the same object again shares its weights. Throws ShapeError naming the layer,
  /// the shape that came and the one it needs; ValueError for a layer of one
  /// input called on several (or an undefined tensor); TypeError for int32
  /// tensors into a layer that is not an Embedding.
  ///@{
  SymbolicTensor operator()(const SymbolicTensor& x);
  SymbolicTensor operator()(const std::vector<SymbolicTensor>& inputs);
  ///@}
  /// Its weights, in declaration order (Keras order), named
  /// "<layer>/<weight>", trainable where declared so and the layer is
  /// trainable. The default lists what add_weight declared; a layer that
  /// keeps weights elsewhere (a nested model) overrides it.
  virtual std::vector<Weight> weights() const;
  /// The tensors that hold its weights (the ones weights() lists), so that
  /// clone_layer can deep-copy them and Model::compile can place them on the
  /// model's device (as Keras builds variables under the distribution
  /// strategy's device scope). The default gives add_weight's tensors; a
  /// user's layer holding weights of its own elsewhere overrides it, or they
  /// stay on the CPU and compiling for another device fails at the first
  /// run, naming the weight.
  virtual std::vector<Tensor*> weight_slots();
  /// Checks a model input this layer reads directly (the first layer): token
  /// ids for Embedding. Throws ValueError for an id that is not a whole
  /// number, IndexError for one outside the vocabulary, naming the value and
  /// where it is (row and step).
  virtual void validate_input(const Tensor& x) const { (void)x; }
  /// The activation the layer ends with ("relu", "softmax", "linear"), or
  /// null for layers that are not activations (pooling, normalization, ...).
  virtual const char* output_activation() const { return nullptr; }
  /// An independent copy: same configuration and name, its own copy of the
  /// weights (Trainer, snapshots).
  virtual std::shared_ptr<Layer> clone() const = 0;
  /// The arguments that rebuild this layer (Keras' get_config), without its
  /// name and trainable flag (the saver stores those). The default is empty:
  /// right for a user's layer whose constructor takes no arguments; a user's
  /// layer with arguments overrides it, and its factory (register_layer)
  /// reads them back.
  virtual LayerConfig config() const { return LayerConfig(type()); }
  /// Frozen layers (false) are neither updated nor decayed. Like Keras, a
  /// change takes effect at the next compile().
  bool trainable = true;

  /// build() on first use, returning the output shape. A layer already built
  /// (added to a second model: a shared layer, as in Keras) keeps its
  /// weights. Throws ShapeError when it was built for another input shape.
  Shape build_once(const Shape& input_shape);
  /// Whether build() has run.
  bool built() const { return built_; }

 protected:
  /// Names the layer `name_prefix`, then `name_prefix`_1, ... (Keras'
  /// automatic names; clear_session restarts them).
  explicit Layer(const char* name_prefix);
  /// Copies configuration, name and weights' handles (clone_layer then
  /// deep-copies the weights), never the graph copy of the original.
  Layer(const Layer& other)
      : std::enable_shared_from_this<Layer>(),
        trainable(other.trainable),
        name_(other.name_),
        built_(other.built_),
        built_input_(other.built_input_),
        built_output_(other.built_output_),
        declared_(other.declared_) {}

  /// Declares a weight (Keras' Layer.add_weight), normally in build(): its
  /// value is drawn now by spec.initializer, so weights follow the global
  /// seed in declaration order, and weights(), weight_slots() and
  /// bind_weight all read this one declaration. Declaring a name again (a
  /// build repeated) replaces that weight's value in place, keeping its
  /// position. Throws ValueError for an empty name, a name with '/', or a
  /// missing initializer; ValueError naming the layer and weight when the
  /// initializer returns another shape or dtype than declared.
  WeightId add_weight(WeightSpec spec);
  /// The weight's tensor. Throws StateError when `id` is not declared (the
  /// layer was not built).
  ///@{
  Tensor& weight(WeightId id);
  const Tensor& weight(WeightId id) const;
  ///@}
  /// The weight bound into `b` under its listed name ("dense/kernel"), with
  /// a gradient only where declared trainable and the layer is trainable.
  /// Throws StateError naming the layer when it has not been built.
  Value bind_weight(Builder& b, WeightId id) const;

 private:
  struct Declared {
    WeightSpec spec;
    Tensor value;
  };
  const Declared& declared(WeightId id) const;

  std::string name_;
  bool built_ = false;
  Shape built_input_, built_output_;
  std::shared_ptr<Layer> graph_copy_;  // a layer not held by a shared_ptr: its copy in the graph
  std::vector<Declared> declared_;     // add_weight's weights, in declaration order
};

/// Densely connected layer (keras.layers.Dense): y = activation(x W + b).
/// x: {batch, in}, or {batch, ..., in} (a sequence: applied to the last
/// axis, as Keras does) -> {batch, ..., units}; kernel W: {in, units} Glorot
/// uniform; bias b: {units} zeros.
class Dense : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError when units < 1 or the activation is unknown.
  explicit Dense(int64_t units, const std::string& activation = "linear", bool use_bias = true);
  const char* type() const override { return "Dense"; }
  /// Acts on each step alone: passes a mask on.
  bool supports_masking() const override { return true; }
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  const char* output_activation() const override { return activation_name(activation_); }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  /// The output width.
  int64_t units() const { return units_; }

 private:
  int64_t units_;
  Activation activation_;
  bool use_bias_;
  WeightId kernel_, bias_;
};

/// Flattens every dimension but the batch (keras.layers.Flatten):
/// {batch, d1, d2, ...} -> {batch, d1*d2*...}. A view, no copy.
class Flatten : public Layer {
 public:
  Flatten() : Layer("flatten") {}
  const char* type() const override { return "Flatten"; }
  Shape build(const Shape& input_shape) override { return Shape{input_shape.numel()}; }
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
};

/// An activation as a layer (keras.layers.Activation).
class ActivationLayer : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError for an unknown name (see activation_from_name).
  explicit ActivationLayer(const std::string& activation);
  const char* type() const override { return "Activation"; }
  /// Acts on each step alone: passes a mask on.
  bool supports_masking() const override { return true; }
  Shape build(const Shape& input_shape) override { return input_shape; }
  Value call(Builder& b, Value x, const CallOptions& options) override;
  const char* output_activation() const override { return activation_name(activation_); }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  Activation activation_;
};

/// Inverted dropout (keras.layers.Dropout): in training, zeroes each element
/// with probability `rate` and scales the rest by 1/(1 - rate); identity at
/// inference. The mask is redrawn every step: a function of the layer's seed
/// and the model's training step alone (the steps since its first compile,
/// counted on across a recompile and a Trainer's copy, kept in checkpoints),
/// so it does not depend on what else is built, compiled or trained in the
/// process.
class Dropout : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError unless 0 <= rate < 1.
  /// `seed` fixes the mask stream (Keras' seed argument): the same seed
  /// gives the same masks at the same step, whatever the global seed;
  /// without one it is drawn from the global generator when the layer is
  /// made (Keras' rule).
  explicit Dropout(float rate, std::optional<uint64_t> seed = std::nullopt);
  const char* type() const override { return "Dropout"; }
  /// Acts on each step alone: passes a mask on.
  bool supports_masking() const override { return true; }
  Shape build(const Shape& input_shape) override { return input_shape; }
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  /// The probability of dropping an element.
  float rate() const { return rate_; }

 private:
  float rate_;
  uint64_t seed_;
};

/// Builds a layer of one type from its configuration (io::load_model).
using LayerFactory = std::function<std::shared_ptr<Layer>(const LayerConfig& config)>;
/// Registers the factory of a user's layer type (Keras'
/// register_keras_serializable), so io::load_model can rebuild it: `type` is
/// what the layer's type() returns. Registering a type again replaces its
/// factory. Throws ValueError for an empty type or factory, or a built-in
/// type's name ("Dense", ...).
void register_layer(const std::string& type, LayerFactory factory);
/// A new layer of `type` from `config` (not built; name and trainable left
/// to the caller): the built-in layers and every registered type. Throws
/// ValueError naming an unknown type (and saying to call register_layer), and
/// what the factory throws for a bad configuration.
std::shared_ptr<Layer> layer_from_config(const std::string& type, const LayerConfig& config);

/// One call of a layer in a functional graph (Keras' Node): the layer, the
/// symbolic tensors it was called on, and its output's shape and dtype. An
/// Input is a call without a layer.
struct LayerCall {
  std::shared_ptr<Layer> layer;        ///< null for an Input
  std::vector<SymbolicTensor> inputs;  ///< what the layer was called on, in order
  Shape shape;                         ///< output, without the batch
  DType dtype = DType::Float32;        ///< the output's dtype
  std::string name;                    ///< the Input's name, or the layer's name when called
  /// A nested model's call with several outputs: the shapes of outputs 1 on
  /// (output 0's is `shape`), and every output's name ("model/output").
  ///@{
  std::vector<Shape> more_shapes;
  std::vector<std::string> output_names;
  ///@}
  /// Whether the output carries a mask (Layer::produces_mask).
  bool masked = false;
};

}  // namespace tensorgrad::nn
