#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <libxsmm.h>

#include <cstdlib>
#include <string>

#include "kernels/kernels.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::kernels {

namespace {

constexpr CpuPath kPaths[] = {CpuPath::kAvx2, CpuPath::kAvx512, CpuPath::kAvx512Bf16, CpuPath::kAmx};

bool cpuid_has_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (edx & (1u << 22)) && (edx & (1u << 24));  // AMX-BF16 and AMX-TILE
}

// libxsmm's target for each path (1.17 knows no target above Cooper Lake:
// AMX is tensorgrad's own kernel, not libxsmm's).
int xsmm_target(CpuPath path) {
  switch (path) {
    case CpuPath::kAvx2: return LIBXSMM_X86_AVX2;
    case CpuPath::kAvx512: return LIBXSMM_X86_AVX512_CORE;
    case CpuPath::kAvx512Bf16:
    case CpuPath::kAmx: return LIBXSMM_X86_AVX512_CPX;
  }
  throw ValueError("xsmm_target: unknown CpuPath " + std::to_string(int(path)));
}

std::string path_list() {
  std::string s;
  for (CpuPath p : kPaths) s += std::string(s.empty() ? "" : ", ") + cpu_path_name(p);
  return s;
}

CpuPath chosen_path() {
  init_xsmm();
  const CpuPath detected = detected_cpu_path();
  const char* env = std::getenv("TENSORGRAD_CPU");
  if (!env || !*env) return detected;
  const std::string want = env;
  for (CpuPath p : kPaths) {
    if (want != cpu_path_name(p)) continue;
    if (int(p) > int(detected))
      throw ValueError("TENSORGRAD_CPU=" + want + " asks for a kernel path this CPU cannot run: it has " +
                       cpu_path_name(detected) + " at most (libxsmm's target '" + libxsmm_get_target_arch() +
                       "'); set it to " + cpu_path_name(detected) + " or lower, or unset it");
    libxsmm_set_target_archid(xsmm_target(p));
    return p;
  }
  throw ValueError("TENSORGRAD_CPU: expected one of " + path_list() + "; got '" + want +
                   "'. Unset it to use the best path this CPU has");
}

}  // namespace

const char* cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::kAvx2: return "avx2";
    case CpuPath::kAvx512: return "avx512";
    case CpuPath::kAvx512Bf16: return "avx512bf16";
    case CpuPath::kAmx: return "amx";
  }
  throw ValueError("cpu_path_name: unknown CpuPath " + std::to_string(int(path)));
}

CpuPath detected_cpu_path() {
  static const CpuPath detected = [] {
    init_xsmm();
    const int arch = libxsmm_get_target_archid();
    if (arch >= LIBXSMM_X86_AVX512_CPX) return cpuid_has_amx_bf16() ? CpuPath::kAmx : CpuPath::kAvx512Bf16;
    return arch >= LIBXSMM_X86_AVX512_CORE ? CpuPath::kAvx512 : CpuPath::kAvx2;
  }();
  return detected;
}

CpuPath cpu_path() {
  static const CpuPath path = chosen_path();
  return path;
}

}  // namespace tensorgrad::kernels
