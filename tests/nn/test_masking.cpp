// Keras' masking: an Embedding (or TokenAndPositionEmbedding) with
// mask_zero marks token 0 as padding, position-wise layers pass the mask on,
// attention layers skip padded keys, and cross-entropy over the steps skips
// padded positions. Padding then changes nothing at the tokens; layers that
// would read the padding as data, and the places that cannot honour a mask,
// refuse it with a ValueError.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/io/onnx.h"
#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

using namespace tensorgrad;

namespace {

constexpr int64_t kV = 11, kE = 8;

Tensor ids(const std::vector<int32_t>& v, int64_t rows) {
  return Tensor::from_vector(std::span<const int32_t>(v), Shape{rows, int64_t(v.size()) / rows});
}

void expect_prefix(const Tensor& padded, const Tensor& plain, int64_t rows, int64_t steps_padded, int64_t steps,
                   const char* what) {
  const int64_t width = plain.shape().row_size() / steps;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < steps * width; ++i)
      EXPECT_NEAR(padded.data<float>()[r * steps_padded * width + i], plain.data<float>()[r * steps * width + i], 1e-5)
          << what << " row " << r << " element " << i;
}

}  // namespace

// The same layers (shared: the same weights) on a sequence and on it padded
// with zeros: with mask_zero the tokens' outputs are the unpadded ones, for
// the encoder block and for MultiHeadAttention; without it they are not.
TEST(Masking, PaddingWithMaskZeroChangesNothingAtTheTokens) {
  for (bool mha : {false, true}) {
    SCOPED_TRACE(mha ? "MultiHeadAttention" : "TransformerEncoder");
    manual_seed(3);
    // The same architecture at two sequence lengths, given the same weights (they do not depend on the length).
    auto model = [&](int64_t steps, bool mask_zero) {
      auto x = nn::Input({steps}, DType::Int32, "ids");
      auto h = nn::TokenAndPositionEmbedding(kV, 8, kE, mask_zero)(x);
      h = mha ? nn::MultiHeadAttention(2, 4)({h, h}) : nn::TransformerEncoder(16, 2)(h);
      return nn::Model(x, nn::Dense(kV)(h), "masked");
    };
    nn::Model padded = model(6, true), plain = model(4, true), blind = model(6, false);
    plain.set_weights(padded.get_weights());
    blind.set_weights(padded.get_weights());
    const Tensor x4 = ids({3, 1, 4, 1, 5, 9, 2, 6}, 2), x6 = ids({3, 1, 4, 1, 0, 0, 5, 9, 2, 6, 0, 0}, 2);
    expect_prefix(padded.predict(x6), plain.predict(x4), 2, 6, 4, "with mask_zero");
    // Without the mask the padding is attended to.
    const Tensor a = blind.predict(x6), b = plain.predict(x4);
    double diff = 0.0;
    for (int64_t i = 0; i < 4 * kV; ++i)
      diff = std::max(diff, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
    EXPECT_GT(diff, 1e-3) << "the padding should matter without the mask";
  }
}

// The decoder reads the sequences' masks as its padding masks: the same as
// giving them as inputs.
TEST(Masking, TheDecoderReadsMasksAsItsPaddingMasks) {
  manual_seed(4);
  auto embed = std::make_shared<nn::TokenAndPositionEmbedding>(kV, 8, kE, /*mask_zero=*/true);
  auto source = std::make_shared<nn::Embedding>(kV, kE, /*mask_zero=*/true);
  auto decoder = std::make_shared<nn::TransformerDecoder>(16, 2);
  auto t = nn::Input({5}, DType::Int32, "target"), s = nn::Input({4}, DType::Int32, "source");
  nn::Model carried({t, s}, {(*decoder)({(*embed)(t), (*source)(s)})}, "carried");
  auto t2 = nn::Input({5}, DType::Int32, "target"), s2 = nn::Input({4}, DType::Int32, "source");
  auto tm = nn::Input({5}, DType::Float32, "target_mask"), sm = nn::Input({4}, DType::Float32, "source_mask");
  // The explicit masks beside the carried ones (all ones for the rows' tokens) give the same numbers.
  nn::Model given({t2, s2, tm, sm}, {(*decoder)({(*embed)(t2), (*source)(s2), tm, sm})}, "given");
  const Tensor xt = ids({2, 7, 0, 0, 0, 4, 4, 4, 1, 0}, 2), xs = ids({5, 0, 0, 0, 3, 3, 8, 0}, 2);
  Tensor mt = Tensor::zeros(Shape{2, 5}), ms = Tensor::zeros(Shape{2, 4});
  for (int64_t i = 0; i < 10; ++i) mt.data<float>()[i] = xt.data<int32_t>()[i] != 0 ? 1.0f : 0.0f;
  for (int64_t i = 0; i < 8; ++i) ms.data<float>()[i] = xs.data<int32_t>()[i] != 0 ? 1.0f : 0.0f;
  const Tensor a = carried.predict(std::vector<Tensor>{xt, xs}).at(0);
  const Tensor b = given.predict(std::vector<Tensor>{xt, xs, mt, ms}).at(0);
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

// Cross-entropy over the steps of a masked output is the mean over the
// unpadded positions only (Keras 3), on predict's logits.
TEST(Masking, TheLossSkipsPaddedPositions) {
  manual_seed(5);
  auto x = nn::Input({5}, DType::Int32, "ids");
  nn::Model m(x, nn::Dense(kV)(nn::Embedding(kV, 4, /*mask_zero=*/true)(x)), "tagger");
  m.compile(OptimizerSpec::adamw(1e-2f), "sparse_categorical_crossentropy");
  const Tensor in = ids({3, 1, 4, 0, 0, 2, 7, 1, 8, 0}, 2), y = ids({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2);
  for (int step = 0; step < 2; ++step) {
    const Tensor logits = m.predict(in);
    double sum = 0.0;
    int count = 0;
    for (int64_t p = 0; p < 10; ++p) {
      if (in.data<int32_t>()[p] == 0) continue;
      const float* z = logits.data<float>() + p * kV;
      double mx = z[0], e = 0.0;
      for (int64_t c = 1; c < kV; ++c) mx = std::max(mx, double(z[c]));
      for (int64_t c = 0; c < kV; ++c) e += std::exp(double(z[c]) - mx);
      sum += mx + std::log(e) - double(z[y.data<int32_t>()[p]]);
      ++count;
    }
    const double loss = m.evaluate(in, y, 2).at("loss");
    EXPECT_NEAR(loss, sum / count, 1e-5) << "step " << step;
    // A clone, and a Trainer (which trains a copy), skip the padding too.
    EXPECT_NEAR(m.clone().evaluate(in, y, 2).at("loss"), loss, 1e-6) << "step " << step;
    EXPECT_NEAR(nn::Trainer(m, {.batch_size = 2}).eval(in, y), loss, 1e-6) << "step " << step;
    m.fit(in, y, {.epochs = 1, .batch_size = 2, .verbose = 0});
  }
}

TEST(Masking, WhatCannotHonourAMaskRefusesIt) {
  auto x = nn::Input({5}, DType::Int32, "ids");
  auto h = nn::Embedding(kV, 4, /*mask_zero=*/true)(x);
  EXPECT_TRUE(test_support::throws<ValueError>([&] { nn::Flatten()(h); }, {"Flatten", "does not support masking"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { nn::LSTM(3)(h); }, {"LSTM", "does not support masking"}));
  nn::Model mse(x, nn::Dense(2)(h), "mse");
  EXPECT_TRUE(
      test_support::throws<ValueError>([&] { mse.compile(OptimizerSpec::adamw(), "mse"); }, {"carries a mask", "mse"}));
  nn::Model acc(x, nn::Dense(kV)(h), "acc");
  EXPECT_TRUE(test_support::throws<ValueError>(
      [&] { acc.compile(OptimizerSpec::adamw(), "sparse_categorical_crossentropy", {"accuracy"}); }, {"metrics"}));
#ifdef TENSORGRAD_WITH_ONNX
  EXPECT_TRUE(test_support::throws<ValueError>([&] { io::save_onnx(acc, ::testing::TempDir() + "/masked.onnx"); },
                                               {"mask_zero", "ONNX"}));
  EXPECT_FALSE(std::filesystem::exists(::testing::TempDir() + "/masked.onnx"));
#endif
  // A causal LM with mask_zero: token 0 is padding, never text to continue, and never generated.
  auto t = nn::Input({6}, DType::Int32, "ids");
  auto g = nn::TransformerDecoder(8, 2)(nn::TokenAndPositionEmbedding(kV, 6, kE, true)(t));
  nn::Model lm_model(t, nn::Dense(kV)(g), "lm");
  nn::CausalLM lm(lm_model);
  EXPECT_TRUE(test_support::throws<IndexError>([&] { lm.next(0); }, {"token 0", "mask_zero"}));
  for (int32_t tok : lm.generate(std::vector<int32_t>{3, 4}, 12, {.temperature = 5.0f, .seed = 2})) EXPECT_NE(tok, 0);
}

TEST(Masking, MaskZeroSavesAndLoads) {
  manual_seed(6);
  auto x = nn::Input({6}, DType::Int32, "ids");
  nn::Model m(x, nn::Dense(3)(nn::TransformerEncoder(8, 2)(nn::Embedding(kV, kE, true)(x))), "saved");
  const std::string path = ::testing::TempDir() + "/masked.gguf";
  io::save_model(m, path);
  const Tensor in = ids({4, 2, 0, 0, 0, 0, 1, 1, 1, 5, 0, 0}, 2);
  EXPECT_EQ(io::load_model(path).predict(in).to_vector(), m.predict(in).to_vector());
  std::filesystem::remove(path);
}
