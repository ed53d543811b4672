// ag::save / ag::load (ag/save.h), the seed ag_save.R's contract: round trips
// (bit-identical state dicts and eval-mode outputs, the loaded module in eval
// mode), rebuilding built-in modules without a factory, a factory's
// precedence, state dicts of other kinds (optimizer state), and every bad
// input by error type and message: missing, foreign, truncated, future and
// other-kind files, long names, another architecture.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/ag/save.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/version.h"
#include "tensorgrad/io/gguf.h"
#include "test_files.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ag = tensorgrad::ag;
namespace agnn = tensorgrad::ag::nn;
using test_support::TempDir;

namespace {

std::shared_ptr<agnn::Sequential> mlp() {
  return std::make_shared<agnn::Sequential>(std::initializer_list<std::shared_ptr<agnn::Module>>{
      std::make_shared<agnn::Linear>(4, 8), std::make_shared<agnn::ReLU>(), std::make_shared<agnn::Dropout>(0.25f),
      std::make_shared<agnn::Linear>(8, 2)});
}

// A user's module with buffers (not a registered type: loading needs a
// factory): y = fc(x) * scale, with an int64 scalar counter as PyTorch's
// num_batches_tracked.
struct Scaled : agnn::Module {
  Scaled() {
    fc = register_module("fc", std::make_shared<agnn::Linear>(3, 2));
    scale = register_buffer("scale", ag::ones(Shape{2}));
    count = register_buffer("count", ag::Tensor(tensorgrad::Tensor::zeros(Shape{}, DType::Int64)));
  }
  const char* type() const override { return "TestScaled"; }
  ag::Tensor forward(const ag::Tensor& x) override { return ag::mul((*fc)(x), scale); }
  std::shared_ptr<agnn::Linear> fc;
  ag::Tensor scale, count;
};

::testing::AssertionResult same_state(const agnn::StateDict& a, const agnn::StateDict& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " entries";
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& [na, ta] = a.items()[i];
    const auto& [nb, tb] = b.items()[i];
    if (na != nb) return ::testing::AssertionFailure() << "entry " << i << ": " << na << " vs " << nb;
    if (!test_support::bit_equal(ta.data(), tb.data()))
      return ::testing::AssertionFailure() << na << ": " << ta.shape().str() << " " << dtype_name(ta.dtype())
                                           << " vs " << tb.shape().str() << " " << dtype_name(tb.dtype())
                                           << " or other bits";
  }
  return ::testing::AssertionSuccess();
}

bool all_eval(const agnn::Module& m) {
  if (m.is_training()) return false;
  for (const auto& [name, c] : m.named_children())
    if (!all_eval(*c)) return false;
  return true;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(n));
}

// A GGUF file with tensorgrad's header keys as given (a future version, another kind, another program).
void write_header_file(const std::string& path, const std::string& arch, const std::string& kind, uint32_t version) {
  io::GGUFWriter w;
  w.set_string("general.architecture", arch);
  w.set_string("tensorgrad.file_kind", kind);
  w.set_u32("tensorgrad.format_version", version);
  w.set_string("tensorgrad.state_dict_index", "[]");
  w.add_tensor("weight", tensorgrad::Tensor::full(Shape{2}, 1.0f));
  w.write(path);
}

}  // namespace

TEST(AgSave, MlpRoundTripIsBitIdenticalAndRebuildsWithoutAFactory) {
  TempDir dir("tg_ag_save");
  ag::manual_seed(11);
  auto model = mlp();
  ASSERT_TRUE(model->is_training());
  const io::WriteStats stats = ag::save(*model, dir / "mlp.gguf");
  EXPECT_GT(stats.bytes, 0u);

  std::shared_ptr<agnn::Module> loaded = ag::load(dir / "mlp.gguf");
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->type(), std::string("Sequential"));
  ASSERT_EQ(loaded->named_children().size(), 4u);
  EXPECT_EQ(loaded->named_children()[2].second->type(), std::string("Dropout"));
  EXPECT_EQ(loaded->named_children()[2].second->config().get_double("p"), 0.25);
  EXPECT_TRUE(all_eval(*loaded));
  EXPECT_TRUE(same_state(model->state_dict(), loaded->state_dict()));
  // The loaded module owns its tensors (not the saved module's).
  EXPECT_NE(model->state_dict().at("0.weight").data().raw(), loaded->state_dict().at("0.weight").data().raw());

  model->eval();
  ag::Tensor x = ag::randn(Shape{5, 4});
  EXPECT_TRUE(test_support::bit_equal((*model)(x).data(), (*loaded)(x).data()));
  // The state dict alone reads back the same.
  EXPECT_TRUE(same_state(model->state_dict(), ag::load_state_dict(dir / "mlp.gguf")));
  // Parameters still require grad: the loaded model trains on.
  EXPECT_TRUE(loaded->parameters()[0].requires_grad());
}

TEST(AgSave, FilesRecordTheVersionAndTimeOfWritingWhichLoadIgnores) {
  TempDir dir("tg_ag_save");
  ag::manual_seed(12);
  auto model = mlp();
  const std::time_t before = std::time(nullptr);
  ag::save(*model, dir / "m.gguf");
  ag::save(model->state_dict(), dir / "s.gguf", ag::kOptimizerStateKind);
  const std::time_t after = std::time(nullptr);
  EXPECT_STREQ(tensorgrad::version(), TENSORGRAD_PROJECT_VERSION);  // CMakeLists.txt's project version
  for (const char* name : {"m.gguf", "s.gguf"}) {
    const io::GGUFFile f = io::GGUFFile::open(dir / name);
    EXPECT_EQ(f.get_string("tensorgrad.version"), TENSORGRAD_PROJECT_VERSION) << name;
    const std::string created = f.get_string("tensorgrad.created");
    std::tm utc{};
    const char* end = ::strptime(created.c_str(), "%Y-%m-%dT%H:%M:%SZ", &utc);
    ASSERT_TRUE(end && *end == '\0' && created.size() == 20) << name << ": '" << created << "' is not ISO 8601 UTC";
    const std::time_t written = ::timegm(&utc);
    EXPECT_GE(written, before) << created;
    EXPECT_LE(written, after) << created;
  }
  // Loading reads a file with them, and one without them (as written before they were added), alike.
  test_support::copy_gguf(dir / "m.gguf", dir / "bare.gguf", [](std::string& key, io::MetadataValue&) {
    return key != "tensorgrad.version" && key != "tensorgrad.created";
  });
  EXPECT_EQ(io::GGUFFile::open(dir / "bare.gguf").find("tensorgrad.version"), nullptr);
  for (const char* name : {"m.gguf", "bare.gguf"}) {
    EXPECT_TRUE(same_state(model->state_dict(), ag::load(dir / name)->state_dict())) << name;
    EXPECT_TRUE(same_state(model->state_dict(), ag::load_state_dict(dir / name))) << name;
  }
  EXPECT_TRUE(same_state(model->state_dict(), ag::load_state_dict(dir / "s.gguf", ag::kOptimizerStateKind)));
}

TEST(AgSave, LoadingDrawsNothingFromTheDefaultGenerator) {
  TempDir dir("tg_ag_save");
  ag::manual_seed(3);
  ag::save(*mlp(), dir / "mlp.gguf");
  ag::manual_seed(5);
  const float want = ag::rand(Shape{1}).item();
  ag::manual_seed(5);
  ag::load(dir / "mlp.gguf");
  EXPECT_EQ(ag::rand(Shape{1}).item(), want);
}

TEST(AgSave, ModuleWithBuffersRoundTripsThroughAFactory) {
  TempDir dir("tg_ag_save");
  ag::manual_seed(2);
  Scaled m;
  {
    ag::NoGradGuard no_grad;
    m.scale.copy_(ag::tensor({0.5f, -3.25f}, Shape{2}));
  }
  m.count.data().data<int64_t>()[0] = int64_t(1) << 40;
  ag::save(m, dir / "scaled.gguf");

  // A user's type is not registered: the message says what to do.
  EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::load(dir / "scaled.gguf"); },
                                               {"TestScaled", "factory", "register"}));

  ag::manual_seed(99);  // the factory's module starts from other weights
  std::shared_ptr<agnn::Module> loaded = ag::load(dir / "scaled.gguf", [] { return std::make_shared<Scaled>(); });
  EXPECT_TRUE(all_eval(*loaded));
  EXPECT_TRUE(same_state(m.state_dict(), loaded->state_dict()));
  const ag::Tensor count = loaded->state_dict().at("count");
  EXPECT_EQ(count.shape(), Shape{});
  EXPECT_EQ(count.dtype(), DType::Int64);
  EXPECT_EQ(count.data().data<int64_t>()[0], int64_t(1) << 40);
  m.eval();
  ag::Tensor x = ag::randn(Shape{4, 3});
  EXPECT_TRUE(test_support::bit_equal(m(x).data(), (*loaded)(x).data()));

  // Registered, the type needs no factory.
  agnn::register_module_type("TestScaled", [](const agnn::ModuleConfig&) { return std::make_shared<Scaled>(); });
  std::shared_ptr<agnn::Module> rebuilt = ag::load(dir / "scaled.gguf");
  EXPECT_TRUE(same_state(m.state_dict(), rebuilt->state_dict()));
}

TEST(AgSave, TheFactoryTakesPrecedence) {
  TempDir dir("tg_ag_save");
  ag::manual_seed(4);
  auto model = mlp();
  ag::save(*model, dir / "mlp.gguf");
  std::shared_ptr<agnn::Sequential> built;
  int calls = 0;
  auto loaded = ag::load(dir / "mlp.gguf", [&] {
    ++calls;
    built = mlp();
    return built;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(loaded.get(), built.get());
  EXPECT_TRUE(all_eval(*loaded));
  EXPECT_TRUE(same_state(model->state_dict(), loaded->state_dict()));

  // A factory of another architecture: the strict mismatch list, nothing loaded.
  auto other = std::make_shared<agnn::Sequential>(std::initializer_list<std::shared_ptr<agnn::Module>>{
      std::make_shared<agnn::Linear>(4, 3), std::make_shared<agnn::ReLU>()});
  const std::vector<float> before = other->state_dict().at("0.weight").to_vector();
  EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::load(dir / "mlp.gguf", [&] { return other; }); },
                                               {"mlp.gguf", "0.weight", "{3, 4}", "{8, 4}", "3.weight", "3.bias"}));
  EXPECT_EQ(other->state_dict().at("0.weight").to_vector(), before);
  EXPECT_TRUE(test_support::throws<ValueError>(
      [&] { ag::load(dir / "mlp.gguf", [] { return std::shared_ptr<agnn::Module>(); }); }, {"factory", "null"}));
}

TEST(AgSave, StateDictsOfOtherKinds) {
  TempDir dir("tg_ag_save");
  // An optimizer's state: moments by parameter name, an int64 scalar step,
  // a rank-5 tensor and an empty one (GGUF stores neither as such).
  agnn::StateDict opt;
  opt.insert("0.weight.exp_avg", ag::randn(Shape{8, 4}));
  opt.insert("step", ag::Tensor(tensorgrad::Tensor::full(Shape{}, 0.0f)));
  tensorgrad::Tensor step = tensorgrad::Tensor::zeros(Shape{}, DType::Int64);
  step.data<int64_t>()[0] = 12345678901;
  opt.insert("step64", ag::Tensor(step));
  opt.insert("five", ag::randn(Shape{1, 2, 1, 3, 2}));
  opt.insert("empty", ag::Tensor(tensorgrad::Tensor::zeros(Shape{0, 3}, DType::Int32)));
  std::vector<int32_t> ids = {1, -2, 3};
  opt.insert("ids", ag::tensor(std::span<const int32_t>(ids), Shape{3}));
  ag::save(opt, dir / "opt.gguf", ag::kOptimizerStateKind);
  const agnn::StateDict back = ag::load_state_dict(dir / "opt.gguf", ag::kOptimizerStateKind);
  EXPECT_TRUE(same_state(opt, back));
  EXPECT_EQ(back.at("empty").shape(), (Shape{0, 3}));
  EXPECT_EQ(back.at("five").shape(), (Shape{1, 2, 1, 3, 2}));

  // Read as another kind: FormatError naming the file's kind.
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load_state_dict(dir / "opt.gguf"); },
                                                {"'optimizer_state'", "not a tensorgrad state dict"}));
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load(dir / "opt.gguf"); }, {"'optimizer_state'"}));
  EXPECT_TRUE(test_support::throws<FormatError>(
      [&] { ag::load_state_dict(dir / "opt.gguf", ag::kSchedulerStateKind); }, {"not a tensorgrad scheduler state"}));

  // A module's state dict saved alone: loading needs a factory.
  ag::manual_seed(6);
  auto model = mlp();
  ag::save(model->state_dict(), dir / "sd.gguf");
  EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::load(dir / "sd.gguf"); }, {"without an architecture", "factory"}));
  EXPECT_TRUE(same_state(model->state_dict(), ag::load(dir / "sd.gguf", [] { return mlp(); })->state_dict()));

  EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::save(opt, dir / "x.gguf", "model"); }, {"'model'"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::save(opt, dir / "x.gguf", ""); }, {"kind", "empty"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}

TEST(AgSave, LongNamesSaveAndLoad) {
  TempDir dir("tg_ag_save");
  ag::manual_seed(8);
  auto model = mlp();
  ag::save(*model, dir / "m.gguf");
  const std::vector<uint8_t> before = read_bytes(dir / "m.gguf");

  const std::string long_key = "encoder.layers.0.attention.query_projection.weight.exp_avg_sq.xy";  // 64 bytes
  ASSERT_EQ(long_key.size(), 64u);
  agnn::StateDict dict;
  dict.insert("ok", ag::ones(Shape{2}));
  dict.insert(long_key, ag::ones(Shape{2}));
  ag::save(dict, dir / "d.gguf");
  EXPECT_TRUE(same_state(dict, ag::load_state_dict(dir / "d.gguf")));

  // A module whose dotted names grow past the limit by nesting.
  std::shared_ptr<agnn::Module> deep = std::make_shared<agnn::Linear>(2, 2);
  for (int i = 0; i < 40; ++i) deep = std::make_shared<agnn::Sequential>(std::initializer_list<std::shared_ptr<agnn::Module>>{deep});
  ag::save(*deep, dir / "deep.gguf");
  EXPECT_TRUE(same_state(deep->state_dict(), ag::load(dir / "deep.gguf")->state_dict()));
  EXPECT_EQ(read_bytes(dir / "m.gguf"), before);
  EXPECT_TRUE(same_state(model->state_dict(), ag::load(dir / "m.gguf")->state_dict()));
}

TEST(AgSave, BadFilesGiveTypedErrors) {
  TempDir dir("tg_ag_save");
  EXPECT_TRUE(test_support::throws<IOError>([&] { ag::load(dir / "missing.gguf"); }, {"missing.gguf"}));
  EXPECT_TRUE(test_support::throws<IOError>([&] { ag::load_state_dict(dir / "missing.gguf"); }, {"missing.gguf"}));

  {
    std::ofstream text(dir / "notes.txt");
    text << "these are not the weights you are looking for\n";
  }
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load(dir / "notes.txt"); },
                                                {"notes.txt", "not a tensorgrad state dict", "not a GGUF file"}));

  write_header_file(dir / "llama.gguf", "llama", "state_dict", 1);
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load(dir / "llama.gguf"); },
                                                {"not a tensorgrad state dict", "'llama'"}));

  // A foreign tensorgrad file: a Keras-style model file.
  write_header_file(dir / "model.gguf", "tensorgrad", "model", 1);
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load(dir / "model.gguf"); },
                                                {"'model'", "not a tensorgrad state dict", "io::load_model"}));

  // A version from the future.
  write_header_file(dir / "future.gguf", "tensorgrad", "state_dict", 2);
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load(dir / "future.gguf"); },
                                                {"unsupported version 2 (this build reads 1)"}));
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load_state_dict(dir / "future.gguf"); },
                                                {"unsupported version 2"}));

  // A tensorgrad header over an index that does not list the file's tensor.
  write_header_file(dir / "unlisted.gguf", "tensorgrad", "state_dict", 1);
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load_state_dict(dir / "unlisted.gguf"); }, {"'weight'"}));
}

TEST(AgSave, EveryPrefixOfAFileIsATypedError) {
  TempDir dir("tg_ag_save");
  ag::manual_seed(9);
  auto small = std::make_shared<agnn::Sequential>(std::initializer_list<std::shared_ptr<agnn::Module>>{
      std::make_shared<agnn::Linear>(2, 2), std::make_shared<agnn::Tanh>()});
  ag::save(*small, dir / "small.gguf");
  const std::vector<uint8_t> bytes = read_bytes(dir / "small.gguf");
  ASSERT_GT(bytes.size(), 100u);
  // The writer pads the file to the alignment after the last tensor: a
  // prefix that keeps every tensor's data whole is a complete file.
  uint64_t data_end = 0;
  for (const io::TensorInfo& t : io::GGUFFile::open(dir / "small.gguf").tensors())
    data_end = std::max(data_end, t.offset + t.nbytes);
  ASSERT_LE(data_end, bytes.size());
  const std::string cut = dir / "cut.gguf";
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(cut, bytes, n);
    try {
      std::shared_ptr<agnn::Module> m = ag::load(cut);
      if (n < data_end) ADD_FAILURE() << "a prefix of " << n << " of " << bytes.size() << " bytes loaded";
      else EXPECT_TRUE(same_state(small->state_dict(), m->state_dict())) << "prefix " << n;
    } catch (const FormatError& e) {
      if (n >= data_end) ADD_FAILURE() << "a complete prefix of " << n << " bytes: " << e.what();
    } catch (const IOError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "prefix " << n << ": " << typeid(e).name() << ": " << e.what();
    }
  }
  write_bytes(cut, bytes, bytes.size());
  EXPECT_TRUE(same_state(small->state_dict(), ag::load(cut)->state_dict()));
}
