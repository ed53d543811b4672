#pragma once
// Saving and loading models, weights and training checkpoints as GGUF files
// (Keras' model.save / keras.saving.load_model, save_weights / load_weights,
// and exact resume of a Trainer).
//
// Every file carries general.architecture = "tensorgrad",
// tensorgrad.file_kind ("model", "weights", "checkpoint" or "state_dict") and
// tensorgrad.format_version (1). Weights are stored under their Keras names
// ("dense/kernel"); optimizer state under "optimizer/<weight>/<slot>" (slots
// m, v, momentum, acc) with "optimizer/iterations" (I64) and
// "optimizer/hyper". A name longer than GGUF's 63 bytes (a long layer name's
// optimizer slots) is stored under a short name with the full name in the
// file's tensorgrad.long_names.* keys (io::GGUFWriter::add_tensor), so any
// layer name saves. Every write is crash-safe (io::GGUFWriter::write): the
// target holds either its old contents or the whole new file. The save
// functions return the write's WriteStats (bytes, seconds writing and
// seconds in fsync).
#include <string>
#include <vector>

#include "tensorgrad/io/gguf.h"
#include "tensorgrad/nn/callback.h"
#include "tensorgrad/nn/model.h"
#include "tensorgrad/nn/sequential.h"
#include "tensorgrad/nn/trainer.h"

namespace tensorgrad::io {

/// Saves the whole model (Keras' model.save): the architecture (every
/// layer's type, name, trainable flag and Layer::config(), the calls between
/// them, inputs and outputs), the compile settings when compiled (optimizer
/// with its schedule, losses by name, loss weights, metrics), every weight
/// (batch-norm moving statistics included) and, with include_optimizer, the
/// optimizer state: moments, step counter, learning rate, the model's random
/// stream and dropout counter, so the loaded model trains on where it
/// stopped (Keras' include_optimizer). `weight_type` F16 or BF16 halves the
/// file (weights rounded to nearest even; loading converts back to float32);
/// optimizer state is always F32. Throws StateError for a freed model;
/// ValueError for two weights of one name or a weight_type other than F32,
/// F16 or BF16; IOError when the file cannot be written (what was at `path`
/// is kept).
WriteStats save_model(const nn::Model& model, const std::string& path, bool include_optimizer = true,
                TensorType weight_type = TensorType::F32);

/// Rebuilds a model saved by save_model with no user code for built-in
/// layers (a user's layer type needs nn::register_layer first), compiled as
/// it was saved, with its weights and (if saved) optimizer state. A custom
/// loss is found by the name it was registered under (register_loss); an
/// unregistered one loads the model uncompiled, with a warning naming it.
/// Draws nothing from any random stream. A Sequential comes back as a Model
/// with the same graph (load_sequential keeps the class). Throws IOError for
/// a missing or unreadable file; FormatError for a malformed one or a file of
/// another kind ("weights", "checkpoint"); ValueError for an unknown layer
/// type (naming it).
nn::Model load_model(const std::string& path);
/// The same for a file saved from a Sequential, returned as one; throws
/// ValueError when the file holds a functional model.
nn::Sequential load_sequential(const std::string& path);

/// Registers a custom loss under `name` (the name it was compiled with:
/// Loss(name, function)), so load_model can compile a model that uses it.
/// Throws ValueError for an empty name or function, or a built-in loss name.
void register_loss(const std::string& name, LossFunction function);

/// Saves only the weights by name (Keras' save_weights): every weight of
/// the model, batch-norm statistics included; `weight_type` as save_model.
WriteStats save_weights(const nn::Model& model, const std::string& path, TensorType weight_type = TensorType::F32);
/// Loads weights by name into `model` (Keras' load_weights). Every name of
/// the model must be in the file with the same shape, and every name in the
/// file in the model; otherwise nothing is changed and ValueError lists the
/// names missing in the file, the names not in the model, and each shape
/// mismatch as "name: model {a, b} vs file {c, d}". With skip_mismatch
/// (Keras' argument), the weights that match are loaded and the rest are left
/// as they are, with a warning listing them. Reads a "model" or "checkpoint"
/// file's weights too. Throws IOError and FormatError as load_model,
/// StateError for a freed model.
void load_weights(nn::Model& model, const std::string& path, bool skip_mismatch = false);

/// Saves everything a Trainer needs to continue exactly (the model's one
/// training state): weights, optimizer state by weight name (moments, 64-bit
/// step counter, learning rate, gradient accumulators of an unfinished
/// accumulation window with its micro-step count), the model's random stream
/// and dropout counter, and the trainer's step counter; and the state of
/// each of `states`, what the loop around the trainer keeps (a replay
/// buffer: rl::ReplayBuffer), stored as callbacks' states are (see the
/// model's save_checkpoint below). At the same thread count, N steps, save,
/// load (in another process too), M steps give bit for bit what N + M steps
/// give. Throws StateError for a freed trainer, ValueError for a null state
/// or one whose type() is null or empty, IOError when the file cannot be
/// written (what was at `path` is kept).
WriteStats save_checkpoint(const nn::Trainer& trainer, const std::string& path,
                           const std::vector<nn::Stateful*>& states = {});
/// Restores a checkpoint into a trainer made from a model of the same
/// architecture and optimizer, and the saved states into `states`, which
/// must be of the same types (Stateful::type()) in the same order as those
/// saved. Throws ValueError listing missing, unexpected
/// and mismatched weights (as load_weights), or naming the optimizer of the
/// file and of the trainer when they differ, or naming the first layer whose
/// configuration differs (build the model with the same code after the same
/// manual_seed: a Dropout's seed is drawn when it is made), or when the file
/// stopped inside an accumulation window and this trainer's period
/// (nbatch_logical / batch_size) differs from the saved one, or listing the
/// saved and the given states' types when they differ, or a state an object
/// refuses (its set_state's error); FormatError for
/// a file that is not a checkpoint; IOError as load_model. Nothing changes on
/// error.
void load_checkpoint(nn::Trainer& trainer, const std::string& path, const std::vector<nn::Stateful*>& states = {});

/// Saves a compiled model's whole training state as a checkpoint (the file
/// kind of the Trainer's): weights, optimizer state, the model's random
/// stream (fit's shuffles) and dropout counter, as save_checkpoint(Trainer);
/// with "tensorgrad.fit.initial_epoch" = `initial_epoch`, the epoch a
/// resumed fit starts at (the number of epochs completed), and the state of
/// each of `callbacks` (Callback::get_state): callback i's numbers under
/// "tensorgrad.callbacks.{i}.{Type}.value.{key}", its tensors as
/// "callbacks/{i}/{j}" (named by position, as files have always been)
/// with their names in "tensorgrad.callbacks.{i}.{Type}.tensor_names", and
/// the types in order in "tensorgrad.callbacks.types"; {Type} is the
/// callback's Callback::type(). io::BackupAndRestore
/// writes its backups with it. The architecture (with every layer's
/// configuration, dropout seeds included) is stored too: load_checkpoint
/// refuses a model that differs. Throws StateError for a freed or uncompiled
/// model; ValueError for a negative initial_epoch, a null callback or one
/// whose type() is null or empty; IOError when the file cannot be written
/// (what was at `path` is kept).
WriteStats save_checkpoint(const nn::Model& model, const std::string& path, int initial_epoch = 0,
                     const std::vector<nn::Callback*>& callbacks = {});
/// Restores a checkpoint into a model compiled with the same architecture
/// and optimizer, and the callbacks' states into `callbacks`, which must be
/// callbacks of the same types (Callback::type()) in the same order as those
/// saved (none for a Trainer's checkpoint); a file of an earlier tensorgrad,
/// which named each callback by its class name, loads into callbacks of
/// those classes. Call it when the callbacks' on_train_begin has run
/// (it resets their state). Returns the saved initial_epoch (0 for a
/// Trainer's checkpoint). Throws StateError for a freed or uncompiled model;
/// ValueError for mismatched weights (as load_weights), another optimizer,
/// other callbacks (listing both), or a state a callback refuses (its
/// set_state's error); FormatError for a file that is not a checkpoint;
/// IOError as load_model. Nothing changes on error.
int load_checkpoint(nn::Model& model, const std::string& path, const std::vector<nn::Callback*>& callbacks = {});

}  // namespace tensorgrad::io
