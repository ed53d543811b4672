#pragma once
// The CPU backend's registration (backend/registry.h): kind "cpu", one
// device (this machine's processor), cpu_backend() as its backend.
#include "tensorgrad/backend/registry.h"

namespace tensorgrad {

BackendRegistration cpu_registration();

}  // namespace tensorgrad
