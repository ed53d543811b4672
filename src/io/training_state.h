#pragma once
// The pieces every tensorgrad file is made of (io/saving.h): the header keys,
// weights by name and their checks, and a model's training state (optimizer
// state by weight name, random streams: nn::TrainingState, as Model and
// Trainer give and take it). Shared by save_model, the checkpoints and the
// callbacks that save. Private to the library.
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/io/gguf.h"
#include "tensorgrad/nn/callback.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::io::detail {

/// general.architecture, tensorgrad.file_kind = kind, tensorgrad.format_version.
void write_header(GGUFWriter& w, const char* kind);
/// Checks those keys; returns the file kind, one of `kinds`. Throws
/// FormatError for another architecture, a newer format version ("unsupported
/// version N") or another kind, naming what `call` reads.
std::string check_header(const GGUFFile& f, std::initializer_list<const char*> kinds, const char* call);

/// Every weight of the model, stored as `type` (F32, F16 or BF16; ValueError otherwise).
void add_weights(GGUFWriter& w, const nn::Model& model, TensorType type);

/// The model's weights against a file's tensors (optimizer tensors aside).
struct WeightMatch {
  std::vector<std::pair<nn::Weight, const TensorInfo*>> matched;
  std::vector<std::string> missing_in_file, not_in_model, shape_mismatches;
  bool complete() const { return missing_in_file.empty() && not_in_model.empty() && shape_mismatches.empty(); }
  /// One line per non-empty list ("\n  missing in the file: a, b").
  std::string describe() const;
};
WeightMatch match_weights(const GGUFFile& f, const std::vector<nn::Weight>& weights);
/// ValueError listing every mismatch unless complete.
void check_weights_match(const GGUFFile& f, const WeightMatch& m, const char* call);
/// Copies the matched weights' values from the file into the model's tensors.
void read_matched(const GGUFFile& f, const WeightMatch& m);

/// The 313 words of a Mersenne twister's state (its textual form), and back
/// (FormatError naming `path` when the words are not such a state).
std::vector<uint64_t> stream_state(const std::mt19937_64& rng);
void set_stream_state(std::mt19937_64& rng, const std::vector<uint64_t>& words, const std::string& path);

/// A training state's random stream, and if it has one its optimizer state:
/// hyper-parameters, step counter, every weight's slots (as
/// "optimizer/<weight>/<slot>"), the accumulation window's position and the
/// dropout counter.
void add_optimizer_state(GGUFWriter& w, const nn::TrainingState& state);
bool has_optimizer_state(const GGUFFile& f);
/// What add_optimizer_state wrote (without a Trainer's steps and period).
/// FormatError naming the file for a random stream that is no Mersenne
/// twister's or a missing optimizer tensor.
nn::TrainingState read_training_state(const GGUFFile& f);
/// Runs `set` (a set_training_state), its ValueErrors prefixed with `call`
/// and the file's path, so that they say which file did not fit.
template <class F>
void with_file_context(const GGUFFile& f, const char* call, F&& set) {
  try {
    set();
  } catch (const ValueError& e) {
    throw ValueError(std::string(call) + ": " + f.path() + ": " + e.what());
  }
}

/// What every checkpoint holds (a Trainer's or a fit's): the header of kind
/// "checkpoint", the architecture and compile configuration, the weights as
/// F32 and the training state taken from `model` (or from the Trainer that
/// trains it). StateError for a model not compiled.
void add_training_state(GGUFWriter& w, const nn::Model& model, const nn::TrainingState& state, const char* call);
/// Checks that a checkpoint was saved with the optimizer `model` was compiled
/// with: ValueError naming both otherwise; FormatError for a compile
/// configuration that is not JSON.
void check_checkpoint_optimizer(const GGUFFile& f, const nn::Model& model, const char* call);

/// A callback's or other state's type() ("EarlyStopping", "ReplayBuffer"),
/// as the checkpoint keys name it. ValueError when type() returns null or an
/// empty name.
std::string callback_type_name(const nn::Stateful& object);
/// The states of `callbacks` (callbacks, or the states saved beside a
/// Trainer's checkpoint; nulls not allowed), entry i's under
/// "tensorgrad.callbacks.<i>.<Type>.value.<key>" (F64) and its tensors as
/// "callbacks/<i>/<j>" with their names in "...<Type>.tensor_names";
/// "tensorgrad.callbacks.types" lists the types in order.
void add_callback_states(GGUFWriter& w, const std::vector<nn::Stateful*>& callbacks);
/// The states add_callback_states wrote, one per callback of `callbacks`,
/// which must be the same number of callbacks of the same types in the same
/// order (ValueError listing both lists, called `what`, otherwise). A file written before
/// Callback::type() names callbacks by their class names without namespaces
/// (GCC's and Clang's demangled typeid): such a name matches a callback of
/// that class too. A file without callback states matches an empty list only.
std::vector<nn::CallbackState> read_callback_states(const GGUFFile& f, const std::vector<nn::Stateful*>& callbacks,
                                                    const char* call, const char* what);

}  // namespace tensorgrad::io::detail
