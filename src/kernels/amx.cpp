// The bfloat16 GEMM on AMX tiles (kernels/bfloat16.h: amx_gemm_bf16), for
// the mixed_bfloat16 policy on CPUs that have them. Compiled for any x86-64
// target: the tile instructions sit in functions marked for AMX, which run
// only after cpu_has_amx_bf16() said yes.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "kernels/bfloat16.h"
#include "kernels/cpu_features.h"

namespace tensorgrad::kernels {

namespace {
// Linux's request for the tile data state (arch/x86/include/uapi/asm/prctl.h).
constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtileData = 18;

// The 64-byte operand of ldtilecfg, palette 1. Tiles 0-3: the four 16 x 16
// float32 blocks of C (row half, column half); 4-5: the two row halves of A
// (16 rows, 32 bfloat16 of k); 6-7: the two column halves of B (16 pairs of
// k, 16 columns of pairs): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
// A constant in memory: GCC 12's _tile_loadconfig tells the compiler it
// reads only the first 8 bytes of its operand, so the stores that fill a
// local configuration may be dropped as dead (seen: a local one left the
// tiles unconfigured, and the next tile instruction raised SIGILL).
constexpr TileConfig kTileConfig{};

// Loaded at every call and released after it: another library in the
// process (oneDNN, say) may configure the same thread's tiles its own way
// between our calls.
__attribute__((target("amx-tile"))) void configure_tiles() { _tile_loadconfig(&kTileConfig); }
}  // namespace

bool cpu_has_amx_bf16() {
  if (cpu_path() != CpuPath::kAmx) return false;
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  return granted;
}

__attribute__((target("amx-tile,amx-bf16"))) void amx_gemm_bf16(const bf16* a, const bf16* b, int64_t np, float* c,
                                                                 int64_t ldc, int64_t m, int64_t n, int64_t kp,
                                                                 bool accumulate) {
  configure_tiles();
  // A block of C that crosses its edge goes through this staging copy.
  alignas(64) float edge[32 * 32];
  const int64_t a_stride = kp * int64_t(sizeof(bf16)), b_stride = 2 * np * int64_t(sizeof(bf16));
  for (int64_t i0 = 0; i0 < m; i0 += 32)
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      const bool inside = i0 + 32 <= m && j0 + 32 <= n;
      float* block = inside ? c + i0 * ldc + j0 : edge;
      const int64_t ld = inside ? ldc : 32, stride = ld * int64_t(sizeof(float));
      const int64_t rows = std::min<int64_t>(32, m - i0), cols = std::min<int64_t>(32, n - j0);
      if (accumulate) {
        if (!inside) {
          std::fill(edge, edge + 32 * 32, 0.0f);
          for (int64_t i = 0; i < rows; ++i) {
            const float* c_row = c + (i0 + i) * ldc + j0;
            std::copy(c_row, c_row + cols, edge + i * 32);
          }
        }
        _tile_loadd(0, block, stride);
        _tile_loadd(1, block + 16, stride);
        _tile_loadd(2, block + 16 * ld, stride);
        _tile_loadd(3, block + 16 * ld + 16, stride);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      const bf16* a_rows = a + i0 * kp;
      for (int64_t p = 0; p < kp; p += 32) {
        const bf16* b_pairs = b + (p / 2) * 2 * np + 2 * j0;
        _tile_loadd(4, a_rows + p, a_stride);
        _tile_loadd(5, a_rows + 16 * kp + p, a_stride);
        _tile_loadd(6, b_pairs, b_stride);
        _tile_loadd(7, b_pairs + 32, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, block, stride);
      _tile_stored(1, block + 16, stride);
      _tile_stored(2, block + 16 * ld, stride);
      _tile_stored(3, block + 16 * ld + 16, stride);
      if (!inside)
        for (int64_t i = 0; i < rows; ++i) std::copy(edge + i * 32, edge + i * 32 + cols, c + (i0 + i) * ldc + j0);
    }
  _tile_release();
}

}  // namespace tensorgrad::kernels
