#pragma once
// The library's version.

namespace tensorgrad {

/// tensorgrad's version, "MAJOR.MINOR.PATCH": the project version in
/// tensorgrad's CMakeLists.txt, which find_package(tensorgrad) and
/// pkg-config report too (as torch.__version__ names PyTorch's). Files
/// written by ag::save record it in "tensorgrad.version".
const char* version();

}  // namespace tensorgrad
