// A first user's trial of saving and loading (io/saving.h, io/callbacks.h,
// io/gguf.h), trying to break them: files that are not what they should be,
// names at GGUF's limit, models loaded twice, checkpoints moved between
// trainers, and file objects moved from.
#include <gtest/gtest.h>

#include "test_files.h"
#include "test_support.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using nn::Dense;
using nn::Input;
using nn::Model;
using nn::Sequential;
using nn::SymbolicTensor;
using test_support::TempDir;
using test_support::ThreadsGuard;
using test_support::throws;
using test_support::uniform;

namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Sequential small_mlp() {
  Sequential m({4});
  m.add(Dense(6, "relu"));
  m.add(Dense(2));
  return m;
}

nn::FitOptions quiet(int epochs, int64_t batch = 8) {
  nn::FitOptions fo;
  fo.epochs = epochs;
  fo.batch_size = batch;
  fo.verbose = 0;
  return fo;
}

}  // namespace

// GGUFFile's moved-from object: a use throws StateError instead of reading
// through a null pointer; the object moved to reads on.
TEST(IOTrial, MovedFromGGUFFileThrowsStateError) {
  TempDir dir;
  manual_seed(1);
  nn::clear_session();
  Sequential m = small_mlp();
  io::save_model(m, dir / "m.gguf");
  io::GGUFFile a = io::GGUFFile::open(dir / "m.gguf");
  io::GGUFFile b = std::move(a);
  EXPECT_EQ(b.read("dense/kernel").shape(), Shape({4, 6}));
  EXPECT_TRUE(throws<StateError>([&] { (void)a.read("dense/kernel"); }, {"moved"}));
  EXPECT_TRUE(throws<StateError>([&] { (void)a.tensors(); }, {"moved"}));
  EXPECT_TRUE(throws<StateError>([&] { (void)a.find("general.architecture"); }, {"moved"}));
  EXPECT_TRUE(throws<StateError>([&] { (void)a.path(); }, {"moved"}));
  // Assigned to again, it reads.
  a = io::GGUFFile::open(dir / "m.gguf");
  EXPECT_EQ(a.read("dense/kernel").shape(), Shape({4, 6}));
}

// A layer name long enough that its optimizer slot names pass GGUF's 63
// bytes: save_model fails with a ValueError naming the tensor, and the file
// already at the path is kept.
TEST(IOTrial, LongLayerNameFailsCleanlyAndKeepsTheFile) {
  TempDir dir;
  manual_seed(2);
  nn::clear_session();
  std::mt19937 rng(2);
  Sequential m = small_mlp();
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const std::string path = dir / "m.gguf";
  io::save_model(m, path);
  const std::string before = read_all(path);
  // 63 - len("/kernel") = 56: the weight names fit; the slots do not.
  m.layers()[0]->set_name(std::string(56, 'a'));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  m.fit(uniform({16, 4}, rng, -1, 1), uniform({16, 2}, rng, -1, 1), quiet(1));
  const std::string msg = test_support::message_of<ValueError>([&] { io::save_model(m, path); });
  EXPECT_NE(msg.find(std::string(56, 'a')), std::string::npos) << msg;
  EXPECT_EQ(read_all(path), before);
  // The weights alone fit (56 + 7 = 63 bytes).
  io::save_weights(m, dir / "w.gguf");
  nn::clear_session();
  Sequential other = small_mlp();
  other.layers()[0]->set_name(std::string(56, 'a'));
  io::load_weights(other, dir / "w.gguf");
  // Without the optimizer it saves.
  io::save_model(m, path, /*include_optimizer=*/false);
  Model back = io::load_model(path);
  EXPECT_EQ(back.layers()[0]->name(), std::string(56, 'a'));
  // 57 bytes: the weight name is 64 bytes, refused naming it.
  m.layers()[0]->set_name(std::string(57, 'b'));
  EXPECT_TRUE(throws<ValueError>([&] { io::save_weights(m, dir / "w2.gguf"); }, {std::string(57, 'b')}));
  EXPECT_FALSE(std::filesystem::exists(dir / "w2.gguf"));
}

// Paths that are not files.
TEST(IOTrial, BadPaths) {
  TempDir dir;
  manual_seed(3);
  nn::clear_session();
  Sequential m = small_mlp();
  // A folder as the target.
  std::filesystem::create_directories(dir / "folder");
  EXPECT_TRUE(throws<IOError>([&] { io::save_model(m, dir / "folder"); }, {"folder"}));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "folder"));
  EXPECT_TRUE(throws<IOError>([&] { io::load_model(dir / "folder"); }, {"folder"}));
  // An empty path.
  EXPECT_TRUE(throws<IOError>([&] { io::save_model(m, ""); }, {}));
  EXPECT_TRUE(throws<IOError>([&] { io::load_model(""); }, {}));
  // No temporary files left in the working folder.
  for (const auto& e : std::filesystem::directory_iterator("."))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // A parent that is a regular file.
  { std::ofstream(dir / "plain") << "x"; }
  EXPECT_TRUE(throws<IOError>([&] { io::save_model(m, dir / "plain/m.gguf"); }, {"plain"}));
  // Unicode.
  const std::string uni = dir / "modèle-模型-🙂.gguf";
  io::save_model(m, uni);
  Model back = io::load_model(uni);
  EXPECT_EQ(back.weights().size(), m.weights().size());
  // A read-only target is replaced (as Keras overwrites), keeping its mode.
  io::save_model(m, dir / "ro.gguf");
  std::filesystem::permissions(dir / "ro.gguf", std::filesystem::perms::owner_read);
  io::save_model(m, dir / "ro.gguf");
  EXPECT_EQ(std::filesystem::status(dir / "ro.gguf").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read);
  // A missing file and a truncated one.
  EXPECT_TRUE(throws<IOError>([&] { io::load_model(dir / "missing.gguf"); }, {"missing.gguf"}));
  const std::string whole = read_all(dir / "ro.gguf");
  size_t data_end = 0;  // the last tensor's last byte, before the padding
  for (const io::TensorInfo& t : io::GGUFFile::open(dir / "ro.gguf").tensors())
    data_end = std::max(data_end, size_t(t.offset + t.nbytes));
  for (size_t cut : {size_t(0), size_t(3), size_t(20), whole.size() / 2, data_end - 1}) {
    { std::ofstream(dir / "cut.gguf", std::ios::binary) << whole.substr(0, cut); }
    EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "cut.gguf"); }, {"cut.gguf"})) << cut;
    EXPECT_TRUE(throws<FormatError>([&] { io::load_weights(m, dir / "cut.gguf"); }, {"cut.gguf"})) << cut;
  }
}
