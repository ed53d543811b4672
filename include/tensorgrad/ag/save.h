#pragma once
// Saving and loading eager modules and state dicts as GGUF files (PyTorch's
// torch.save of a state_dict and load_state_dict).
//
// As with PyTorch's state dicts, the live module is not serialised: the file
// holds the state dict (every parameter and buffer by its dotted name,
// "0.weight", "bn.running_mean") and, for a module, a description of its
// architecture from which built-in modules are rebuilt: each module's type,
// its config() values and its named children, recursively, as JSON. A module
// of a user's type is rebuilt by a factory given to load or by one registered
// with nn::register_module_type.
//
// File layout (GGUF v3, written crash-safely by io::GGUFWriter::write, so
// the target holds either its old contents or the whole new file):
//   general.architecture        = "tensorgrad"
//   tensorgrad.file_kind        = the kind (below)
//   tensorgrad.format_version   = 1 (UINT32)
//   tensorgrad.version          = the writing library's version() ("0.1.0")
//   tensorgrad.created          = when the file was written, UTC, ISO 8601
//                                 to the second ("2025-03-01T12:34:56Z")
//   tensorgrad.module_config    = the architecture as JSON (module files only):
//       {"type": "Sequential", "config": {...}, "children": [{"name": "0", "module": {...}}, ...]}
//   tensorgrad.state_dict_index = JSON [{"name", "dtype", "shape"}, ...] in
//       state-dict order: the entries and their exact shapes (GGUF has no
//       rank-0 or rank > 4 tensors and no empty ones; those are stored
//       flattened, or not at all when empty, and rebuilt from the index)
//   one tensor per non-empty entry, named by its key, stored as F32, I32 or
//   I64 as the tensor's dtype is. A key longer than GGUF's 63-byte tensor
//   names is stored under a short name and listed in full in
//   tensorgrad.long_names.* (io::GGUFWriter::add_tensor); keys of any
//   length save and load.
// GGUF names no key for the writing software or the time of writing (its
// general.version is the model's own version), so the two provenance keys
// are tensorgrad's. Loading ignores them: files without them (written before
// they were added) load as well. tensorgrad-inspect shows them.
//
// File kinds (tensorgrad.file_kind), next to the "model",
// "weights" and "checkpoint" (io/saving.h), whose layouts differ:
//   "state_dict"      a module's state dict, with or without its architecture
//                     (ag::save of a Module, or of Module::state_dict())
//   "optimizer_state" an optimizer's state_dict() (ag::optim)
//   "scheduler_state" a learning-rate scheduler's state_dict()
// Any other non-empty kind may be used for a user's own state (read back by
// asking for the same kind).
#include <functional>
#include <memory>
#include <string>

#include "tensorgrad/ag/nn/module.h"
#include "tensorgrad/io/gguf.h"

namespace tensorgrad::ag {

/// The documented file kinds (see above).
///@{
inline constexpr const char* kStateDictKind = "state_dict";
inline constexpr const char* kOptimizerStateKind = "optimizer_state";
inline constexpr const char* kSchedulerStateKind = "scheduler_state";
///@}

/// Saves `module`'s architecture and state dict (every parameter and buffer;
/// torch.save(model.state_dict())) to `path` as a "state_dict" file. The
/// training flag is not saved (load returns the module in eval mode). Throws
/// IOError when the file cannot be written (what was at `path` is kept).
io::WriteStats save(const nn::Module& module, const std::string& path);

/// Saves a state dict alone (no architecture) as a file of `kind`: an
/// optimizer's or scheduler's state_dict() ("optimizer_state",
/// "scheduler_state"), or a module's ("state_dict"). Throws ValueError for an
/// empty kind or one of io/saving.h's kinds ("model", "weights",
/// "checkpoint") or an undefined tensor; IOError as above.
io::WriteStats save(const nn::StateDict& dict, const std::string& path, const std::string& kind = kStateDictKind);

/// Builds a fresh module of the saved architecture (a factory given to load).
using ModuleBuilder = std::function<std::shared_ptr<nn::Module>()>;

/// Loads a module saved by save(const Module&, ...) (torch.load followed by
/// load_state_dict): built by `factory()` when one is given (it takes
/// precedence over the stored architecture), else rebuilt from the stored
/// architecture through nn::module_from_config (built-in types need no
/// factory; a Sequential gets its children back in order). Then the file's
/// state dict is loaded strictly (Module::load_state_dict) and the module is
/// returned in eval mode. Building the module does not advance
/// ag::default_generator() (its state is restored afterwards), so loading
/// draws nothing from the user's stream.
///
/// Throws IOError for a missing or unreadable file; FormatError for a file
/// that is not GGUF or not tensorgrad's ("not a tensorgrad state dict"), a
/// file of another kind (naming it), a format version above 1 ("unsupported
/// version N (this build reads 1)"), a truncated or malformed file (the
/// GGUF reader's message, naming what and where); ValueError for an unknown
/// module type (saying to pass a factory or register the type), a file saved
/// without an architecture and no factory, a factory returning null, or a
/// state dict that does not fit the module (the strict mismatch list:
/// missing keys, unexpected keys, "name: model {a, b} vs file {c, d}"),
/// in which case nothing is loaded; TypeError for a dtype mismatch.
std::shared_ptr<nn::Module> load(const std::string& path, const ModuleBuilder& factory = {});

/// The state dict stored in a file of `kind` (torch.load of a state dict):
/// new tensors (not requiring grad), in the saved order with the saved
/// shapes and dtypes. A "state_dict" file written by either save() is read.
/// Throws as load() for the file's problems (IOError, FormatError).
nn::StateDict load_state_dict(const std::string& path, const std::string& kind = kStateDictKind);

/// load(path, factory), with the module's parameters and buffers placed on
/// `device` (Module::to; PyTorch's `map_location`). Throws as load(), and
/// StateError when the device is not available (before the file is read).
std::shared_ptr<nn::Module> load(const std::string& path, Device device, const ModuleBuilder& factory = {});
/// load_state_dict(path, kind) with every tensor on `device`. Throws as
/// load_state_dict(), and StateError when the device is not available.
nn::StateDict load_state_dict(const std::string& path, Device device, const std::string& kind = kStateDictKind);

}  // namespace tensorgrad::ag
