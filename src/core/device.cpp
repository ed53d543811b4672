#include "tensorgrad/core/device.h"

#include <ostream>

#include "tensorgrad/core/error.h"

namespace tensorgrad {

namespace {

// What a kind looks like, for messages.
std::string kind_rule() {
  return "a kind of lowercase letters, digits and '_' starting with a letter, at most " +
         std::to_string(Device::kMaxKindLength) + " characters";
}

bool valid_kind(std::string_view kind) {
  if (kind.empty() || kind.size() > Device::kMaxKindLength || kind[0] < 'a' || kind[0] > 'z') return false;
  for (char c : kind)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// "0" or [1-9][0-9]* below 2^31, else -1.
int parse_index(std::string_view digits) {
  if (digits.empty() || digits.size() > 10 || (digits.size() > 1 && digits[0] == '0')) return -1;
  long long value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value > 0x7fffffffLL ? -1 : int(value);
}

[[noreturn]] void refuse(std::string_view spec) {
  throw ValueError("Device: expected a device such as \"cpu\", \"cuda:0\" or \"vulkan:1\" (" + kind_rule() +
                   ", then optionally ':' and an index without a sign or leading zeros); got \"" + std::string(spec) +
                   "\". tensorgrad::devices() lists the devices of this machine");
}

}  // namespace

Device::Device(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const int index = colon == std::string_view::npos ? 0 : parse_index(spec.substr(colon + 1));
  if (!valid_kind(kind) || index < 0) refuse(spec);
  *this = Device(kind, index, Unchecked{});
}

Device::Device(std::string_view kind, int index) {
  if (!valid_kind(kind))
    throw ValueError("Device: expected " + kind_rule() + " (\"cpu\", \"cuda\", \"vulkan\"); got \"" + std::string(kind) +
                     "\"");
  if (index < 0)
    throw ValueError("Device: expected an index >= 0; got " + std::to_string(index) + " for kind \"" +
                     std::string(kind) + "\"");
  *this = Device(kind, index, Unchecked{});
}

std::string Device::str() const {
  if (*this == CPU) return "cpu";
  return kind() + ":" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace tensorgrad
