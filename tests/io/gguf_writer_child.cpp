// The child process of AtomicWrite.SigkillNeverLeavesATornFile
// (tests/io/test_gguf_atomic_write.cpp): saves one model over and over with
// io::save_model (the crash-safe path) until it is killed.
//
//   gguf_writer_child PATH [FIRST_VERSION [COUNT]]
//
// The model is Input(4096) -> Dense(4096, no bias): one 64 MB kernel
// {4096, 4096}. Version v = FIRST_VERSION, FIRST_VERSION + 1, ... (default
// 1) is the model with every kernel element equal to float(v). Without COUNT it never stops; with
// COUNT it writes that many versions and prints each write's times (the
// test's delays were tuned with it). Exit status 2 for bad arguments, 1 for
// a tensorgrad error (printed on stderr).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "tensorgrad/io/gguf.h"
#include "tensorgrad/tensorgrad.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s PATH [FIRST_VERSION [COUNT]]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const uint64_t first = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const uint64_t count = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 0;
  if (first == 0 || first > (uint64_t(1) << 24)) {
    // float(v) must be exact for the reader's check to mean anything.
    std::fprintf(stderr, "FIRST_VERSION must be in [1, 2^24], got %s\n", argv[2]);
    return 2;
  }
  try {
    namespace tg = tensorgrad;
    const tg::nn::SymbolicTensor in = tg::nn::Input({4096});
    tg::nn::Model model(in, tg::nn::Dense(4096, "linear", false)(in), "versions");
    tg::Tensor kernel = model.weights().at(0).value;
    for (uint64_t v = first; count == 0 || v < first + count; ++v) {
      const auto t0 = std::chrono::steady_clock::now();
      kernel.fill(float(v));
      const tg::io::WriteStats stats = tg::io::save_model(model, path);
      if (count) {
        const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("version %llu: fill+write %.1f ms (write %.1f ms, fsync %.1f ms, %llu bytes)\n",
                    (unsigned long long)v, total * 1e3, stats.write_seconds * 1e3, stats.fsync_seconds * 1e3,
                    (unsigned long long)stats.bytes);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_writer_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
