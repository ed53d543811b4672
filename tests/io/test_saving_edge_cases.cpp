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
using namespace tensorgrad::nn;
using test_support::TempDir;
using test_support::ThreadsGuard;
using test_support::bit_equal;
using test_support::throws;
using test_support::uniform;

namespace {

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
TEST(SavingEdgeCases, MovedFromGGUFFileThrowsStateError) {
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
// bytes, then its weights' too: everything saves and loads (the long names
// under short stored ones, GGUFWriter::add_tensor).
TEST(SavingEdgeCases, LongLayerNamesSaveWithTheirOptimizerState) {
  TempDir dir;
  manual_seed(2);
  nn::clear_session();
  std::mt19937 rng(2);
  Sequential m = small_mlp();
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const std::string path = dir / "m.gguf";
  // 63 - len("/kernel") = 56: the weight names fit; the slots do not.
  m.layers()[0]->set_name(std::string(56, 'a'));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  m.fit(uniform({16, 4}, rng, -1, 1), uniform({16, 2}, rng, -1, 1), quiet(1));
  io::save_model(m, path);
  Model back = io::load_model(path);
  EXPECT_EQ(back.layers()[0]->name(), std::string(56, 'a'));
  for (size_t i = 0; i < m.weights().size(); ++i)
    EXPECT_TRUE(bit_equal(back.weights()[i].value, m.weights()[i].value)) << m.weights()[i].name;
  const nn::TrainingState a = m.training_state(), b = back.training_state();
  ASSERT_EQ(a.slots.size(), b.slots.size());
  for (size_t i = 0; i < a.slots.size(); ++i) {
    EXPECT_TRUE(bit_equal(a.slots[i].m, b.slots[i].m)) << a.slots[i].weight;
    EXPECT_TRUE(bit_equal(a.slots[i].v, b.slots[i].v)) << a.slots[i].weight;
  }
  // 57 bytes: the weight name is 64 bytes; saved and loaded by name.
  m.layers()[0]->set_name(std::string(57, 'b'));
  io::save_weights(m, dir / "w2.gguf");
  nn::clear_session();
  Sequential other = small_mlp();
  other.layers()[0]->set_name(std::string(57, 'b'));
  io::load_weights(other, dir / "w2.gguf");
  for (size_t i = 0; i < m.weights().size(); ++i)
    EXPECT_TRUE(bit_equal(other.weights()[i].value, m.weights()[i].value)) << m.weights()[i].name;
}

// Paths that are not files.
TEST(SavingEdgeCases, BadPaths) {
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
  const io::GGUFFile ro = io::GGUFFile::open(dir / "ro.gguf");  // not a temporary: tensors() refers into it
  for (const io::TensorInfo& t : ro.tensors())
    data_end = std::max(data_end, size_t(t.offset + t.nbytes));
  for (size_t cut : {size_t(0), size_t(3), size_t(20), whole.size() / 2, data_end - 1}) {
    { std::ofstream(dir / "cut.gguf", std::ios::binary) << whole.substr(0, cut); }
    EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "cut.gguf"); }, {"cut.gguf"})) << cut;
    EXPECT_TRUE(throws<FormatError>([&] { io::load_weights(m, dir / "cut.gguf"); }, {"cut.gguf"})) << cut;
  }
}

// Files of another kind or another program.
TEST(SavingEdgeCases, FilesOfAnotherKindOrProgramAreRefusedAndNamesPast63BytesRead) {
  TempDir dir;
  manual_seed(4);
  nn::clear_session();
  Sequential m = small_mlp();
  io::save_weights(m, dir / "w.gguf");
  const std::string msg = test_support::message_of<FormatError>([&] { io::load_model(dir / "w.gguf"); });
  EXPECT_NE(msg.find("weights"), std::string::npos) << msg;
  EXPECT_NE(msg.find("load_weights"), std::string::npos) << msg;  // says what to do
  io::GGUFWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.add_tensor("token_embd.weight", Tensor::zeros({8, 4}));
  w.write(dir / "llama.gguf");
  EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "llama.gguf"); }, {"llama"}));
  EXPECT_TRUE(throws<FormatError>([&] { io::load_weights(m, dir / "llama.gguf"); }, {"llama"}));
  // Names of exactly 63 and 64 bytes: the first stored as it is, the second under a short name.
  io::GGUFWriter names;
  names.add_tensor(std::string(63, 'n'), Tensor::zeros({2}));
  names.add_tensor(std::string(64, 'n'), Tensor::zeros({3}));
  names.write(dir / "names.gguf");
  const io::GGUFFile read_back = io::GGUFFile::open(dir / "names.gguf");
  EXPECT_EQ(read_back.read(std::string(63, 'n')).shape(), Shape({2}));
  EXPECT_EQ(read_back.read(std::string(64, 'n')).shape(), Shape({3}));
  EXPECT_EQ(read_back.find_tensor(std::string(63, 'n'))->stored_name, std::string(63, 'n'));
  EXPECT_EQ(read_back.find_tensor(std::string(64, 'n'))->stored_name.size(), 63u);
}

// One file loaded twice: two models that train independently, sharing no
// memory; a loaded model saved again gives the same tensors.
TEST(SavingEdgeCases, LoadedTwiceTrainIndependently) {
  ThreadsGuard threads;
  set_num_threads(1);
  TempDir dir;
  manual_seed(5);
  nn::clear_session();
  std::mt19937 rng(5);
  const SymbolicTensor ids = Input({5}, DType::Int32, "ids");
  const SymbolicTensor feats = Input({3}, DType::Float32, "feats");
  SymbolicTensor e = nn::Flatten()(nn::Embedding(10, 2)(ids));
  const SymbolicTensor inner_in = Input({13});
  Model inner(inner_in, nn::Dropout(0.2f)(nn::BatchNormalization()(Dense(4, "relu")(inner_in))), "inner");
  const SymbolicTensor h = inner(nn::Concatenate()({e, feats}));
  auto head = std::make_shared<Dense>(2);
  head->set_name("out");
  Model m({ids, feats}, {(*head)(h)}, "outer");
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  Tensor tok = Tensor::empty({16, 5}, DType::Int32);
  for (int64_t i = 0; i < tok.numel(); ++i) tok.data<int32_t>()[i] = int32_t(rng() % 10);
  const std::vector<Tensor> xs{tok, uniform({16, 3}, rng, -1, 1)};
  const std::vector<Tensor> ys{uniform({16, 2}, rng, -1, 1)};
  m.fit(xs, ys, quiet(1));
  io::save_model(m, dir / "m.gguf");
  Model a = io::load_model(dir / "m.gguf");
  Model b = io::load_model(dir / "m.gguf");
  for (size_t i = 0; i < a.weights().size(); ++i)
    EXPECT_NE(a.weights()[i].value.raw(), b.weights()[i].value.raw()) << a.weights()[i].name;
  a.fit(xs, ys, quiet(2));
  // b has not moved: it still predicts what m predicts.
  EXPECT_TRUE(bit_equal(b.predict(xs)[0], m.predict(xs)[0]));
  EXPECT_FALSE(bit_equal(a.predict(xs)[0], m.predict(xs)[0]));
  // b trains as m does.
  m.fit(xs, ys, quiet(2));
  b.fit(xs, ys, quiet(2));
  EXPECT_TRUE(bit_equal(b.predict(xs)[0], m.predict(xs)[0]));
  // Saved again, the same tensors.
  io::save_model(b, dir / "b.gguf");
  io::save_model(m, dir / "m2.gguf");
  const io::GGUFFile fb = io::GGUFFile::open(dir / "b.gguf"), fm = io::GGUFFile::open(dir / "m2.gguf");
  ASSERT_EQ(fb.tensors().size(), fm.tensors().size());
  for (const io::TensorInfo& t : fm.tensors()) {
    const auto x = fm.data(t.name), y = fb.data(t.name);
    EXPECT_TRUE(x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size()) == 0) << t.name;
  }
  EXPECT_EQ(fb.get_string("tensorgrad.model_config"), fm.get_string("tensorgrad.model_config"));
  // A model destroyed while the file is still open, and a file read after its model is gone.
  {
    Model c = io::load_model(dir / "m.gguf");
    io::GGUFFile f = io::GGUFFile::open(dir / "m.gguf");
    io::load_weights(c, dir / "m.gguf");
    c = io::load_model(dir / "b.gguf");
    EXPECT_EQ(f.read("out/kernel").shape(), Shape({4, 2}));
  }
  // A Trainer over a loaded model; evaluate.
  nn::TrainerOptions to;
  to.batch_size = 8;
  nn::Trainer t(b, to);
  const float l0 = t.step(std::vector<Tensor>{xs[0].rows(0, 8), xs[1].rows(0, 8)}, std::vector<Tensor>{ys[0].rows(0, 8)});
  EXPECT_TRUE(std::isfinite(l0));
  EXPECT_TRUE(std::isfinite(b.evaluate(std::span<const Tensor>(xs), std::span<const Tensor>(ys)).at("loss")));
}

// F16 / BF16 files: load, train, save again at F32.
TEST(SavingEdgeCases, HalfFilesTrainOn) {
  TempDir dir;
  manual_seed(6);
  nn::clear_session();
  std::mt19937 rng(6);
  Sequential m({6, 3});
  m.add(nn::GRU(4, true));
  m.add(nn::LSTM(3));
  m.add(Dense(2));
  m.compile(OptimizerSpec::sgd({.learning_rate = 0.05f, .momentum = 0.9f}), "mse");
  Tensor x = uniform({8, 6, 3}, rng, -1, 1), y = uniform({8, 2}, rng, -1, 1);
  m.fit(x, y, quiet(1));
  for (io::TensorType type : {io::TensorType::F16, io::TensorType::BF16}) {
    io::save_model(m, dir / "h.gguf", true, type);
    Sequential back = io::load_sequential(dir / "h.gguf");
    back.fit(x, y, quiet(1));
    io::save_model(back, dir / "f.gguf");
    Model again = io::load_model(dir / "f.gguf");
    EXPECT_TRUE(bit_equal(again.predict(x), back.predict(x)));
  }
  EXPECT_TRUE(throws<ValueError>([&] { io::save_model(m, dir / "i.gguf", true, io::TensorType::I32); }, {"I32"}));
}

namespace {
// A small trainer: 4 -> 8 relu -> dropout -> 2, Adam.
nn::Trainer small_trainer(int64_t batch, int64_t nbatch_logical = 0) {
  manual_seed(7);
  nn::clear_session();
  Sequential m({4});
  m.add(Dense(8, "relu"));
  m.add(nn::Dropout(0.25f));
  m.add(Dense(2));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  nn::TrainerOptions o;
  o.batch_size = batch;
  o.nbatch_logical = nbatch_logical;
  return nn::Trainer(m, o);
}

std::vector<float> steps(nn::Trainer& t, int first, int count, int64_t rows) {
  std::vector<float> losses;
  for (int i = first; i < first + count; ++i) {
    std::mt19937 rng(100u + uint32_t(i));
    losses.push_back(t.step(uniform({rows, 4}, rng, -1, 1), uniform({rows, 2}, rng, -1, 1)));
  }
  return losses;
}
}  // namespace

// Trainer checkpoints across trainers: one saved before any step loaded into
// one that stepped; other batch sizes; loading twice; after free().
TEST(SavingEdgeCases, TrainerCheckpointsAcrossTrainers) {
  ThreadsGuard threads;
  set_num_threads(1);
  TempDir dir;
  nn::Trainer fresh = small_trainer(8);
  io::save_checkpoint(fresh, dir / "fresh.gguf");  // no step yet
  const std::vector<float> want = steps(fresh, 0, 5, 8);
  nn::Trainer stepped = small_trainer(8);
  steps(stepped, 50, 3, 8);
  io::load_checkpoint(stepped, dir / "fresh.gguf");
  io::load_checkpoint(stepped, dir / "fresh.gguf");  // twice: the same
  EXPECT_EQ(stepped.n_steps(), 0);
  EXPECT_EQ(steps(stepped, 0, 5, 8), want);
  // Another batch size (no accumulation): weights and moments carry over.
  io::save_checkpoint(fresh, dir / "five.gguf");
  nn::Trainer wide = small_trainer(16);
  io::load_checkpoint(wide, dir / "five.gguf");
  EXPECT_EQ(wide.n_steps(), 5);
  for (size_t i = 0; i < wide.weights().size(); ++i)
    EXPECT_TRUE(bit_equal(wide.weights()[i].value, fresh.weights()[i].value)) << i;
  steps(wide, 5, 2, 16);
  // Accumulation: a window left open refuses a shorter period.
  nn::Trainer acc = small_trainer(8, 24);
  steps(acc, 0, 4, 8);
  io::save_checkpoint(acc, dir / "acc.gguf");
  nn::Trainer plain = small_trainer(8);
  EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(plain, dir / "acc.gguf"); }, {"nbatch_logical"}));
  // Into a trainer of another model.
  manual_seed(7);
  nn::clear_session();
  Sequential other({4});
  other.add(Dense(9, "relu"));
  other.add(Dense(2));
  other.compile(OptimizerSpec::adam(1e-2f), "mse");
  nn::Trainer ot(other, {});
  EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(ot, dir / "fresh.gguf"); }, {"dense/kernel"}));
  // A checkpoint into load_model and load_weights.
  Model from_ckpt = io::load_model(dir / "five.gguf");
  EXPECT_TRUE(from_ckpt.compiled());
  // After free().
  fresh.free();
  EXPECT_TRUE(throws<StateError>([&] { io::load_checkpoint(fresh, dir / "five.gguf"); }, {"free()"}));
  EXPECT_TRUE(throws<StateError>([&] { io::save_checkpoint(fresh, dir / "x.gguf"); }, {"free()"}));
  // A freed model.
  Model m = io::load_model(dir / "five.gguf");
  m.free();
  EXPECT_TRUE(throws<StateError>([&] { io::save_model(m, dir / "x.gguf"); }, {"free()"}));
  EXPECT_TRUE(throws<StateError>([&] { io::load_weights(m, dir / "five.gguf"); }, {"free()"}));
  EXPECT_TRUE(throws<StateError>([&] { io::load_checkpoint(m, dir / "five.gguf"); }, {"free()"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}

namespace {
// Sets logs["val_loss"] to values[epoch] (a callback placed first).
std::shared_ptr<nn::LambdaCallback> scripted_val_loss(std::vector<double> values) {
  auto cb = std::make_shared<nn::LambdaCallback>();
  cb->on_epoch_end_fn = [values](int epoch, nn::Logs& logs) { logs["val_loss"] = values.at(size_t(epoch)); };
  return cb;
}
Sequential fit_model() {
  manual_seed(8);
  nn::clear_session();
  Sequential m = small_mlp();
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  return m;
}
}  // namespace

// save_best_only after a NaN epoch: the NaN is not a best, and later epochs
// that improve are saved (Keras starts from +inf: NaN never improves).
TEST(SavingEdgeCases, ModelCheckpointBestOnlySurvivesANaNEpoch) {
  TempDir dir;
  std::mt19937 rng(9);
  const Tensor x = uniform({16, 4}, rng, -1, 1), y = uniform({16, 2}, rng, -1, 1);
  Sequential m = fit_model();
  auto best = std::make_shared<io::ModelCheckpoint>(dir / "m{epoch}.gguf", "val_loss", 0, true, true);
  nn::FitOptions o = quiet(3);
  o.callbacks = {scripted_val_loss({std::nan(""), 0.5, 0.3}), best};
  m.fit(x, y, o);
  EXPECT_FALSE(std::filesystem::exists(dir / "m1.gguf"));
  EXPECT_TRUE(std::filesystem::exists(dir / "m2.gguf"));
  EXPECT_TRUE(std::filesystem::exists(dir / "m3.gguf"));
  EXPECT_EQ(best->best(), 0.3);
}

// A ModelCheckpoint(save_best_only) placed after BackupAndRestore keeps
// state once it has a best: the fit refuses it before training, not at the
// end of a later epoch.
TEST(SavingEdgeCases, StatefulCallbackAfterBackupIsRefusedBeforeTraining) {
  TempDir dir;
  std::mt19937 rng(10);
  const Tensor x = uniform({16, 4}, rng, -1, 1), y = uniform({16, 2}, rng, -1, 1);
  Sequential m = fit_model();
  const std::vector<float> before = m.weights()[0].value.to_vector();
  auto best = std::make_shared<io::ModelCheckpoint>(dir / "best.gguf", "val_loss", 0, true);
  nn::FitOptions o = quiet(3);
  o.callbacks = {scripted_val_loss({1.0, 0.5, 0.3}), std::make_shared<io::BackupAndRestore>(dir / "backup"), best};
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, y, o); }, {"ModelCheckpoint", "after BackupAndRestore"}));
  EXPECT_EQ(m.weights()[0].value.to_vector(), before);  // refused before any epoch
}

// BackupAndRestore resumed with fewer epochs than the backup has done; a
// backup folder whose parent is a file; a backup of another model.
TEST(SavingEdgeCases, BackupAndRestoreEdges) {
  TempDir dir;
  std::mt19937 rng(11);
  const Tensor x = uniform({16, 4}, rng, -1, 1), y = uniform({16, 2}, rng, -1, 1);
  {
    Sequential m = fit_model();
    auto keep = std::make_shared<io::BackupAndRestore>(dir / "k", "epoch", false);
    nn::FitOptions o = quiet(3);
    o.callbacks = {keep};
    m.fit(x, y, o);
    Sequential again = fit_model();
    nn::FitOptions fewer = quiet(2);
    fewer.callbacks = {keep};
    const nn::History h = again.fit(x, y, fewer);
    EXPECT_TRUE(h.epoch.empty());
    // The restored model is the 3-epoch one.
    EXPECT_EQ(again.weights()[0].value.to_vector(), m.weights()[0].value.to_vector());
    // Another model over the same backup: refused, saying what to do.
    manual_seed(8);
    nn::clear_session();
    Sequential other({4});
    other.add(Dense(7));
    other.add(Dense(2));
    other.compile(OptimizerSpec::adam(1e-2f), "mse");
    const std::string msg = test_support::message_of<ValueError>([&] { other.fit(x, y, fewer); });
    EXPECT_NE(msg.find(keep->backup_path()), std::string::npos) << msg;
    EXPECT_NE(msg.find("delete"), std::string::npos) << msg;
  }
  {
    { std::ofstream(dir / "plain") << "x"; }
    Sequential m = fit_model();
    nn::FitOptions o = quiet(2);
    o.callbacks = {std::make_shared<io::BackupAndRestore>(dir / "plain/b")};
    EXPECT_TRUE(throws<IOError>([&] { m.fit(x, y, o); }, {"plain"}));
    auto cp = std::make_shared<io::ModelCheckpoint>(dir / "plain/m.gguf", "loss");
    o.callbacks = {cp};
    EXPECT_TRUE(throws<IOError>([&] { m.fit(x, y, o); }, {"plain"}));
  }
}

// Layer names a user may give: two layers of one name are refused when
// saved, naming the name and saying what to do (their weights would share
// one name in the file); an empty name saves and loads.
TEST(SavingEdgeCases, DuplicateAndEmptyLayerNames) {
  TempDir dir;
  manual_seed(12);
  nn::clear_session();
  std::mt19937 rng(12);
  const Tensor x = uniform({8, 4}, rng, -1, 1);
  Sequential m = small_mlp();
  m.layers()[0]->set_name("same");
  m.layers()[1]->set_name("same");
  io::save_weights(small_mlp(), dir / "dup.gguf");
  const std::string before = read_all(dir / "dup.gguf");
  EXPECT_TRUE(throws<ValueError>([&] { io::save_model(m, dir / "dup.gguf"); }, {"'same'", "set_name"}));
  EXPECT_TRUE(throws<ValueError>([&] { io::save_weights(m, dir / "dup.gguf"); }, {"'same'", "set_name"}));
  EXPECT_EQ(read_all(dir / "dup.gguf"), before);
  m.layers()[0]->set_name("");
  io::save_model(m, dir / "empty.gguf");
  Model back = io::load_model(dir / "empty.gguf");
  EXPECT_TRUE(bit_equal(back.predict(x), m.predict(x)));
}
