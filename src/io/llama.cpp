// LLaMA models in llama.cpp's GGUF layout (llama-arch.cpp's LLM_ARCH_LLAMA
// names, llama-model.cpp's shapes): the weights are PyTorch's {out, in}
// rows, the query and key rows in the order ggml's adjacent-pair rotary
// embedding reads them.
#include "tensorgrad/io/llama.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "nn/loading.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::io {

namespace {

constexpr const char* kArch = "llama";

// llama.cpp's general.file_type (LLAMA_FTYPE_*) of a file whose matrices are `type`.
uint32_t file_type(TensorType type) {
  switch (type) {
    case TensorType::F32: return 0;
    case TensorType::F16: return 1;
    case TensorType::Q4_0: return 2;
    case TensorType::Q8_0: return 7;
    case TensorType::BF16: return 32;
    case TensorType::I32:
    case TensorType::I64:
    case TensorType::Q4_K:
    case TensorType::Q6_K: break;
  }
  throw ValueError(std::string("save_llama: the matrices' type must be F32, F16, BF16, Q8_0 or Q4_0; got ") +
                   tensor_type_name(type));
}

bool block_type(TensorType t) { return t == TensorType::Q8_0 || t == TensorType::Q4_0; }

// The rows of each head of W {heads x d, in} reordered between rotate_half's
// pairs (i, i + d/2) and ggml's adjacent pairs (2i, 2i + 1): row 2i of a
// head from row i, row 2i + 1 from row i + d/2 (to_adjacent), or back.
Tensor permute_rope_rows(const Tensor& w, int64_t heads, bool to_adjacent) {
  const int64_t rows = w.shape()[0], in = w.shape()[1], d = rows / heads;
  Tensor out = Tensor::empty(w.shape());
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t half = 0; half < 2; ++half) {
        const int64_t adjacent = h * d + 2 * i + half, halves = h * d + i + half * (d / 2);
        const int64_t from = to_adjacent ? halves : adjacent, to = to_adjacent ? adjacent : halves;
        std::copy_n(src + from * in, in, dst + to * in);
      }
  return out;
}

// A kernel in Keras' layout, its first in_axes axes the inputs and the rest the outputs ({E, heads, D}: 1;
// the output projection {heads, D, E}: 2), as PyTorch's {out, in}.
int64_t inputs_of(const Tensor& kernel, int in_axes) {
  int64_t in = 1;
  for (int a = 0; a < in_axes; ++a) in *= kernel.shape()[a];
  return in;
}

Tensor rows_of(const Tensor& kernel, int in_axes = 1) {
  const int64_t in = inputs_of(kernel, in_axes), out = kernel.numel() / in;
  Tensor t = Tensor::empty(Shape{out, in});
  const float* k = kernel.data<float>();
  float* r = t.data<float>();
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) r[o * in + i] = k[i * out + o];
  return t;
}

struct Reader {
  const GGUFFile& file;

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(file.path() + ": " + what);
  }
  uint64_t u(const std::string& key) const {
    if (!file.find(key)) fail("the key " + key + " is missing; a llama.cpp LLaMA file has it");
    return file.get_u64(key);
  }
  uint64_t u_or(const std::string& key, uint64_t fallback) const { return file.find(key) ? file.get_u64(key) : fallback; }
  double f_or(const std::string& key, double fallback) const { return file.find(key) ? file.get_f64(key) : fallback; }

  const TensorInfo& tensor(const std::string& name, const Shape& expected) const {
    const TensorInfo* t = file.find_tensor(name);
    if (!t) fail("the tensor " + name + " is missing; a llama.cpp LLaMA file has it");
    if (t->shape != expected)
      fail("the tensor " + name + " has shape " + t->shape.str() + " (ggml ne reversed); expected " +
           expected.str());
    return *t;
  }

  // The file's {rows, in} matrix `name`, dequantized a row at a time, handed row by row to `put(row, values)`.
  template <class Put>
  void rows(const std::string& name, const Shape& expected, Put put) const {
    const TensorInfo& t = tensor(name, expected);
    const int64_t n_rows = expected.rank() == 1 ? 1 : expected[0], in = expected[-1];
    const std::span<const uint8_t> bytes = file.data(name);
    const uint64_t row_bytes = tensor_type_row_bytes(t.type, in);
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t r = 0; r < n_rows; ++r) {
      dequantize_row(t.type, bytes.subspan(size_t(r) * row_bytes, row_bytes), row);
      put(r, std::span<const float>(row));
    }
    file.release_pages(name);  // read once: the mapping's pages need not stay resident beside the weights
  }

  // A {n} vector or {rows, in} matrix copied as it is into `dst` (its shape).
  void into(const std::string& name, Tensor dst) const {
    const int64_t in = dst.shape()[-1];
    float* d = dst.data<float>();
    rows(name, dst.shape(), [&](int64_t r, std::span<const float> v) { std::copy(v.begin(), v.end(), d + r * in); });
  }

  // A {out, in} matrix into a kernel {in, out...} (transposed).
  void into_kernel(const std::string& name, Tensor kernel, int in_axes = 1) const {
    const int64_t in = inputs_of(kernel, in_axes), out = kernel.numel() / in;
    float* k = kernel.data<float>();
    rows(name, Shape{out, in}, [&](int64_t r, std::span<const float> v) {
      for (int64_t i = 0; i < in; ++i) k[i * out + r] = v[size_t(i)];
    });
  }
};

// The weight's own tensor (a handle on its memory).
Tensor weight(const nn::Model& model, const std::string& name) {
  for (const nn::Weight& w : model.weights())
    if (w.name == name) return w.value;
  throw ValueError("llama: the model has no weight " + name + "; build it with nn::LlamaCausalLM");
}

}  // namespace

LlamaFile load_llama(const std::string& path) {
  const GGUFFile file = GGUFFile::open(path);
  const Reader rd{file};
  if (!file.find("general.architecture"))
    rd.fail("general.architecture is missing; load_llama reads files whose architecture is \"llama\"");
  const std::string arch = file.get_string("general.architecture");
  if (arch != kArch)
    rd.fail("general.architecture is \"" + arch + "\"; load_llama reads \"llama\" (llama.cpp's LLaMA layout)" +
            (arch == "tensorgrad" ? "; a file saved by save_model loads with io::load_model" : ""));
  const std::string p = std::string(kArch) + ".";
  nn::LlamaConfig c;
  c.max_sequence_length = int64_t(rd.u(p + "context_length"));
  c.hidden_dim = int64_t(rd.u(p + "embedding_length"));
  c.num_layers = int64_t(rd.u(p + "block_count"));
  c.intermediate_dim = int64_t(rd.u(p + "feed_forward_length"));
  c.num_query_heads = int64_t(rd.u(p + "attention.head_count"));
  c.num_key_value_heads = int64_t(rd.u_or(p + "attention.head_count_kv", uint64_t(c.num_query_heads)));
  if (c.num_query_heads < 1 || c.hidden_dim % c.num_query_heads != 0)
    rd.fail(p + "attention.head_count (" + std::to_string(c.num_query_heads) + ") must divide " + p +
            "embedding_length (" + std::to_string(c.hidden_dim) + ")");
  if (c.num_key_value_heads < 1 || c.num_query_heads % c.num_key_value_heads != 0)
    rd.fail(p + "attention.head_count_kv (" + std::to_string(c.num_key_value_heads) + ") must divide " + p +
            "attention.head_count (" + std::to_string(c.num_query_heads) + ")");
  const int64_t d = c.hidden_dim / c.num_query_heads;
  const uint64_t rope_dims = rd.u_or(p + "rope.dimension_count", uint64_t(d));
  if (int64_t(rope_dims) != d)
    rd.fail(p + "rope.dimension_count is " + std::to_string(rope_dims) + "; tensorgrad rotates every feature of a " +
            "head, " + std::to_string(d) + " here (embedding_length / head_count)");
  c.rope_max_wavelength = float(rd.f_or(p + "rope.freq_base", 10000.0));
  if (file.find(p + "rope.scaling.type")) {
    const std::string kind = file.get_string(p + "rope.scaling.type");
    if (kind == "linear")
      c.rope_scaling_factor = float(rd.f_or(p + "rope.scaling.factor", 1.0));
    else if (kind != "none")
      rd.fail(p + "rope.scaling.type is \"" + kind + "\"; tensorgrad reads \"linear\" and \"none\"");
  } else {
    const double scale_linear = rd.f_or(p + "rope.scale_linear", 1.0);
    c.rope_scaling_factor = float(scale_linear);
  }
  c.layer_norm_epsilon = float(rd.f_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_pairing = RopePairing::Adjacent;
  c.tie_word_embeddings = file.find_tensor("output.weight") == nullptr;
  const TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (!embd) rd.fail("the tensor token_embd.weight is missing; a llama.cpp LLaMA file has it");
  if (embd->shape.rank() != 2 || embd->shape[1] != c.hidden_dim)
    rd.fail("the tensor token_embd.weight has shape " + embd->shape.str() + "; expected {vocabulary, " +
            std::to_string(c.hidden_dim) + "}");
  c.vocabulary_size = embd->shape[0];
  if (file.find(p + "vocab_size") && int64_t(file.get_u64(p + "vocab_size")) != c.vocabulary_size)
    rd.fail(p + "vocab_size is " + std::to_string(file.get_u64(p + "vocab_size")) + " but token_embd.weight has " +
            std::to_string(c.vocabulary_size) + " rows");
  LlamaFile out;
  if (file.find("tokenizer.ggml.model")) {
    out.tokenizer = text::Tokenizer::from_gguf(file);
    if (out.tokenizer->vocab_size() != c.vocabulary_size)
      rd.fail("tokenizer.ggml.tokens holds " + std::to_string(out.tokenizer->vocab_size()) +
              " tokens but token_embd.weight has " + std::to_string(c.vocabulary_size) + " rows");
  }
  try {
    c.validate();
  } catch (const ValueError& e) {
    rd.fail(std::string("its settings do not make a model: ") + e.what());
  }
  if (file.find("general.name")) out.name = file.get_string("general.name");
  {
    // Weights and streams come from the file: draw nothing (no random values to overwrite, no
    // transient copies, and the caller's random stream untouched).
    nn::detail::LoadingScope loading;
    out.model = std::make_unique<nn::LlamaCausalLM>(c);
  }
  const nn::Model& m = *out.model;
  rd.into("token_embd.weight", weight(m, "token_embedding/embeddings"));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string blk = "blk." + std::to_string(i) + ".", layer = "transformer_layer_" + std::to_string(i) + "/";
    rd.into(blk + "attn_norm.weight", weight(m, layer + "self_attention_layernorm.scale"));
    rd.into_kernel(blk + "attn_q.weight", weight(m, layer + "self_attention.query_kernel"));
    rd.into_kernel(blk + "attn_k.weight", weight(m, layer + "self_attention.key_kernel"));
    rd.into_kernel(blk + "attn_v.weight", weight(m, layer + "self_attention.value_kernel"));
    rd.into_kernel(blk + "attn_output.weight", weight(m, layer + "self_attention.output_kernel"), 2);
    rd.into(blk + "ffn_norm.weight", weight(m, layer + "feedforward_layernorm.scale"));
    rd.into_kernel(blk + "ffn_gate.weight", weight(m, layer + "feedforward_gate_kernel"));
    rd.into_kernel(blk + "ffn_up.weight", weight(m, layer + "feedforward_up_kernel"));
    rd.into_kernel(blk + "ffn_down.weight", weight(m, layer + "feedforward_down_kernel"));
  }
  rd.into("output_norm.weight", weight(m, "sequence_output_layernorm/scale"));
  if (!c.tie_word_embeddings) rd.into_kernel("output.weight", weight(m, "token_embedding/reverse_embeddings"));
  return out;
}

WriteStats save_llama(const nn::LlamaCausalLM& model, const std::string& path, const LlamaSaveOptions& o) {
  const uint32_t ftype = file_type(o.type);
  const nn::LlamaConfig& c = model.llama_config();
  if (!o.tokenizer)
    throw ValueError("save_llama: give LlamaSaveOptions::tokenizer; llama.cpp loads no model without its tokenizer");
  if (o.tokenizer->vocab_size() != c.vocabulary_size)
    throw ValueError("save_llama: the tokenizer has " + std::to_string(o.tokenizer->vocab_size()) +
                     " tokens but the model's vocabulary_size is " + std::to_string(c.vocabulary_size));
  const nn::Model& m = model;
  GGUFWriter w;
  const std::string p = std::string(kArch) + ".";
  w.set_string("general.architecture", kArch);
  w.set_string("general.name", o.name);
  w.set_u32("general.file_type", ftype);
  w.set_u32(p + "vocab_size", uint32_t(c.vocabulary_size));
  w.set_u32(p + "context_length", uint32_t(c.max_sequence_length));
  w.set_u32(p + "embedding_length", uint32_t(c.hidden_dim));
  w.set_u32(p + "block_count", uint32_t(c.num_layers));
  w.set_u32(p + "feed_forward_length", uint32_t(c.intermediate_dim));
  w.set_u32(p + "attention.head_count", uint32_t(c.num_query_heads));
  w.set_u32(p + "attention.head_count_kv", uint32_t(c.num_key_value_heads));
  w.set_u32(p + "rope.dimension_count", uint32_t(c.head_dim()));
  w.set_f32(p + "rope.freq_base", c.rope_max_wavelength);
  if (c.rope_scaling_factor != 1.0f) {
    w.set_string(p + "rope.scaling.type", "linear");
    w.set_f32(p + "rope.scaling.factor", c.rope_scaling_factor);
  }
  w.set_f32(p + "attention.layer_norm_rms_epsilon", c.layer_norm_epsilon);
  o.tokenizer->write_gguf(w);
  // The writer holds tensors by handle until write(): keep every converted one alive here.
  std::vector<Tensor> keep;
  auto matrix = [&](const std::string& name, const Tensor& rows) {
    const TensorType t = block_type(o.type) && rows.shape()[-1] % 32 != 0 ? TensorType::F16 : o.type;
    keep.push_back(rows);
    w.add_tensor(name, keep.back(), t);
  };
  auto vector = [&](const std::string& name, const Tensor& v) {
    keep.push_back(v);
    w.add_tensor(name, keep.back(), TensorType::F32);
  };
  const bool permute = c.rope_pairing == RopePairing::Halves;
  matrix("token_embd.weight", weight(m, "token_embedding/embeddings"));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string blk = "blk." + std::to_string(i) + ".", layer = "transformer_layer_" + std::to_string(i) + "/";
    auto rows = [&](const std::string& n, int in_axes = 1) { return rows_of(weight(m, layer + n), in_axes); };
    vector(blk + "attn_norm.weight", weight(m, layer + "self_attention_layernorm.scale"));
    Tensor q = rows("self_attention.query_kernel"), k = rows("self_attention.key_kernel");
    if (permute) {
      q = permute_rope_rows(q, c.num_query_heads, true);
      k = permute_rope_rows(k, c.num_key_value_heads, true);
    }
    matrix(blk + "attn_q.weight", q);
    matrix(blk + "attn_k.weight", k);
    matrix(blk + "attn_v.weight", rows("self_attention.value_kernel"));
    matrix(blk + "attn_output.weight", rows("self_attention.output_kernel", 2));
    vector(blk + "ffn_norm.weight", weight(m, layer + "feedforward_layernorm.scale"));
    matrix(blk + "ffn_gate.weight", rows("feedforward_gate_kernel"));
    matrix(blk + "ffn_up.weight", rows("feedforward_up_kernel"));
    matrix(blk + "ffn_down.weight", rows("feedforward_down_kernel"));
  }
  vector("output_norm.weight", weight(m, "sequence_output_layernorm/scale"));
  if (!c.tie_word_embeddings) matrix("output.weight", rows_of(weight(m, "token_embedding/reverse_embeddings")));
  return w.write(path);
}

}  // namespace tensorgrad::io
