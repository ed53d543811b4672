#pragma once
// Devices as values: a kind and an index, written as PyTorch writes a
// torch.device ("cpu", "cuda:0", "vulkan:1").
#include <array>
#include <cstddef>
#include <iosfwd>
#include <string>
#include <string_view>

namespace tensorgrad {

/// Where a tensor's memory lives and where its kernels run (PyTorch's
/// torch.device): a device kind ("cpu", "cuda", "vulkan", or the kind a
/// custom backend registers) and an index among the devices of that kind.
/// The CPU always exists and is the default everywhere; another device is
/// used only when named. Which devices exist is the backend registry's to
/// say (backend/registry.h: devices()). A small value: copy it, compare it.
class Device {
 public:
  /// The longest kind, in characters.
  static constexpr size_t kMaxKindLength = 15;

  /// The CPU, as PyTorch's spelling Device::CPU keeps working.
  static const Device CPU;
  /// The first CUDA device ("cuda:0").
  static const Device CUDA;

  /// The CPU.
  constexpr Device() : Device("cpu", 0, Unchecked{}) {}
  /// Parses PyTorch's string form: a kind ("cpu", "cuda", "vulkan"; lowercase
  /// letters, digits and '_', starting with a letter, at most kMaxKindLength
  /// characters), then optionally ':' and an index without a sign or leading
  /// zeros ("vulkan:1"); a kind alone means index 0. Whether such a device
  /// exists is not checked here (backend() and allocation check it). Throws
  /// ValueError for any other string, saying what was expected and what came.
  explicit Device(std::string_view spec);
  /// The device `index` of `kind` (kind as above, index >= 0). Throws
  /// ValueError for a malformed kind or a negative index.
  Device(std::string_view kind, int index);

  /// The kind: "cpu", "cuda", "vulkan", ...
  std::string kind() const { return std::string(kind_.data()); }
  /// The index among the devices of its kind (0 for the CPU).
  int index() const { return index_; }
  /// PyTorch's string form, which Device(std::string_view) parses back to an
  /// equal device: "cpu" for the CPU, "kind:index" for every other device
  /// ("cuda:0", "vulkan:1").
  std::string str() const;

  /// The same kind and index.
  friend constexpr bool operator==(const Device&, const Device&) = default;

 private:
  struct Unchecked {};
  constexpr Device(std::string_view kind, int index, Unchecked) : index_(index) {
    for (size_t i = 0; i < kind.size() && i < kMaxKindLength; ++i) kind_[i] = kind[i];
  }

  std::array<char, kMaxKindLength + 1> kind_{};  // NUL-terminated
  int index_ = 0;
};

inline constexpr Device Device::CPU{"cpu", 0, Device::Unchecked{}};
inline constexpr Device Device::CUDA{"cuda", 0, Device::Unchecked{}};

/// d.str(): "cpu", "cuda:0", "vulkan:1".
inline std::string device_name(Device d) { return d.str(); }
/// Writes d.str() (for messages and test output).
std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace tensorgrad
