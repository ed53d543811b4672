// Tensor names longer than GGUF's 63 bytes (io/gguf.h, GGUFWriter::add_tensor):
// stored under a short name with the full one in tensorgrad.long_names.*, read
// back by the full name; every built-in layer saved under its longest
// automatic name, with and without optimizer state; files of earlier
// versions (tests/fixtures/gguf/) still load; and ModelCheckpoint and
// BackupAndRestore keep the previous file when a save fails midway.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_files.h"
#include "test_support.h"

#ifndef TENSORGRAD_SOURCE_DIR
#error "tests/CMakeLists.txt defines TENSORGRAD_SOURCE_DIR (the source tree, for tests/fixtures/gguf)"
#endif

using namespace tensorgrad;
using test_support::bit_equal;
using test_support::TempDir;
using test_support::ThreadsGuard;
using test_support::throws;
using test_support::uniform;

namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The stored name GGUFWriter::add_tensor documents: the first bytes (at most
// 54, cut to a character's start), '~', the CRC-32 seeded with `seed`.
std::string documented_stored_name(const std::string& name, size_t prefix, uLong seed = 0) {
  const uLong crc = crc32_z(seed, reinterpret_cast<const Bytef*>(name.data()), name.size());
  char hex[16];
  std::snprintf(hex, sizeof hex, "~%08lx", static_cast<unsigned long>(crc & 0xFFFFFFFFu));
  return name.substr(0, prefix) + hex;
}

Tensor values(std::initializer_list<float> v) { return Tensor::from_vector(std::vector<float>(v), Shape{int64_t(v.size())}); }

nn::FitOptions quiet(int epochs, int64_t batch) {
  nn::FitOptions fo;
  fo.epochs = epochs;
  fo.batch_size = batch;
  fo.verbose = 0;
  return fo;
}

}  // namespace

// ---------------------------------------------------------------- the GGUF layer

TEST(GGUFLongNames, StoredUnderAShortNameAndReadBackByTheFullName) {
  const std::string n63(63, 'a'), n64(64, 'b'), n300 = "optimizer/" + std::string(290, 'c');
  // "é" (2 bytes) at bytes 53-54: the 54-byte cut would split it, so the prefix keeps 53 bytes.
  const std::string utf8 = std::string(53, 'u') + "\xC3\xA9" + std::string(20, 'v');
  io::GGUFWriter w;
  w.set_string("general.architecture", "tensorgrad");
  w.add_tensor(n63, values({1}));
  w.add_tensor(n64, values({2, 3}));
  w.add_tensor(n300, values({4, 5, 6}));
  w.add_tensor(utf8, values({7}));
  const std::vector<uint8_t> bytes = w.to_bytes();
  EXPECT_EQ(w.to_bytes(), bytes);  // deterministic

  const io::GGUFFile f = io::GGUFFile::parse(bytes);
  ASSERT_EQ(f.tensors().size(), 4u);
  const std::vector<std::string> full = {n63, n64, n300, utf8};
  const std::vector<std::string> stored = {n63, documented_stored_name(n64, 54), documented_stored_name(n300, 54),
                                           documented_stored_name(utf8, 53)};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(f.tensors()[i].name, full[i]);
    EXPECT_EQ(f.tensors()[i].stored_name, stored[i]);
    EXPECT_LE(f.tensors()[i].stored_name.size(), 63u);
    ASSERT_NE(f.find_tensor(full[i]), nullptr) << full[i];
  }
  EXPECT_EQ(stored[1].size(), 63u);
  EXPECT_EQ(stored[3].size(), 62u);
  EXPECT_EQ(f.find_tensor(stored[1]), nullptr);  // tensors are found by their full names only
  EXPECT_TRUE(bit_equal(f.read(n64), values({2, 3})));
  EXPECT_TRUE(bit_equal(f.read(n300), values({4, 5, 6})));
  EXPECT_TRUE(bit_equal(f.read(utf8), values({7})));
  // The list: the long ones only, stored and full names in the same order.
  EXPECT_EQ(f.get_string_array(io::kLongNamesStoredKey), std::vector<std::string>({stored[1], stored[2], stored[3]}));
  EXPECT_EQ(f.get_string_array(io::kLongNamesFullKey), std::vector<std::string>({n64, n300, utf8}));
  // The same tensor's stored name is the same in another file, whatever else it holds.
  io::GGUFWriter other;
  other.add_tensor("x", values({0}));
  other.add_tensor(n300, values({1}));
  EXPECT_EQ(io::GGUFFile::parse(other.to_bytes()).find_tensor(n300)->stored_name, stored[2]);

  // A file of short names only has no such keys (as every earlier file).
  io::GGUFWriter shorts;
  shorts.add_tensor(n63, values({1}));
  const io::GGUFFile s = io::GGUFFile::parse(shorts.to_bytes());
  EXPECT_EQ(s.find(io::kLongNamesStoredKey), nullptr);
  EXPECT_EQ(s.find(io::kLongNamesFullKey), nullptr);
  EXPECT_EQ(s.tensors()[0].stored_name, n63);
}

TEST(GGUFLongNames, TheWritersKeysAreReserved) {
  io::GGUFWriter w;
  EXPECT_TRUE(throws<ValueError>([&] { w.set_string_array(io::kLongNamesStoredKey, {"a"}); },
                                 {io::kLongNamesStoredKey, "writer itself"}));
  EXPECT_TRUE(throws<ValueError>([&] { w.set_string(io::kLongNamesFullKey, "a"); }, {io::kLongNamesFullKey}));
}

// A stored name already taken by another tensor: the writer picks the next
// (the CRC-32 seeded with 1, 2, ...), throws nothing, and every tensor reads
// back by its own name.
TEST(GGUFLongNames, TakenStoredNamesPickAnother) {
  const std::string longer = "callbacks/" + std::string(60, 'z');
  const std::string first = documented_stored_name(longer, 54);
  // (a) A user's 63-byte name equal to the long name's first choice, in either order.
  for (bool user_first : {true, false}) {
    io::GGUFWriter w;
    if (user_first) w.add_tensor(first, values({1}));
    w.add_tensor(longer, values({2}));
    if (!user_first) w.add_tensor(first, values({1}));
    const io::GGUFFile f = io::GGUFFile::parse(w.to_bytes());
    EXPECT_TRUE(bit_equal(f.read(first), values({1})));
    EXPECT_TRUE(bit_equal(f.read(longer), values({2})));
    EXPECT_EQ(f.find_tensor(first)->stored_name, first);
    EXPECT_EQ(f.find_tensor(longer)->stored_name, documented_stored_name(longer, 54, 1));
  }
  // (b) Two long names with the same first 54 bytes whose CRC-32s collide,
  // found by a birthday search over 2^19 random 8-byte suffixes (about 32
  // collisions expected; the seed makes it the same search every run).
  const std::string prefix = "optimizer/" + std::string(50, 'p');
  std::mt19937_64 rng(57);
  auto suffix_of = [](uint64_t bits) {
    std::string s(8, '\1');
    for (int k = 0; k < 8; ++k) s[k] = char(1 + (bits >> (8 * k)) % 255);  // no NUL byte
    return s;
  };
  std::vector<std::pair<uint32_t, uint64_t>> crcs;
  for (int i = 0; i < (1 << 19); ++i) {
    const uint64_t bits = rng();
    const std::string name = prefix + suffix_of(bits);
    crcs.emplace_back(uint32_t(crc32_z(0, reinterpret_cast<const Bytef*>(name.data()), name.size())), bits);
  }
  std::sort(crcs.begin(), crcs.end());
  std::string a, b;
  for (size_t i = 1; a.empty() && i < crcs.size(); ++i)
    if (crcs[i].first == crcs[i - 1].first && crcs[i].second != crcs[i - 1].second)
      a = prefix + suffix_of(crcs[i - 1].second), b = prefix + suffix_of(crcs[i].second);
  ASSERT_FALSE(a.empty()) << "no CRC-32 collision among 2^19 names";
  ASSERT_EQ(documented_stored_name(a, 54), documented_stored_name(b, 54));
  io::GGUFWriter w;
  w.add_tensor(a, values({1}));
  w.add_tensor(b, values({2}));
  const io::GGUFFile f = io::GGUFFile::parse(w.to_bytes());
  EXPECT_TRUE(bit_equal(f.read(a), values({1})));
  EXPECT_TRUE(bit_equal(f.read(b), values({2})));
  EXPECT_EQ(f.find_tensor(a)->stored_name, documented_stored_name(a, 54));
  EXPECT_EQ(f.find_tensor(b)->stored_name, documented_stored_name(b, 54, 1));
}

// A damaged list of long names is a FormatError naming what is wrong.
TEST(GGUFLongNames, ABrokenListIsRefused) {
  const std::string l1 = std::string(70, 'a'), l2 = std::string(70, 'b');
  io::GGUFWriter w;
  w.add_tensor("short", values({0}));
  w.add_tensor(l1, values({1}));
  w.add_tensor(l2, values({2}));
  const std::vector<uint8_t> good = w.to_bytes();
  ASSERT_NO_THROW(io::GGUFFile::parse(good));
  // Replaces the first occurrence of `from` in the bytes by `to` (of the same length).
  auto edited = [&](const std::string& from, const std::string& to) {
    std::vector<uint8_t> b = good;
    const auto at = std::search(b.begin(), b.end(), from.begin(), from.end());
    EXPECT_NE(at, b.end()) << from;
    std::copy(to.begin(), to.end(), at);
    return b;
  };
  // One key without the other.
  EXPECT_TRUE(throws<FormatError>([&] { io::GGUFFile::parse(edited(io::kLongNamesFullKey, "tensorgrad.long_names.fulx")); },
                                  {io::kLongNamesStoredKey, "only"}));
  // A stored name that is no tensor of the file.
  const io::GGUFFile f = io::GGUFFile::parse(good);
  const std::string s1 = f.find_tensor(l1)->stored_name;
  std::string not_there = s1;
  not_there[0] = 'q';
  const std::vector<uint8_t> b = edited(s1, not_there);  // the list comes before the tensor table
  EXPECT_TRUE(throws<FormatError>([&] { io::GGUFFile::parse(b); }, {"not a tensor of the file"}));
  // Two tensors given one full name.
  EXPECT_TRUE(throws<FormatError>([&] { io::GGUFFile::parse(edited(l2, l1)); }, {"one name"}));
}

// ---------------------------------------------------------------- every built-in layer

namespace {

// A model of every built-in layer type (the layer registry's), small.
nn::Model every_layer_model() {
  const nn::SymbolicTensor image = nn::Input({6, 6, 2}, DType::Float32, "image");
  const nn::SymbolicTensor series = nn::Input({8, 3}, DType::Float32, "series");
  const nn::SymbolicTensor tokens = nn::Input({6}, DType::Int32, "tokens");
  // Images: Conv2D, pooling, BatchNormalization, Flatten.
  auto c = nn::BatchNormalization()(nn::Conv2D(3, 3, "same", "relu")(image));
  auto p = nn::AveragePooling2D({2, 2})(nn::MaxPooling2D({1, 1})(c));
  auto g = nn::Concatenate()({nn::GlobalAveragePooling2D()(p), nn::GlobalMaxPooling2D()(p), nn::Flatten()(p)});
  // Series: Conv1D, LSTM, GRU, LayerNormalization, Reshape.
  auto s = nn::LayerNormalization()(nn::Conv1D(4, 3, 1, "same")(series));
  auto r = nn::GRU(3)(nn::LSTM(4, true)(s));
  auto rs = nn::Flatten()(nn::Reshape({3, 1})(r));
  // Tokens: Embedding, TokenAndPositionEmbedding, PositionEmbedding, the attention blocks.
  auto e = nn::Embedding(10, 4)(tokens);
  auto t = nn::TokenAndPositionEmbedding(10, 6, 4)(tokens);
  auto pe = nn::Add()({e, nn::PositionEmbedding(6)(e)});
  auto enc = nn::TransformerEncoder(8, 2)(t);
  auto dec = nn::TransformerDecoder(8, 2)({pe, enc});
  auto mha = nn::MultiHeadAttention(2, 2)({dec, enc});
  auto seq = nn::Flatten()(nn::Dropout(0.1f)(mha));
  // Merges and Activation over Dense outputs.
  auto a = nn::Dense(4)(g), b = nn::Dense(4)(rs), d = nn::Dense(4, "tanh")(seq);
  std::vector<nn::SymbolicTensor> merged = {nn::Subtract()({a, b}), nn::Multiply()({a, d}), nn::Average()({a, b, d}),
                                            nn::Maximum()({a, d}), nn::Minimum()({b, d})};
  auto out = nn::Dense(2)(nn::ActivationLayer("relu")(nn::Concatenate()(merged)));
  return nn::Model({image, series, tokens}, {out}, "functional");
}

std::vector<Tensor> every_layer_inputs(std::mt19937& rng) {
  Tensor ids = Tensor::empty({4, 6}, DType::Int32);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int32_t>()[i] = int32_t(1 + rng() % 9);
  return {uniform({4, 6, 6, 2}, rng, -1, 1), uniform({4, 8, 3}, rng, -1, 1), ids};
}

// Each layer's automatic name ("dense", "dense_1") made as long as
// unique_name can make it: its prefix and the largest counter, INT_MAX.
void give_longest_automatic_names(nn::Model& m) {
  int64_t counter = INT_MAX;
  for (const std::shared_ptr<nn::Layer>& layer : m.layers()) {
    std::string base = layer->name();
    const size_t underscore = base.rfind('_');
    if (underscore != std::string::npos && underscore + 1 < base.size() &&
        base.find_first_not_of("0123456789", underscore + 1) == std::string::npos)
      base.resize(underscore);
    layer->set_name(base + "_" + std::to_string(counter--));
  }
}

void expect_same_state(const nn::TrainingState& a, const nn::TrainingState& b) {
  ASSERT_EQ(a.slots.size(), b.slots.size());
  for (size_t i = 0; i < a.slots.size(); ++i) {
    SCOPED_TRACE(a.slots[i].weight);
    EXPECT_EQ(a.slots[i].weight, b.slots[i].weight);
    for (auto slot : {&nn::WeightSlots::m, &nn::WeightSlots::v, &nn::WeightSlots::momentum, &nn::WeightSlots::acc}) {
      EXPECT_EQ((a.slots[i].*slot).defined(), (b.slots[i].*slot).defined());
      if ((a.slots[i].*slot).defined()) EXPECT_TRUE(bit_equal(a.slots[i].*slot, b.slots[i].*slot));
    }
  }
  EXPECT_TRUE(bit_equal(a.iterations, b.iterations));
}

void expect_same_weights(const nn::Model& a, const nn::Model& b) {
  const std::vector<nn::Weight> wa = a.weights(), wb = b.weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    EXPECT_EQ(wa[i].name, wb[i].name);
    EXPECT_TRUE(bit_equal(wa[i].value, wb[i].value)) << wa[i].name;
  }
}

}  // namespace

// The case: TokenAndPositionEmbedding's automatic name is 28 bytes,
// and its optimizer slot "optimizer/token_and_position_embedding/
// token_embedding.embeddings/m" 67.
TEST(SavingLongNames, TokenAndPositionEmbeddingSavesWithItsOptimizerState) {
  TempDir dir;
  manual_seed(1);
  nn::clear_session();
  std::mt19937 rng(1);
  const nn::SymbolicTensor tokens = nn::Input({6}, DType::Int32, "tokens");
  nn::Model m(tokens, nn::Dense(2)(nn::Flatten()(nn::TokenAndPositionEmbedding(10, 6, 4)(tokens))));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  Tensor ids = Tensor::empty({4, 6}, DType::Int32);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int32_t>()[i] = int32_t(rng() % 10);
  m.fit(ids, uniform({4, 2}, rng, -1, 1), quiet(1, 4));
  io::save_model(m, dir / "m.gguf");
  const io::GGUFFile f = io::GGUFFile::open(dir / "m.gguf");
  const std::string slot = "optimizer/token_and_position_embedding/token_embedding.embeddings/m";
  ASSERT_EQ(slot.size(), 67u);
  ASSERT_NE(f.find_tensor(slot), nullptr);
  EXPECT_EQ(f.find_tensor(slot)->stored_name, documented_stored_name(slot, 54));
  EXPECT_EQ(f.find_tensor(slot)->stored_name, "optimizer/token_and_position_embedding/token_embedding~32dceb9c");
  nn::Model back = io::load_model(dir / "m.gguf");
  expect_same_weights(m, back);
  expect_same_state(m.training_state(), back.training_state());
}

// tensorgrad-inspect shows a long name in full and the name the file stores it under.
TEST(SavingLongNames, InspectShowsTheFullAndTheStoredName) {
#ifndef TENSORGRAD_INSPECT
  GTEST_SKIP() << "tensorgrad-inspect is not built (configure with TENSORGRAD_BUILD_APPS=ON)";
#else
  TempDir dir;
  const std::string name = "optimizer/token_and_position_embedding/token_embedding.embeddings/m";
  io::GGUFWriter w;
  w.add_tensor(name, values({1, 2}));
  w.add_tensor("short", values({3}));
  w.write(dir / "f.gguf");
  const std::string stored = io::GGUFFile::open(dir / "f.gguf").find_tensor(name)->stored_name;
  std::string out;
  FILE* p = ::popen((std::string(TENSORGRAD_INSPECT) + " " + (dir / "f.gguf") + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  for (const std::string& want : {"  " + name + "  F32", "stored as \"" + stored + "\"",
                                  std::string(io::kLongNamesStoredKey), std::string(io::kLongNamesFullKey),
                                  std::string("1 tensor name is longer than GGUF's 63 bytes")})
    EXPECT_NE(out.find(want), std::string::npos) << "no \"" << want << "\" in:\n" << out;
  EXPECT_EQ(out.find("stored as \"short\""), std::string::npos) << out;
#endif
}

// Every built-in layer under its longest automatic name, compiled with the
// optimizer of the longest slot name (RMSprop with momentum, centered: m, v
// and momentum), trained a step: save_model with and without optimizer
// state, save_weights and save_checkpoint, each read back bit for bit; and a
// step after loading is the step the original takes.
TEST(SavingLongNames, EveryBuiltInLayerUnderItsLongestAutomaticName) {
  ThreadsGuard threads;
  set_num_threads(1);
  TempDir dir;
  manual_seed(2);
  nn::clear_session();
  std::mt19937 rng(2);
  nn::Model m = every_layer_model();
  give_longest_automatic_names(m);
  std::set<std::string> types;
  for (const auto& layer : m.layers()) types.insert(layer->type());
  for (const char* type : {"Dense", "Flatten", "Activation", "Dropout", "Conv2D", "Conv1D", "MaxPooling2D",
                           "AveragePooling2D", "GlobalAveragePooling2D", "GlobalMaxPooling2D", "BatchNormalization",
                           "LayerNormalization", "Embedding", "LSTM", "GRU", "Add", "Subtract", "Multiply",
                           "Average", "Maximum", "Minimum", "Concatenate", "Reshape", "PositionEmbedding",
                           "TokenAndPositionEmbedding", "TransformerEncoder", "TransformerDecoder",
                           "MultiHeadAttention"})
    EXPECT_TRUE(types.count(type)) << type << " is not in the model";
  RMSpropOptions rms;
  rms.learning_rate = 1e-2f;
  rms.momentum = 0.9f;
  rms.centered = true;
  m.compile(OptimizerSpec::rmsprop(rms), "mse");
  const std::vector<Tensor> xs = every_layer_inputs(rng);
  const std::vector<Tensor> ys = {uniform({4, 2}, rng, -1, 1)};
  m.fit(xs, ys, quiet(1, 4));
  size_t longest = 0, long_names = 0;
  for (const nn::WeightSlots& s : m.training_state().slots) {
    longest = std::max(longest, ("optimizer/" + s.weight + "/momentum").size());
    long_names += ("optimizer/" + s.weight + "/m").size() > 63;
  }
  EXPECT_GT(longest, 80u);
  EXPECT_GT(long_names, 20u);

  // With optimizer state.
  io::save_model(m, dir / "model.gguf");
  nn::Model back = io::load_model(dir / "model.gguf");
  expect_same_weights(m, back);
  expect_same_state(m.training_state(), back.training_state());
  for (const io::TensorInfo& t : io::GGUFFile::open(dir / "model.gguf").tensors()) {
    EXPECT_LE(t.stored_name.size(), 63u);
    EXPECT_EQ(t.stored_name == t.name, t.name.size() <= 63) << t.name;
  }
  // Without.
  io::save_model(m, dir / "bare.gguf", /*include_optimizer=*/false);
  expect_same_weights(m, io::load_model(dir / "bare.gguf"));
  io::save_weights(m, dir / "weights.gguf", io::TensorType::BF16);
  nn::Model other = every_layer_model();
  other.set_weights(back.get_weights());  // a model of other (automatic) names: load_weights matches by name
  give_longest_automatic_names(other);
  io::load_weights(other, dir / "weights.gguf");
  for (const nn::Weight& w : other.weights())
    EXPECT_TRUE(bit_equal(w.value, io::GGUFFile::open(dir / "weights.gguf").read(w.name))) << w.name;
  // A checkpoint, and a step after it.
  io::save_checkpoint(m, dir / "ckpt.gguf", 1);
  nn::clear_session();
  manual_seed(2);
  nn::Model resumed = every_layer_model();
  give_longest_automatic_names(resumed);
  resumed.compile(OptimizerSpec::rmsprop(rms), "mse");
  EXPECT_EQ(io::load_checkpoint(resumed, dir / "ckpt.gguf"), 1);
  expect_same_weights(m, resumed);
  m.fit(xs, ys, quiet(1, 4));
  resumed.fit(xs, ys, quiet(1, 4));
  expect_same_weights(m, resumed);
}

// A user's names of any length, and a Trainer's checkpoint of them.
TEST(SavingLongNames, UserNamesOfAnyLength) {
  ThreadsGuard threads;
  set_num_threads(1);
  TempDir dir;
  manual_seed(3);
  nn::clear_session();
  std::mt19937 rng(3);
  auto build = [] {
    nn::Sequential s({4});
    s.add(nn::Dense(5, "relu"));
    s.add(nn::Dense(2));
    s.layers()[0]->set_name("encoder/" + std::string(300, 'x') + "/\xE6\xA8\xA1\xE5\x9E\x8B");
    s.layers()[1]->set_name(std::string(57, 'b'));  // its weights 64 and 62 bytes, its slots longer
    return s;
  };
  nn::Sequential m = build();
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const Tensor x = uniform({8, 4}, rng, -1, 1), y = uniform({8, 2}, rng, -1, 1);
  m.fit(x, y, quiet(1, 4));
  io::save_model(m, dir / "m.gguf");
  nn::Sequential back = io::load_sequential(dir / "m.gguf");
  EXPECT_EQ(back.layers()[0]->name(), m.layers()[0]->name());
  expect_same_weights(m, back);
  expect_same_state(m.training_state(), back.training_state());

  nn::Trainer trainer(m, {.batch_size = 8});
  trainer.step(x, y);
  io::save_checkpoint(trainer, dir / "t.gguf");
  nn::clear_session();  // the same automatic input name
  nn::Sequential again = build();
  again.compile(OptimizerSpec::adam(1e-2f), "mse");
  nn::Trainer resumed(again, {.batch_size = 8});
  io::load_checkpoint(resumed, dir / "t.gguf");
  trainer.step(x, y);
  resumed.step(x, y);
  expect_same_weights(trainer.training_model(), resumed.training_model());
}

// ---------------------------------------------------------------- files of earlier versions

// tests/fixtures/gguf/ holds files written by tensorgrad before long names
// were stored (commit d8f482d, by make_files.cpp there): they load as they did.
TEST(SavingLongNames, FilesOfEarlierVersionsLoad) {
  const std::string folder = std::string(TENSORGRAD_SOURCE_DIR) + "/tests/fixtures/gguf/";
  // save_weights of a model whose every weight element k of weight j is (j + 1) * 0.01 * (k + 1).
  nn::clear_session();
  nn::Sequential w({3});
  w.add(nn::Dense(4, "relu"));
  w.add(nn::Dense(2));
  w.layers()[1]->set_name("abcdefghijklmnopqrstuvwxyz0");  // 27 bytes: the longest that fit with optimizer state
  io::load_weights(w, folder + "weights.gguf");
  const std::vector<nn::Weight> ws = w.weights();
  ASSERT_EQ(ws.size(), 4u);
  for (size_t j = 0; j < ws.size(); ++j)
    for (int64_t k = 0; k < ws[j].value.numel(); ++k)
      EXPECT_EQ(ws[j].value.data<float>()[k], float(j + 1) * 0.01f * float(k + 1)) << ws[j].name << " " << k;

  // save_model of that model after one Adam step on fixed data: the step taken again here gives the file's
  // weights and moments.
  nn::Model loaded = io::load_model(folder + "model_adam.gguf");
  nn::Sequential again({3});
  again.add(nn::Dense(4, "relu"));
  again.add(nn::Dense(2));
  again.layers()[0]->set_name("dense");
  again.layers()[1]->set_name("abcdefghijklmnopqrstuvwxyz0");
  again.set_weights(w.get_weights());
  again.compile(OptimizerSpec::adam(1e-2f), "mse");
  Tensor x = Tensor::empty({4, 3}), y = Tensor::empty({4, 2});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 5) * 0.25f - 0.5f;
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = float(i % 3) * 0.5f - 0.5f;
  nn::FitOptions fo = quiet(1, 4);
  fo.shuffle = false;
  again.fit(x, y, fo);
  const std::vector<nn::Weight> got = loaded.weights(), want = again.weights();
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < got.size(); ++j) {
    EXPECT_EQ(got[j].name, want[j].name);
    for (int64_t k = 0; k < want[j].value.numel(); ++k)
      EXPECT_NEAR(got[j].value.data<float>()[k], want[j].value.data<float>()[k], 1e-6f) << want[j].name;
  }
  const nn::TrainingState a = loaded.training_state(), b = again.training_state();
  EXPECT_EQ(a.iterations.data<int64_t>()[0], 1);
  ASSERT_EQ(a.slots.size(), b.slots.size());
  for (size_t j = 0; j < a.slots.size(); ++j)
    for (int64_t k = 0; k < b.slots[j].v.numel(); ++k) {
      EXPECT_NEAR(a.slots[j].m.data<float>()[k], b.slots[j].m.data<float>()[k], 1e-6f);
      EXPECT_NEAR(a.slots[j].v.data<float>()[k], b.slots[j].v.data<float>()[k], 1e-6f);
    }

  // ag::save of a Linear(3, 2) whose weight and bias elements are 0.1 * (k + 1) and -0.5 * (k + 1).
  const ag::nn::StateDict dict = ag::load_state_dict(folder + "state_dict.gguf");
  ASSERT_EQ(dict.size(), 2u);
  for (const auto& [name, t] : dict) {
    const Tensor d = t.data();
    for (int64_t k = 0; k < d.numel(); ++k)
      EXPECT_EQ(d.data<float>()[k], name == "weight" ? 0.1f * float(k + 1) : -0.5f * float(k + 1)) << name;
  }
  // None of them has the list of long names.
  for (const char* file : {"weights.gguf", "model_adam.gguf", "state_dict.gguf"})
    EXPECT_EQ(io::GGUFFile::open(folder + file).find(io::kLongNamesFullKey), nullptr) << file;
}

// ---------------------------------------------------------------- callbacks keep the previous file

namespace {

// Limits the size of files this process writes (RLIMIT_FSIZE) from the end
// of epoch `from_epoch` on, so that a save after it fails midway with EFBIG
// (a full disk as the writer sees it); SIGXFSZ is ignored meanwhile. Put it
// before the saving callback. Restores both when destroyed.
class FileSizeLimit : public nn::Callback {
 public:
  FileSizeLimit(int from_epoch, rlim_t bytes) : from_epoch_(from_epoch), bytes_(bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    saved_signal_ = ::signal(SIGXFSZ, SIG_IGN);
  }
  ~FileSizeLimit() override {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, saved_signal_);
  }
  void on_epoch_end(int epoch, nn::Logs&) override {
    if (epoch != from_epoch_) return;
    rlimit limit = saved_;
    limit.rlim_cur = bytes_;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }

 private:
  int from_epoch_;
  rlim_t bytes_;
  rlimit saved_{};
  sighandler_t saved_signal_;
};

bool temp_files_in(const std::string& folder) {
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) return true;
  return false;
}

// The loss of every epoch.
struct Losses : nn::Callback {
  std::vector<double> loss;
  void on_epoch_end(int, nn::Logs& logs) override { loss.push_back(logs.at("loss")); }
};

}  // namespace

// A save that fails midway (the file system refuses the write at 4 KiB)
// leaves the previous file as it was, loadable, and no temporary file;
// ModelCheckpoint's best stays the one the file holds.
TEST(SavingLongNames, ModelCheckpointKeepsThePreviousFileWhenASaveFails) {
  TempDir dir;
  manual_seed(5);
  nn::clear_session();
  std::mt19937 rng(5);
  nn::Sequential m({6});
  m.add(nn::Dense(64, "relu"));
  m.add(nn::Dense(2));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const Tensor x = uniform({32, 6}, rng, -1, 1), y = uniform({32, 2}, rng, -1, 1);
  const std::string path = dir / "best.gguf";
  auto checkpoint = std::make_shared<io::ModelCheckpoint>(
      io::ModelCheckpointOptions{.filepath = path, .monitor = "loss", .save_best_only = true});
  auto losses = std::make_shared<Losses>();
  {
    nn::FitOptions fo = quiet(3, 8);
    fo.callbacks = {losses, std::make_shared<FileSizeLimit>(/*from_epoch=*/1, 4096), checkpoint};
    EXPECT_TRUE(throws<IOError>([&] { m.fit(x, y, fo); }, {path}));
  }
  ASSERT_EQ(losses->loss.size(), 2u);
  ASSERT_LT(losses->loss[1], losses->loss[0]);  // the second epoch improved: its save was the one that failed
  EXPECT_FALSE(temp_files_in(dir.path.string()));
  nn::Model back = io::load_model(path);  // the first epoch's model, whole
  EXPECT_EQ(back.training_state().iterations.data<int64_t>()[0], 4);
  ASSERT_TRUE(checkpoint->best().has_value());
  EXPECT_EQ(*checkpoint->best(), losses->loss[0]);
}

TEST(SavingLongNames, BackupAndRestoreKeepsThePreviousBackupWhenASaveFails) {
  TempDir dir;
  manual_seed(6);
  nn::clear_session();
  std::mt19937 rng(6);
  auto build = [] {
    nn::Sequential m({6});
    m.add(nn::Dense(64, "relu"));
    m.add(nn::Dense(2));
    m.compile(OptimizerSpec::adam(1e-3f), "mse");
    return m;
  };
  nn::Sequential m = build();
  const Tensor x = uniform({32, 6}, rng, -1, 1), y = uniform({32, 2}, rng, -1, 1);
  const std::string backups = dir / "backup";
  {
    nn::FitOptions fo = quiet(3, 8);
    fo.callbacks = {std::make_shared<FileSizeLimit>(/*from_epoch=*/1, 4096),
                    std::make_shared<io::BackupAndRestore>(io::BackupAndRestoreOptions{.backup_dir = backups})};
    EXPECT_TRUE(throws<IOError>([&] { m.fit(x, y, fo); }, {"backup.gguf"}));
  }
  EXPECT_FALSE(temp_files_in(backups));
  // The backup of epoch 1 is there and resumes a new fit at epoch 1 (the second).
  const io::GGUFFile f = io::GGUFFile::open(backups + "/backup.gguf");
  EXPECT_EQ(f.get_i64("tensorgrad.fit.initial_epoch"), 1);
  nn::clear_session();
  nn::Sequential again = build();
  nn::FitOptions fo = quiet(3, 8);
  // The callbacks of the run that saved (BackupAndRestore keeps the state of those before it), this one idle.
  fo.callbacks = {std::make_shared<FileSizeLimit>(/*from_epoch=*/-1, 4096),
                  std::make_shared<io::BackupAndRestore>(io::BackupAndRestoreOptions{.backup_dir = backups})};
  const nn::History h = again.fit(x, y, fo);
  EXPECT_EQ(h.epoch.front(), 1);
}
