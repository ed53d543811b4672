#pragma once
// The CPU paths the kernels choose at run time, and the TENSORGRAD_CPU
// override that forces a lesser one, so that every path can be tested on a
// machine that has a better one.
namespace tensorgrad::kernels {

/// The run-time kernel paths, each including the ones before it: kAvx2
/// (libxsmm generates AVX2 code), kAvx512 (AVX-512 code), kAvx512Bf16
/// (also the bfloat16 dot products of mixed_bfloat16), kAmx (also AMX-BF16
/// tiles for mixed_bfloat16's MatMul). The compiler's vector width is the
/// build's (-march) and is not among them.
enum class CpuPath { kAvx2, kAvx512, kAvx512Bf16, kAmx };

/// "avx2", "avx512", "avx512bf16", "amx": TENSORGRAD_CPU's words.
const char* cpu_path_name(CpuPath path);
/// The best path this CPU can run (libxsmm's target, which honours
/// LIBXSMM_TARGET, and CPUID's AMX bits), whatever TENSORGRAD_CPU says.
CpuPath detected_cpu_path();
/// The path in use: TENSORGRAD_CPU's when set, else detected_cpu_path().
/// Read once per process, at the first call, which also sets libxsmm's
/// target to match. Throws ValueError for a name it does not know or a path
/// above detected_cpu_path() (and again at every later call until the
/// variable is fixed: nothing runs on a path the CPU lacks).
CpuPath cpu_path();

}  // namespace tensorgrad::kernels
