#pragma once
// The compute shaders, compiled by glslc at build time and embedded as
// SPIR-V (the table is generated from src/backend/vulkan/shaders/*.comp).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tensorgrad::vulkan {

struct ShaderCode {
  std::string_view name;  // the file's name without ".comp"
  const uint32_t* words;
  size_t count;
};

/// Every embedded shader.
std::span<const ShaderCode> shaders();

}  // namespace tensorgrad::vulkan
