// Writes the fuzzer's seed files: small, valid GGUF files made by
// GGUFWriter, together covering every metadata type the writer sets, every
// tensor type, ranks 1 to 4 and a non-default alignment.
//
//   gguf_seeds DIR      (scripts/fuzz.sh runs it into fuzz/seeds/)
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "tensorgrad/io/gguf.h"
#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::io;

namespace {

void save(const std::string& dir, const std::string& name, const GGUFWriter& writer) {
  const std::vector<uint8_t> bytes = writer.to_bytes();
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) throw IOError("cannot write " + dir + "/" + name);
  std::printf("%s: %zu bytes\n", name.c_str(), bytes.size());
}

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = (float(i) - float(n) / 2) * scale;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    {  // Nothing but the header.
      GGUFWriter w;
      save(dir, "empty.gguf", w);
    }
    {  // Every scalar and array type the writer sets, no tensors.
      GGUFWriter w;
      w.set_string("general.architecture", "tensorgrad");
      w.set_bool("a.bool", true);
      w.set_u32("a.u32", 4000000000u);
      w.set_i32("a.i32", -7);
      w.set_u64("a.u64", 1ULL << 63);
      w.set_i64("a.i64", -(1LL << 40));
      w.set_f32("a.f32", 0.25f);
      w.set_f64("a.f64", -1.5e-300);
      const std::vector<uint64_t> u64s = {1, 2, 3};
      w.set_u64_array("a.u64s", u64s);
      const std::vector<int64_t> i64s = {-1, 0, 1};
      w.set_i64_array("a.i64s", i64s);
      const std::vector<double> f64s = {0.5, 1e10};
      w.set_f64_array("a.f64s", f64s);
      w.set_string_array("a.strings", {"x", "", "yz"});
      save(dir, "metadata.gguf", w);
    }
    {  // One tensor of each type, ranks 1 to 4.
      GGUFWriter w;
      w.set_string("general.architecture", "tensorgrad");
      w.add_tensor("f32", Tensor::from_vector(ramp(12, 0.5f), Shape{3, 4}), TensorType::F32);
      w.add_tensor("f16", Tensor::from_vector(ramp(6, 1.25f), Shape{6}), TensorType::F16);
      w.add_tensor("bf16", Tensor::from_vector(ramp(24, -0.1f), Shape{2, 3, 4}), TensorType::BF16);
      const std::vector<int32_t> ids = {0, -1, 5, 2147483647};
      w.add_tensor("i32", Tensor::from_vector(ids, Shape{1, 2, 1, 2}), TensorType::I32);
      Tensor steps = Tensor::empty(Shape{2}, DType::Int64);
      steps.data<int64_t>()[0] = 3;
      steps.data<int64_t>()[1] = -(1LL << 50);
      w.add_tensor("i64", steps, TensorType::I64);
      save(dir, "tensors.gguf", w);
    }
    {  // ggml's block types: one block of Q8_0 and Q4_0, one super-block of Q4_K and Q6_K.
      GGUFWriter w;
      w.set_string("general.architecture", "llama");
      w.add_tensor("q8_0", Tensor::from_vector(ramp(32, 0.3f), Shape{1, 32}), TensorType::Q8_0);
      w.add_tensor("q4_0", Tensor::from_vector(ramp(64, -0.2f), Shape{2, 32}), TensorType::Q4_0);
      w.add_tensor("q4_k", Tensor::from_vector(ramp(256, 0.05f), Shape{256}), TensorType::Q4_K);
      w.add_tensor("q6_k", Tensor::from_vector(ramp(256, -0.01f), Shape{256}), TensorType::Q6_K);
      save(dir, "quantized.gguf", w);
    }
    {  // A model-like file at alignment 64.
      GGUFWriter w(64);
      w.set_string("general.architecture", "tensorgrad");
      w.set_string("tensorgrad.config", "{\"layers\":[{\"class\":\"Dense\",\"units\":4}]}");
      w.set_u64("tensorgrad.step", 10);
      w.add_tensor("dense/kernel", Tensor::from_vector(ramp(8, 0.01f), Shape{2, 4}));
      w.add_tensor("dense/bias", Tensor::from_vector(ramp(4, 0.1f), Shape{4}));
      save(dir, "aligned64.gguf", w);
    }
    {  // Names GGUF does not take as they are: stored under short ones, listed in tensorgrad.long_names.*.
      GGUFWriter w;
      w.add_tensor("optimizer/token_and_position_embedding/token_embedding.embeddings/m",
                   Tensor::from_vector(ramp(4, 0.5f), Shape{4}));
      w.add_tensor(std::string(70, 'n'), Tensor::from_vector(ramp(2, 1.0f), Shape{2}));
      w.add_tensor("short", Tensor::from_vector(ramp(1, 2.0f), Shape{1}));
      save(dir, "long_names.gguf", w);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
