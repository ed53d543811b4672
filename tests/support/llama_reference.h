#pragma once
// A plain double-precision LLaMA forward (Touvron et al. 2023, as Hugging
// Face's modeling_llama and llama.cpp's llm_build_llama compute it), read
// from an nn::LlamaCausalLM's weights by name: the reference the layers,
// the GGUF reader and writer and generation are checked against.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

namespace test_support {

// logits {T, V} (row-major) of token ids `ids` at positions 0..T-1.
inline std::vector<double> llama_reference_logits(const tensorgrad::nn::LlamaCausalLM& model,
                                                  const std::vector<int32_t>& ids) {
  using tensorgrad::Tensor;
  const tensorgrad::nn::LlamaConfig& c = model.llama_config();
  std::map<std::string, Tensor> w;
  for (const tensorgrad::nn::Weight& x : model.weights()) w[x.name] = x.value;
  const int64_t T = int64_t(ids.size()), E = c.hidden_dim, V = c.vocabulary_size, Hq = c.num_query_heads,
                Hkv = c.num_key_value_heads, D = c.head_dim(), I = c.intermediate_dim;
  auto at = [&](const std::string& name) { return w.at(name).data<float>(); };
  using Mat = std::vector<double>;  // row-major
  auto rms = [&](const Mat& x, const float* scale) {
    Mat y(x.size());
    for (int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (int64_t e = 0; e < E; ++e) ss += x[t * E + e] * x[t * E + e];
      const double r = 1.0 / std::sqrt(ss / double(E) + double(c.layer_norm_epsilon));
      for (int64_t e = 0; e < E; ++e) y[t * E + e] = x[t * E + e] * r * scale[e];
    }
    return y;
  };
  // x {T, in} times a Keras kernel {in, out} -> {T, out}.
  auto matmul = [&](const Mat& x, const float* k, int64_t in, int64_t out) {
    Mat y(size_t(T * out), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) y[t * out + o] += x[t * in + i] * k[i * out + o];
    return y;
  };
  // q or k {T, heads, D} rotated in place.
  auto rope = [&](Mat& x, int64_t heads) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double angle = double(t) / c.rope_scaling_factor *
                               std::pow(double(c.rope_max_wavelength), -2.0 * double(i) / double(D));
          const bool halves = c.rope_pairing == tensorgrad::RopePairing::Halves;
          double* row = x.data() + (t * heads + h) * D;
          const int64_t a = halves ? i : 2 * i, b = halves ? i + D / 2 : 2 * i + 1;
          const double xa = row[a], xb = row[b];
          row[a] = xa * std::cos(angle) - xb * std::sin(angle);
          row[b] = xb * std::cos(angle) + xa * std::sin(angle);
        }
  };
  Mat x(size_t(T * E));
  const float* emb = at("token_embedding/embeddings");
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) x[t * E + e] = emb[ids[size_t(t)] * E + e];
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "transformer_layer_" + std::to_string(l) + "/";
    const Mat h = rms(x, at(p + "self_attention_layernorm.scale"));
    Mat q = matmul(h, at(p + "self_attention.query_kernel"), E, Hq * D);
    Mat k = matmul(h, at(p + "self_attention.key_kernel"), E, Hkv * D);
    const Mat v = matmul(h, at(p + "self_attention.value_kernel"), E, Hkv * D);
    rope(q, Hq), rope(k, Hkv);
    Mat att(size_t(T * Hq * D), 0.0);
    for (int64_t hh = 0; hh < Hq; ++hh) {
      const int64_t g = hh / (Hq / Hkv);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(size_t(i + 1));
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[(i * Hq + hh) * D + d] * k[(j * Hkv + g) * D + d];
          s[size_t(j)] = dot / std::sqrt(double(D));
          mx = std::max(mx, s[size_t(j)]);
        }
        double z = 0;
        for (double& e : s) z += e = std::exp(e - mx);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t d = 0; d < D; ++d) att[(i * Hq + hh) * D + d] += s[size_t(j)] / z * v[(j * Hkv + g) * D + d];
      }
    }
    const Mat o = matmul(att, at(p + "self_attention.output_kernel"), Hq * D, E);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Mat h2 = rms(x, at(p + "feedforward_layernorm.scale"));
    const Mat gate = matmul(h2, at(p + "feedforward_gate_kernel"), E, I);
    Mat up = matmul(h2, at(p + "feedforward_up_kernel"), E, I);
    for (size_t i = 0; i < up.size(); ++i) up[i] *= gate[i] / (1.0 + std::exp(-gate[i]));
    const Mat down = matmul(up, at(p + "feedforward_down_kernel"), I, E);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  const Mat h = rms(x, at("sequence_output_layernorm/scale"));
  Mat logits(size_t(T * V), 0.0);
  if (c.tie_word_embeddings) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t vv = 0; vv < V; ++vv)
        for (int64_t e = 0; e < E; ++e) logits[t * V + vv] += h[t * E + e] * emb[vv * E + e];
  } else {
    logits = matmul(h, at("token_embedding/reverse_embeddings"), E, V);
  }
  return logits;
}

}  // namespace test_support
