#pragma once
// LLaMA-family models in llama.cpp's GGUF layout: the files llama.cpp runs
// and the files people download for it.
#include <memory>
#include <optional>
#include <string>

#include "tensorgrad/io/gguf.h"
#include "tensorgrad/nn/llama.h"
#include "tensorgrad/text/tokenizer.h"

namespace tensorgrad::io {

/// A LLaMA model read from a GGUF file, with the tokenizer the file holds.
struct LlamaFile {
  /// The model, trainable, its weights float32 (dequantized). Its
  /// rope_pairing is RopePairing::Adjacent: llama.cpp's files store the
  /// query and key rows in the order ggml's rotary embedding pairs them.
  std::unique_ptr<nn::LlamaCausalLM> model;
  /// The tokenizer of tokenizer.ggml.*, when the file has one.
  std::optional<text::Tokenizer> tokenizer;
  std::string name;  ///< general.name, or "" when absent
};

/// Reads a GGUF file whose general.architecture is "llama" (llama.cpp's
/// layout): the llama.* keys (context_length, embedding_length,
/// block_count, feed_forward_length, attention.head_count,
/// attention.head_count_kv (default head_count), rope.dimension_count
/// (must be embedding_length / head_count), rope.freq_base (default 10000),
/// attention.layer_norm_rms_epsilon, rope.scaling.type/factor "linear" or
/// none) and the tensors token_embd, blk.N.attn_norm, attn_q, attn_k,
/// attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down (each
/// ".weight"), output_norm, and output (absent: tied to token_embd). Weight
/// types F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K are dequantized by
/// ggml's block formats, a row at a time straight into the model's
/// weights (no second copy of the model is made). Throws IOError for a
/// file that cannot be read; FormatError for another architecture (naming
/// it and the one read), a missing key or tensor (naming it), a tensor of
/// the wrong shape (naming it, its shape and the expected one), a
/// vocabulary that disagrees with token_embd's rows, head counts that do
/// not divide, a quantized type tensorgrad does not read (naming it), and
/// everything GGUFFile::open refuses.
LlamaFile load_llama(const std::string& path);

/// How save_llama writes a model.
struct LlamaSaveOptions {
  /// The matrices' type: F32, F16, BF16, Q8_0 or Q4_0 (the norms stay
  /// F32, as llama.cpp's quantizer keeps them). A matrix whose rows do not
  /// divide into the type's blocks of 32 is written F16.
  TensorType type = TensorType::F32;
  /// The tokenizer written into the file (tokenizer.ggml.*); llama.cpp
  /// needs one, so a file without it is refused (ValueError).
  const text::Tokenizer* tokenizer = nullptr;
  std::string name = "tensorgrad";  ///< general.name
};

/// Writes `model` as a GGUF file llama.cpp loads (architecture "llama"):
/// the llama.* keys from its config, the tensors in llama.cpp's names and
/// orientation (PyTorch's {out, in} rows), the query and key rows permuted
/// for ggml's adjacent-pair rotary embedding when the model pairs halves
/// (as Hugging Face's convert script does), output.weight only when the
/// embedding is untied, and the tokenizer. Written crash-safely
/// (GGUFWriter::write). Throws ValueError for a type not listed, a missing
/// tokenizer or one whose vocabulary differs from the model's, a
/// non-finite weight when quantizing; IOError as GGUFWriter::write.
WriteStats save_llama(const nn::LlamaCausalLM& model, const std::string& path, const LlamaSaveOptions& options);

}  // namespace tensorgrad::io
