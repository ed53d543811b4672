// Saving and loading, two measurements (BENCHMARKS.md, issue 10):
//   save-load  io::save_model / io::load_model of the 784-500-10 MLP after one
//              training step, with its AdamW state (4.8 MB) and without
//              (1.6 MB), --repeats times each; prints the medians: save
//              total, the part before fsync (header, data copied to the
//              file) and the fsync of the file and its folder apart, then
//              load (open, rebuild, read).
//   open-rss   writes a 200 MB GGUF file (50 tensors of 4 MB), then opens it
//              with io::GGUFFile and reads its metadata and tensor table;
//              prints the growth of RssFile and VmRSS in /proc/self/status
//              (the file is memory-mapped: nothing of the data is read).
// Usage: io_bench [save-load|open-rss|all] [--dir DIR] [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  const size_t n = std::strlen(key);
  for (std::string line; std::getline(f, line);)
    if (line.compare(0, n, key) == 0) return std::stod(line.substr(n + 1));
  return -1;
}

void save_load(const std::string& dir, int repeats) {
  tg::manual_seed(0);
  tg::nn::Sequential m({784});
  m.add(tg::nn::Dense(500, "relu"));
  m.add(tg::nn::Dense(10, "softmax"));
  m.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy");
  tg::Tensor x = tg::Tensor::zeros({500, 784});
  tg::Tensor y = tg::Tensor::zeros({500}, tg::DType::Int32);
  m.train_on_batch({{x}, {y}, {}});  // AdamW moments exist
  const std::string path = dir + "/io_bench_mlp.gguf";
  for (bool include_optimizer : {true, false}) {
    std::vector<double> total, write, fsync, load;
    uint64_t bytes = 0;
    for (int i = 0; i < repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const tg::io::WriteStats s = tg::io::save_model(m, path, include_optimizer);
      total.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      write.push_back(s.write_seconds);
      fsync.push_back(s.fsync_seconds);
      bytes = s.bytes;
    }
    for (int i = 0; i < repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      tg::nn::Model loaded = tg::io::load_model(path);
      load.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("784-500-10 MLP, %s, %.2f MB, medians of %d:\n",
                include_optimizer ? "weights and AdamW state" : "weights only (include_optimizer = false)",
                double(bytes) / 1e6, repeats);
    std::printf("  save_model %.2f ms = %.2f ms writing + %.2f ms fsync (file and folder)\n", 1e3 * median(total),
                1e3 * median(write), 1e3 * median(fsync));
    std::printf("  load_model %.2f ms\n", 1e3 * median(load));
  }
  std::filesystem::remove(path);
}

void open_rss(const std::string& dir) {
  const std::string path = dir + "/io_bench_200mb.gguf";
  {
    tg::io::GGUFWriter w;
    w.set_string("general.architecture", "tensorgrad");
    std::vector<tg::Tensor> keep;
    for (int i = 0; i < 50; ++i) {
      keep.push_back(tg::Tensor::full({1024, 1024}, float(i)));
      w.add_tensor("block." + std::to_string(i) + ".weight", keep.back());
    }
    w.write(path);
  }
  const double file0 = status_kb("RssFile:"), rss0 = status_kb("VmRSS:");
  tg::io::GGUFFile f = tg::io::GGUFFile::open(path);
  size_t keys = f.metadata().size(), tensors = 0;
  uint64_t data_bytes = 0;
  for (const tg::io::TensorInfo& t : f.tensors()) {
    ++tensors;
    data_bytes += t.nbytes;
  }
  const double file1 = status_kb("RssFile:"), rss1 = status_kb("VmRSS:");
  std::printf("opened %s (%.1f MB of tensor data): %zu keys, %zu tensors\n", path.c_str(), double(data_bytes) / 1e6,
              keys, tensors);
  std::printf("  RssFile grew by %.0f kB, VmRSS by %.0f kB\n", file1 - file0, rss1 - rss0);
  std::filesystem::remove(path);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "all";
  std::string dir = std::filesystem::temp_directory_path().string();
  int repeats = 51;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--repeats")) repeats = std::max(1, std::stoi(argv[i + 1]));
  }
  try {
    if (mode == "save-load" || mode == "all") save_load(dir, repeats);
    if (mode == "open-rss" || mode == "all") open_rss(dir);
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "io_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
