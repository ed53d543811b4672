// Peak memory of loading a quantized GGUF file: every tensor read into a
// float32 tensor and kept, as a model's loader does. Not Google Benchmark.
//
//   gguf_quant_load write PATH [MB] [TYPE]   writes ~MB megabytes of TYPE (Q4_0 by default) tensors of
//                                            {2048, 2048}, as a model's weights (random normal values)
//   gguf_quant_load load PATH                 GGUFFile::open, then read() of every tensor (the pages of
//                                            each tensor's bytes given back after it is read)
//   gguf_quant_load load-keep-pages PATH      the same values through data() and dequantize_row, which
//                                            leave the file's pages mapped: what read() did before
//   gguf_quant_load write-llama PATH [TYPE]   a LLaMA model (width 1024, 8 blocks, 16 heads, 4 key-value
//                                            heads, SwiGLU 2816, 32000 tokens, untied) saved by
//                                            io::save_llama with TYPE (Q4_0 by default) matrices
//   gguf_quant_load load-llama PATH           io::load_llama: the model built, then read into
//
// Each load prints the tensors' float32 size, the file's size, the process's
// peak resident memory (getrusage ru_maxrss) before opening and at the end,
// and the growth as a fraction of the float32 size. Run each mode in its own
// process (ru_maxrss is the process's peak so far).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/io/gguf.h"
#include "tensorgrad/io/llama.h"

using namespace tensorgrad;
using namespace tensorgrad::io;

namespace {

uint64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return uint64_t(u.ru_maxrss) * 1024;  // Linux reports KiB
}

TensorType type_named(const std::string& s) {
  for (TensorType t : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K, TensorType::F16,
                       TensorType::F32})
    if (s == tensor_type_name(t)) return t;
  std::fprintf(stderr, "gguf_quant_load: unknown type %s\n", s.c_str());
  std::exit(2);
}

int write(const std::string& path, double mb, TensorType type) {
  const int64_t side = 2048;
  const uint64_t per_tensor = side * tensor_type_row_bytes(type, side);
  const int count = std::max(1, int(mb * 1e6 / double(per_tensor) + 0.5));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> v(size_t(side * side));
  for (float& x : v) x = normal(rng);
  const Tensor w = Tensor::from_vector(v, Shape{side, side});  // one tensor, stored under every name
  GGUFWriter writer;
  writer.set_string("general.architecture", "llama");
  for (int i = 0; i < count; ++i) writer.add_tensor("blk." + std::to_string(i) + ".ffn_up.weight", w, type);
  const WriteStats s = writer.write(path);
  std::printf("wrote %s: %d %s tensors of {%lld, %lld}, %llu bytes\n", path.c_str(), count, tensor_type_name(type),
              (long long)side, (long long)side, (unsigned long long)s.bytes);
  return 0;
}

int load(const std::string& path, bool keep_pages) {
  const uint64_t before = peak_rss_bytes();
  const GGUFFile f = GGUFFile::open(path);
  std::vector<Tensor> loaded;
  uint64_t floats = 0, file_bytes = std::filesystem::file_size(path);
  for (const TensorInfo& t : f.tensors()) {
    if (keep_pages) {
      Tensor out = Tensor::empty(t.shape);
      const std::span<const uint8_t> bytes = f.data(t.name);
      dequantize_row(t.type, bytes, {out.data<float>(), size_t(out.numel())});
      loaded.push_back(std::move(out));
    } else {
      loaded.push_back(f.read(t.name));
    }
    floats += loaded.back().nbytes();
  }
  const uint64_t peak = peak_rss_bytes();
  std::printf("%s (%s): %zu tensors, float32 %.1f MB, file %.1f MB; peak RSS before open %.1f MB, after %.1f MB; "
              "growth %.1f MB = %.3f of the float32 size\n",
              keep_pages ? "load-keep-pages" : "load", path.c_str(), loaded.size(), floats / 1e6, file_bytes / 1e6,
              before / 1e6, peak / 1e6, (peak - before) / 1e6, double(peak - before) / double(floats));
  return 0;
}

nn::LlamaConfig big_llama() {
  nn::LlamaConfig c;
  c.vocabulary_size = 32000, c.hidden_dim = 1024, c.num_layers = 8, c.num_query_heads = 16;
  c.num_key_value_heads = 4, c.intermediate_dim = 2816, c.max_sequence_length = 256;
  return c;
}

int write_llama(const std::string& path, TensorType type) {
  nn::LlamaCausalLM m(big_llama());
  std::vector<std::string> tokens;
  for (int i = 0; i < 32000; ++i) tokens.push_back(i < 256 ? std::string(1, char(i)) : "t" + std::to_string(i));
  text::Tokenizer::Parts p;
  p.model = "gpt2";
  const text::Tokenizer bytes = text::Tokenizer::byte_level();
  for (int i = 0; i < 256; ++i) tokens[size_t(i)] = bytes.token(i);  // GPT-2's byte characters
  p.tokens = tokens;
  p.bos = 0, p.eos = 0;
  const text::Tokenizer tok = text::Tokenizer::from_parts(std::move(p));
  const WriteStats s = io::save_llama(m, path, {.type = type, .tokenizer = &tok});
  std::printf("wrote %s: %s matrices, %llu bytes\n", path.c_str(), tensor_type_name(type), (unsigned long long)s.bytes);
  return 0;
}

int load_llama_file(const std::string& path) {
  const uint64_t before = peak_rss_bytes();
  const io::LlamaFile f = io::load_llama(path);
  uint64_t floats = 0;
  for (const nn::Weight& w : f.model->weights()) floats += w.value.nbytes();
  const uint64_t peak = peak_rss_bytes(), file_bytes = std::filesystem::file_size(path);
  std::printf("load-llama (%s): weights float32 %.1f MB, file %.1f MB; peak RSS before %.1f MB, after %.1f MB; "
              "growth %.1f MB = %.3f of the float32 size\n",
              path.c_str(), floats / 1e6, file_bytes / 1e6, before / 1e6, peak / 1e6, (peak - before) / 1e6,
              double(peak - before) / double(floats));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "write" && argc >= 3)
      return write(argv[2], argc > 3 ? std::atof(argv[3]) : 200.0, argc > 4 ? type_named(argv[4]) : TensorType::Q4_0);
    if ((mode == "load" || mode == "load-keep-pages") && argc == 3) return load(argv[2], mode == "load-keep-pages");
    if (mode == "write-llama" && argc >= 3) return write_llama(argv[2], argc > 3 ? type_named(argv[3]) : TensorType::Q4_0);
    if (mode == "load-llama" && argc == 3) return load_llama_file(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_quant_load: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: gguf_quant_load write PATH [MB] [TYPE] | load PATH | load-keep-pages PATH | write-llama PATH [TYPE] "
                       "| load-llama PATH\n");
  return 2;
}
