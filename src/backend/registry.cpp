// The backend registry (backend/registry.h): device kinds, the devices each
// backend found (asked once per kind), the backend of a device, and every
// kind's storage allocator handed down to core (core/device_allocators.h).
#include "tensorgrad/backend/registry.h"

#include <algorithm>
#include <mutex>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "core/device_allocators.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"

namespace tensorgrad {

namespace {

struct Kind {
  BackendRegistration registration;
  std::mutex mutex;  // guards found
  std::optional<std::vector<DeviceInfo>> found;
};

class Registry {
 public:
  Registry() {
    add(cpu_registration());
    // "cuda" stays a known kind, as in PyTorch, so that a program written for
    // CUDA hears where to go instead of "unknown device kind".
    add({"cuda", [] { return std::vector<DeviceInfo>{}; }, [](int) -> std::shared_ptr<const Backend> {
           throw StateError(
               "no CUDA device: tensorgrad has no CUDA backend; on an NVIDIA GPU use its Vulkan backend "
               "(Device(\"vulkan:0\"); scripts/setup.sh --vulkan installs the Vulkan loader), or Device::CPU");
         }});
    add(vulkan::registration());
  }

  void add(BackendRegistration registration) {
    (void)Device(registration.kind, 0);  // a malformed kind throws ValueError here
    if (!registration.devices || !registration.backend)
      throw ValueError("register_backend: the registration of kind '" + registration.kind +
                       "' has an empty devices or backend function; give both");
    const std::string kind = registration.kind;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& k : kinds_)
        if (k->registration.kind == kind)
          throw ValueError("register_backend: the device kind '" + kind + "' is already registered (the registered "
                           "kinds: " + kinds_text() + "); register a backend under another kind");
      auto k = std::make_shared<Kind>();
      k->registration = std::move(registration);
      kinds_.push_back(std::move(k));
    }
    install_device_allocator(kind, [](Device device, size_t bytes) { return backend(device)->allocate(bytes); });
  }

  std::shared_ptr<Kind> find(Device device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& k : kinds_)
        if (k->registration.kind == device.kind()) return k;
    }
    throw_unregistered_device(device);
  }

  std::vector<std::shared_ptr<Kind>> kinds() {
    std::lock_guard<std::mutex> lock(mutex_);
    return kinds_;
  }

 private:
  // Called with mutex_ held.
  std::string kinds_text() const {
    std::string text;
    for (const auto& k : kinds_) text += (text.empty() ? "" : ", ") + k->registration.kind;
    return text;
  }

  std::mutex mutex_;
  std::vector<std::shared_ptr<Kind>> kinds_;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: storages and backends may outlive statics
  return *r;
}

// The built-in kinds are registered (and their allocators handed to core)
// before main, so that an allocation on a device finds its kind before any
// lookup has run.
[[maybe_unused]] const bool kBuiltinsRegistered = (registry(), true);

// The devices `k`'s backend found, asked once; checked to be kind:0, kind:1, ...
const std::vector<DeviceInfo>& found_devices(Kind& k) {
  std::lock_guard<std::mutex> lock(k.mutex);
  if (!k.found) {
    std::vector<DeviceInfo> found = k.registration.devices();
    for (size_t i = 0; i < found.size(); ++i)
      if (found[i].device != Device(k.registration.kind, int(i)))
        throw StateError("the '" + k.registration.kind + "' backend listed " + found[i].device.str() + " as its device " +
                         std::to_string(i) + "; a backend lists its own kind's devices in index order (" +
                         k.registration.kind + ":0, " + k.registration.kind + ":1, ...)");
    k.found = std::move(found);
  }
  return *k.found;
}

}  // namespace

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::kDiscreteGpu: return "discrete GPU";
    case DeviceType::kIntegratedGpu: return "integrated GPU";
    case DeviceType::kCpuImplementation: return "CPU implementation";
    case DeviceType::kCpu: return "CPU";
  }
  return "unknown";
}

void register_backend(BackendRegistration registration) { registry().add(std::move(registration)); }

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> all;
  for (const auto& k : registry().kinds()) {
    try {
      const std::vector<DeviceInfo>& found = found_devices(*k);
      all.insert(all.end(), found.begin(), found.end());
    } catch (const std::exception& e) {
      log_message(LogLevel::Warning, "devices: the '" + k->registration.kind +
                                         "' backend's device search failed, its devices are left out: " + e.what());
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const DeviceInfo& a, const DeviceInfo& b) { return int(a.type) < int(b.type); });
  return all;
}

std::shared_ptr<const Backend> backend(Device device) {
  if (device == Device::CPU) return cpu_backend();
  const std::shared_ptr<Kind> k = registry().find(device);
  const std::vector<DeviceInfo>& found = found_devices(*k);
  const std::string& kind = k->registration.kind;
  if (found.empty()) {
    (void)k->registration.backend(device.index());  // throws its reason; a backend that does not is refused below
    throw StateError("no device " + device.str() + ": the '" + kind + "' backend found no device; use Device::CPU");
  }
  if (size_t(device.index()) >= found.size()) {
    std::string listed;
    for (const DeviceInfo& d : found) listed += (listed.empty() ? "" : ", ") + d.device.str() + " (" + d.name + ")";
    throw StateError("no device " + device.str() + ": the '" + kind + "' backend found " +
                     std::to_string(found.size()) + " device(s): " + listed +
                     "; use one of them (tensorgrad::devices() lists every device), or Device::CPU");
  }
  std::shared_ptr<const Backend> b = k->registration.backend(device.index());
  if (!b || b->device() != device)
    throw StateError("the '" + kind + "' backend gave " +
                     (b ? "a backend for " + b->device().str() : std::string("no backend")) + " when asked for " +
                     device.str() + "; its backend function must return the backend of the device it is asked for");
  return b;
}

void synchronize(Device device) { backend(device)->synchronize(); }

DeviceCounters device_counters(Device device) { return backend(device)->counters(); }

}  // namespace tensorgrad
