// Checkpoints of fit: the callbacks' state (Callback::get_state/set_state),
// model-level checkpoints with callback states (io::save_checkpoint of a
// Model), io::BackupAndRestore and io::ModelCheckpoint, and the exact resume
// of an interrupted fit in a new process (fit_resume_child, started with
// posix_spawn) against the uninterrupted run.
#include <gtest/gtest.h>

#include "fit_resume_setup.h"
#include "test_files.h"
#include "test_support.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

extern char** environ;

using namespace tensorgrad;
using nn::CallbackState;
using nn::Logs;
using test_support::TempDir;
using test_support::same_files;
using test_support::ThreadsGuard;
using test_support::throws;

namespace {

// A one-weight-pair model the scripted callbacks act on.
struct Tiny {
  nn::Sequential model{Shape{2}};
  Tiny() {
    nn::clear_session();
    manual_seed(1);
    model.add(nn::Dense(1));
    model.compile(OptimizerSpec::sgd(0.1f), "mse");
  }
  // Every weight set to `v` (the "training" of a scripted epoch).
  void set_all(float v) {
    for (const nn::Weight& w : model.weights()) {
      Tensor t = w.value;
      t.fill(v);
    }
  }
  float first_weight() const { return model.weights()[0].value.to_vector()[0]; }
};

// One line per epoch: the epoch, stop flag, the logs' learning rate and the
// model's learning rate after the hook.
struct Trace {
  std::vector<std::string> lines;
  void add(int epoch, const Tiny& t, const Logs& logs) {
    std::ostringstream s;
    s << epoch << " stop=" << t.model.stop_training() << " lr_log="
      << (logs.count("learning_rate") ? logs.at("learning_rate") : -1.0) << " lr=" << t.model.learning_rate();
    lines.push_back(s.str());
  }
};

// Runs on_epoch_end for epochs [from, to) on scripted val_loss values, the
// weights set to the epoch number first; stops where the callback stops.
void drive(nn::Callback& cb, Tiny& t, const std::vector<double>& val_loss, int from, int to, Trace& trace) {
  for (int e = from; e < to && !t.model.stop_training(); ++e) {
    t.set_all(float(e));
    Logs logs{{"val_loss", val_loss[size_t(e)]}};
    cb.on_epoch_end(e, logs);
    trace.add(e, t, logs);
  }
}

::testing::AssertionResult same_values(const CallbackState& a, const CallbackState& b) {
  if (a.values != b.values) return ::testing::AssertionFailure() << "values differ";
  if (a.tensors.size() != b.tensors.size()) return ::testing::AssertionFailure() << "tensor counts differ";
  for (size_t i = 0; i < a.tensors.size(); ++i)
    if (a.tensors[i].first != b.tensors[i].first || a.tensors[i].second.to_vector() != b.tensors[i].second.to_vector())
      return ::testing::AssertionFailure() << "tensor " << a.tensors[i].first << " differs";
  return ::testing::AssertionSuccess();
}

// n bytes equal; no pointer is read when n is 0 (an empty vector's may be null).
std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

std::vector<std::string> loss_lines(const nn::History& h) {
  TempDir d;
  fit_resume::write_losses(d / "l.txt", h);
  return lines_of(d / "l.txt");
}

// Throws after on_epoch_end of `epoch`: a crash after the backup was written.
struct Crash : nn::Callback {
  int epoch;
  explicit Crash(int e) : epoch(e) {}
  void on_epoch_end(int e, Logs&) override {
    if (e == epoch) throw std::runtime_error("simulated crash");
  }
};

}  // namespace

// ---- callback state ----

namespace {
// A callback run whole over the scripted epochs, and split: one runs epochs
// [0, cut), and its state goes to a new one (on_train_begin first, as in a
// new process) that runs the rest on another model.
template <class C>
struct Split {
  Tiny whole_model, split_model;
  Trace whole, parts;
  C a, c;
  CallbackState saved;
  Split(const std::function<C()>& make, const std::vector<double>& val, int cut) : a(make()), c(make()) {
    const int n = int(val.size());
    Logs none;
    a.set_model(&whole_model.model);
    a.on_train_begin(none);
    drive(a, whole_model, val, 0, n, whole);
    a.on_train_end(none);
    C b = make();
    b.set_model(&split_model.model);
    b.on_train_begin(none);
    drive(b, split_model, val, 0, cut, parts);
    saved = b.get_state();
    b.set_model(nullptr);
    c.set_model(&split_model.model);
    c.on_train_begin(none);
    c.set_state(saved);
    drive(c, split_model, val, cut, n, parts);
    c.on_train_end(none);
  }
  ~Split() {
    a.set_model(nullptr);
    c.set_model(nullptr);
  }
};
}  // namespace

TEST(CallbackState, EarlyStoppingResumesAsTheUninterruptedOne) {
  // patience 2: best at epochs 0, 1, 3 (0.7); 4 and 5 do not improve, so it
  // stops at epoch 5 and puts back the weights of epoch 3. Split after 4.
  Split<nn::EarlyStopping> s(
      [] { return nn::EarlyStopping("val_loss", 0.0, 2, nn::MonitorMode::Auto, std::nullopt, true); },
      {1.0, 0.8, 0.85, 0.7, 0.75, 0.74, 0.6, 0.5}, 5);
  EXPECT_EQ(s.saved.values.at("wait"), 1.0);
  EXPECT_EQ(s.saved.values.at("best"), 0.7);
  EXPECT_EQ(s.saved.values.at("best_epoch"), 3.0);
  EXPECT_EQ(s.saved.values.at("stopped_epoch"), 0.0);
  ASSERT_EQ(s.saved.tensors.size(), 2u);  // kernel and bias of epoch 3
  EXPECT_EQ(s.saved.tensors[0].first, "best_weights/0");
  EXPECT_EQ(s.saved.tensors[1].second.to_vector(), std::vector<float>{3.0f});

  EXPECT_EQ(s.parts.lines, s.whole.lines);
  EXPECT_EQ(s.whole.lines.size(), 6u);
  EXPECT_EQ(s.a.stopped_epoch(), 5);
  EXPECT_EQ(s.c.stopped_epoch(), 5);
  EXPECT_EQ(s.c.best_epoch(), 3);
  EXPECT_EQ(s.whole_model.first_weight(), 3.0f);
  EXPECT_EQ(s.split_model.first_weight(), 3.0f);
  EXPECT_TRUE(same_values(s.a.get_state(), s.c.get_state()));
}

TEST(CallbackState, ReduceLROnPlateauResumesInItsCooldown) {
  // patience 1, cooldown 2, factor 0.5 from 0.1: reduced after epochs 1, 3
  // and 5 (epoch 4 improves); split after epoch 2, inside the cooldown.
  Split<nn::ReduceLROnPlateau> s([] { return nn::ReduceLROnPlateau("val_loss", 0.5, 1, nn::MonitorMode::Auto, 0.01, 2); },
                                 {1.0, 1.0, 1.0, 1.0, 0.5, 0.6}, 3);
  EXPECT_EQ(s.saved.values.at("cooldown_counter"), 1.0);
  EXPECT_EQ(s.saved.values.at("wait"), 0.0);
  EXPECT_EQ(s.saved.values.at("best"), 1.0);
  EXPECT_EQ(s.parts.lines, s.whole.lines);
  EXPECT_FLOAT_EQ(float(s.split_model.model.learning_rate()), 0.0125f);
  EXPECT_TRUE(same_values(s.a.get_state(), s.c.get_state()));
}

TEST(CallbackState, PlotHistoryKeepsTheCurvesSoFar) {
  TempDir d;
  nn::PlotHistory a(d / "a.png");
  Logs none;
  a.on_train_begin(none);
  for (int e = 0; e < 3; ++e) {
    Logs logs{{"loss", 1.0 / (e + 1)}, {"val_loss", 2.0 / (e + 1)}};
    a.on_epoch_end(e, logs);
  }
  const CallbackState s = a.get_state();
  EXPECT_EQ(s.values.at("loss/2"), 1.0 / 3);
  EXPECT_EQ(s.values.at("epoch/1"), 1.0);
  nn::PlotHistory b(d / "b.png");
  b.on_train_begin(none);
  b.set_state(s);
  EXPECT_TRUE(same_values(b.get_state(), s));
  EXPECT_TRUE(throws<ValueError>([&] { b.set_state({{{"loss/x", 1.0}}, {}}); }, {"PlotHistory", "loss/x"}));
  EXPECT_TRUE(throws<ValueError>([&] { b.set_state({{{"loss/1", 1.0}}, {}}); }, {"PlotHistory", "loss/0"}));
}

TEST(CallbackState, MalformedStatesAreRefusedNamingCallbackAndKey) {
  nn::EarlyStopping es("val_loss", 0.0, 3);
  const CallbackState good = es.get_state();
  CallbackState missing = good;
  missing.values.erase("wait");
  EXPECT_TRUE(throws<ValueError>([&] { es.set_state(missing); }, {"EarlyStopping", "'wait'"}));
  CallbackState unknown = good;
  unknown.values["patience"] = 3;
  EXPECT_TRUE(throws<ValueError>([&] { es.set_state(unknown); }, {"EarlyStopping", "unknown key 'patience'"}));
  CallbackState negative = good;
  negative.values["best_epoch"] = -1;
  EXPECT_TRUE(throws<ValueError>([&] { es.set_state(negative); }, {"EarlyStopping", "'best_epoch'", ">= 0"}));
  CallbackState fraction = good;
  fraction.values["wait"] = 1.5;
  EXPECT_TRUE(throws<ValueError>([&] { es.set_state(fraction); }, {"'wait'", "whole number"}));
  CallbackState tensors = good;
  tensors.tensors.emplace_back("best_weights/0", Tensor::zeros({2}));
  EXPECT_TRUE(throws<ValueError>([&] { es.set_state(tensors); }, {"EarlyStopping", "tensors"}));  // no restore_best_weights
  nn::EarlyStopping restoring("val_loss", 0.0, 3, nn::MonitorMode::Auto, std::nullopt, true);
  CallbackState misnamed = good;
  misnamed.tensors.emplace_back("weights/0", Tensor::zeros({2}));
  EXPECT_TRUE(throws<ValueError>([&] { restoring.set_state(misnamed); }, {"EarlyStopping", "'weights/0'", "best_weights/0"}));
  EXPECT_TRUE(same_values(es.get_state(), good));  // nothing changed

  nn::ReduceLROnPlateau rl("val_loss", 0.5, 2, nn::MonitorMode::Auto, 1e-4, 1);
  CallbackState cool = rl.get_state();
  cool.values["cooldown_counter"] = 2;
  EXPECT_TRUE(throws<ValueError>([&] { rl.set_state(cool); }, {"ReduceLROnPlateau", "'cooldown_counter'", "cooldown 1"}));
  CallbackState no_best = rl.get_state();
  no_best.values.erase("best");
  EXPECT_TRUE(throws<ValueError>([&] { rl.set_state(no_best); }, {"ReduceLROnPlateau", "'best'"}));
}

// ---- model-level checkpoints ----

TEST(ModelCheckpointFile, RoundTripsTrainingStateEpochAndCallbackStates) {
  ThreadsGuard threads;
  TempDir dir;
  const std::string path = dir / "ckpt.gguf";
  fit_resume::Setup a;
  a.model.fit(a.x, a.y, a.options(4, {}));
  io::save_checkpoint(a.model, path, 4, a.kept());
  {
    const io::GGUFFile f = io::GGUFFile::open(path);
    EXPECT_EQ(f.get_string("tensorgrad.file_kind"), "checkpoint");
    EXPECT_EQ(f.get_i64("tensorgrad.fit.initial_epoch"), 4);
    EXPECT_EQ(f.get_string_array("tensorgrad.callbacks.types"),
              (std::vector<std::string>{"EarlyStopping", "ReduceLROnPlateau"}));
    EXPECT_EQ(f.get_f64("tensorgrad.callbacks.1.ReduceLROnPlateau.value.cooldown_counter"),
              a.reduce_lr->get_state().values.at("cooldown_counter"));
    EXPECT_NE(f.find_tensor("callbacks/0/3"), nullptr);  // the best weights: 2 kernels, 2 biases
    EXPECT_EQ(f.get_string_array("tensorgrad.callbacks.0.EarlyStopping.tensor_names")[3], "best_weights/3");
  }

  fit_resume::Setup b;  // another model of the same architecture, untrained
  Logs none;
  b.early_stopping->on_train_begin(none);
  EXPECT_EQ(io::load_checkpoint(b.model, path, b.kept()), 4);
  for (size_t i = 0; i < a.model.weights().size(); ++i)
    EXPECT_EQ(a.model.weights()[i].value.to_vector(), b.model.weights()[i].value.to_vector());
  EXPECT_EQ(a.model.learning_rate(), b.model.learning_rate());
  EXPECT_TRUE(same_values(a.early_stopping->get_state(), b.early_stopping->get_state()));
  EXPECT_TRUE(same_values(a.reduce_lr->get_state(), b.reduce_lr->get_state()));
  // Saved again, the state gives the same file.
  io::save_checkpoint(b.model, dir / "again.gguf", 4, b.kept());
  EXPECT_TRUE(same_files(path, dir / "again.gguf"));
  // Weights alone read past the callbacks' tensors.
  fit_resume::Setup c;
  io::load_weights(c.model, path);
  EXPECT_EQ(a.model.weights()[0].value.to_vector(), c.model.weights()[0].value.to_vector());
}

TEST(ModelCheckpointFile, OtherCallbacksOrUncompiledModelsAreRefusedAndNothingChanges) {
  ThreadsGuard threads;
  TempDir dir;
  fit_resume::Setup a;
  a.model.fit(a.x, a.y, a.options(2, {}));
  io::save_checkpoint(a.model, dir / "c.gguf", 2, a.kept());
  fit_resume::Setup b;
  const std::vector<float> before = b.model.weights()[0].value.to_vector();
  const CallbackState es_before = b.early_stopping->get_state();
  EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(b.model, dir / "c.gguf", {b.reduce_lr.get(), b.early_stopping.get()}); },
                                 {"[EarlyStopping, ReduceLROnPlateau]", "[ReduceLROnPlateau, EarlyStopping]", "same order"}));
  EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(b.model, dir / "c.gguf"); }, {"[]"}));
  // A state the callback refuses: EarlyStopping without restore_best_weights gets tensors.
  auto plain = std::make_shared<nn::EarlyStopping>("val_loss", 0.0, 1000);
  EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(b.model, dir / "c.gguf", {plain.get(), b.reduce_lr.get()}); },
                                 {"EarlyStopping", "tensors"}));
  EXPECT_EQ(b.model.weights()[0].value.to_vector(), before);
  EXPECT_TRUE(same_values(b.early_stopping->get_state(), es_before));
  EXPECT_TRUE(same_values(b.reduce_lr->get_state(), fit_resume::Setup().reduce_lr->get_state()));

  nn::clear_session();
  nn::Sequential raw{Shape{6}};
  raw.add(nn::Dense(16, "relu"));
  raw.add(nn::Dropout(0.3f));
  raw.add(nn::Dense(3, "softmax"));
  EXPECT_TRUE(throws<StateError>([&] { io::load_checkpoint(raw, dir / "c.gguf"); }, {"not compiled"}));
  EXPECT_TRUE(throws<StateError>([&] { io::save_checkpoint(raw, dir / "u.gguf"); }, {"not compiled"}));
  EXPECT_TRUE(throws<ValueError>([&] { io::save_checkpoint(a.model, dir / "u.gguf", -1); }, {"initial_epoch", "-1"}));
  raw.compile(OptimizerSpec::sgd(0.1f), "sparse_categorical_crossentropy");
  EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(raw, dir / "c.gguf"); }, {"AdamW", "SGD"}));
}

// ---- callback names in checkpoints ----

namespace {

// A user's callback that counts epochs, named "EpochCounter" by type()
// (files written before Callback::type() named it by its class,
// "CountingCallback").
struct CountingCallback : nn::Callback {
  double count = 0;
  const char* type() const override { return "EpochCounter"; }
  void on_epoch_end(int, Logs&) override { ++count; }
  CallbackState get_state() const override { return {{{"count", count}}, {}}; }
  void set_state(const CallbackState& s) override { count = s.values.at("count"); }
};
// The same without a type(): "Callback" (Keras' base class).
struct UnnamedCounter : nn::Callback {
  double count = 0;
  CallbackState get_state() const override { return {{{"count", count}}, {}}; }
  void set_state(const CallbackState& s) override { count = s.values.at("count"); }
};
// A user's subclass of a built-in keeps the built-in's name.
struct PatientStopping : nn::EarlyStopping {
  PatientStopping() : nn::EarlyStopping("val_loss", 0.0, 1000, nn::MonitorMode::Auto, std::nullopt, true) {}
};

// The callbacks of a fit_resume::Setup's checkpoint in these tests: a
// PatientStopping that has run with the fit, the Setup's ReduceLROnPlateau,
// and the two counters at 5 and 7.
struct NamedCallbacks {
  fit_resume::Setup setup;
  std::shared_ptr<PatientStopping> patient = std::make_shared<PatientStopping>();
  CountingCallback counter;
  UnnamedCounter unnamed;
  std::vector<nn::Callback*> all() { return {patient.get(), setup.reduce_lr.get(), &counter, &unnamed}; }
  // Two epochs of training, the counters set, and a checkpoint of them at `path`.
  void save(const std::string& path) {
    setup.model.fit(setup.x, setup.y, setup.options(2, {patient}));
    counter.count = 5;
    unnamed.count = 7;
    io::save_checkpoint(setup.model, path, 2, all());
  }
};

}  // namespace

TEST(CallbackTypes, CheckpointsNameCallbacksByTypeNotByClass) {
  ThreadsGuard threads;
  TempDir dir;
  NamedCallbacks a;
  a.save(dir / "c.gguf");
  const io::GGUFFile f = io::GGUFFile::open(dir / "c.gguf");
  EXPECT_EQ(f.get_string_array("tensorgrad.callbacks.types"),
            (std::vector<std::string>{"EarlyStopping", "ReduceLROnPlateau", "EpochCounter", "Callback"}));
  EXPECT_EQ(f.get_f64("tensorgrad.callbacks.2.EpochCounter.value.count"), 5.0);
  EXPECT_EQ(f.get_f64("tensorgrad.callbacks.3.Callback.value.count"), 7.0);
  EXPECT_NE(f.find("tensorgrad.callbacks.0.EarlyStopping.value.wait"), nullptr);
  // A type() a checkpoint cannot name the callback by is refused.
  struct Nameless : nn::Callback {
    const char* type() const override { return ""; }
  } nameless;
  EXPECT_TRUE(throws<ValueError>([&] { io::save_checkpoint(a.setup.model, dir / "n.gguf", 2, {&nameless}); },
                                 {"Nameless", "type() returned an empty name"}));
}

TEST(CallbackTypes, BuiltInCallbacksAreNamedAsKerasNamesThem) {
  TempDir dir;
  const std::vector<std::pair<std::shared_ptr<nn::Callback>, std::string>> built_in = {
      {std::make_shared<nn::EarlyStopping>(), "EarlyStopping"},
      {std::make_shared<nn::ReduceLROnPlateau>(), "ReduceLROnPlateau"},
      {std::make_shared<nn::LearningRateScheduler>([](int, double lr) { return lr; }), "LearningRateScheduler"},
      {std::make_shared<nn::TerminateOnNaN>(), "TerminateOnNaN"},
      {std::make_shared<nn::CSVLogger>(dir / "log.csv"), "CSVLogger"},
      {std::make_shared<nn::LambdaCallback>(), "LambdaCallback"},
      {std::make_shared<nn::ProgbarLogger>(), "ProgbarLogger"},
      {std::make_shared<nn::History>(), "History"},
      {std::make_shared<nn::PlotHistory>(dir / "h.png"), "PlotHistory"},  // tensorgrad's own
      {std::make_shared<io::BackupAndRestore>(dir / "backup"), "BackupAndRestore"},
      {std::make_shared<io::ModelCheckpoint>(dir / "m.gguf"), "ModelCheckpoint"},
  };
  for (const auto& [callback, name] : built_in) EXPECT_STREQ(callback->type(), name.c_str());
}

TEST(CallbackTypes, CheckpointsThatNamedCallbacksByClassStillLoad) {
  ThreadsGuard threads;
  TempDir dir;
  NamedCallbacks a;
  a.save(dir / "new.gguf");
  // The file as tensorgrad wrote it before Callback::type(): each callback
  // named by its class without namespaces (what GCC's and Clang's demangled
  // typeid gave), in the types list and in its keys.
  const std::vector<std::string> by_class = {"PatientStopping", "ReduceLROnPlateau", "CountingCallback",
                                             "UnnamedCounter"};
  test_support::copy_gguf(dir / "new.gguf", dir / "old.gguf", [&](std::string& key, io::MetadataValue& value) {
    if (key == "tensorgrad.callbacks.types") value.strings = by_class;
    const std::string prefix = "tensorgrad.callbacks.";
    if (key.rfind(prefix, 0) == 0 && key != "tensorgrad.callbacks.types") {
      const size_t index_end = key.find('.', prefix.size()), type_end = key.find('.', index_end + 1);
      const size_t i = std::stoul(key.substr(prefix.size(), index_end - prefix.size()));
      key = key.substr(0, index_end + 1) + by_class.at(i) + key.substr(type_end);
    }
    return true;
  });
  {
    const io::GGUFFile old = io::GGUFFile::open(dir / "old.gguf");
    EXPECT_EQ(old.get_string_array("tensorgrad.callbacks.types"), by_class);
    EXPECT_EQ(old.get_f64("tensorgrad.callbacks.2.CountingCallback.value.count"), 5.0);
    EXPECT_EQ(old.find("tensorgrad.callbacks.2.EpochCounter.value.count"), nullptr);
  }

  NamedCallbacks b;
  Logs none;
  b.patient->on_train_begin(none);
  EXPECT_EQ(io::load_checkpoint(b.setup.model, dir / "old.gguf", b.all()), 2);
  EXPECT_EQ(b.counter.count, 5.0);
  EXPECT_EQ(b.unnamed.count, 7.0);
  EXPECT_TRUE(same_values(b.patient->get_state(), a.patient->get_state()));
  EXPECT_TRUE(same_values(b.setup.reduce_lr->get_state(), a.setup.reduce_lr->get_state()));
  EXPECT_EQ(a.setup.model.weights()[0].value.to_vector(), b.setup.model.weights()[0].value.to_vector());

  // A class name stands for its own class only: the counters swapped are refused.
  NamedCallbacks c;
  c.patient->on_train_begin(none);
  EXPECT_TRUE(throws<ValueError>(
      [&] { io::load_checkpoint(c.setup.model, dir / "old.gguf", {c.patient.get(), c.setup.reduce_lr.get(), &c.unnamed, &c.counter}); },
      {"[PatientStopping, ReduceLROnPlateau, CountingCallback, UnnamedCounter]", "same order"}));
  EXPECT_EQ(c.unnamed.count, 0.0);
}

// ---- BackupAndRestore ----

namespace {
constexpr int kTotal = fit_resume::kFirst + fit_resume::kMore;

// The fit of fit_resume_setup.h run whole: its per-epoch loss lines, its
// final checkpoint written to `checkpoint`.
std::vector<std::string> uninterrupted_run(const std::string& checkpoint) {
  fit_resume::Setup whole;
  const nn::History h = whole.model.fit(whole.x, whole.y, whole.options(kTotal, {}));
  io::save_checkpoint(whole.model, checkpoint, kTotal, whole.kept());
  EXPECT_LT(h["learning_rate"].back(), 0.01);  // the plateau rule acted
  return loss_lines(h);
}
}  // namespace

TEST(BackupAndRestore, ResumesACrashedFitAsTheUninterruptedOne) {
  ThreadsGuard threads;
  TempDir dir;
  const int total = kTotal;
  const std::vector<std::string> all = uninterrupted_run(dir / "whole.gguf");
  const std::string backup_dir = dir / "backup";
  {
    fit_resume::Setup first;
    auto backup = std::make_shared<io::BackupAndRestore>(backup_dir);
    EXPECT_THROW(first.model.fit(first.x, first.y,
                                 first.options(total, {backup, std::make_shared<Crash>(fit_resume::kFirst - 1)})),
                 std::runtime_error);
    ASSERT_TRUE(std::filesystem::exists(backup->backup_path()));  // kept: the fit did not end
    EXPECT_EQ(io::GGUFFile::open(backup->backup_path()).get_i64("tensorgrad.fit.initial_epoch"), fit_resume::kFirst);
  }
  fit_resume::Setup resumed;
  auto backup = std::make_shared<io::BackupAndRestore>(backup_dir);
  const nn::History h = resumed.model.fit(resumed.x, resumed.y, resumed.options(total, {backup}));
  std::vector<int> epochs;
  for (int e = fit_resume::kFirst; e < total; ++e) epochs.push_back(e);
  EXPECT_EQ(h.epoch, epochs);
  EXPECT_EQ(loss_lines(h), std::vector<std::string>(all.begin() + fit_resume::kFirst, all.end()));
  io::save_checkpoint(resumed.model, dir / "resumed.gguf", total, resumed.kept());
  EXPECT_TRUE(same_files(dir / "whole.gguf", dir / "resumed.gguf"));
  EXPECT_FALSE(std::filesystem::exists(backup_dir));  // delete_checkpoint: removed at the end
}

TEST(BackupAndRestore, ArgumentsOrderAndAFinishedBackup) {
  ThreadsGuard threads;
  TempDir dir;
  EXPECT_TRUE(throws<ValueError>([] { io::BackupAndRestore(""); }, {"backup_dir", "empty"}));
  EXPECT_TRUE(throws<ValueError>([&] { io::BackupAndRestore(dir / "b", 100); }, {"save_freq", "100", "not implemented"}));
  EXPECT_TRUE(throws<ValueError>([&] { io::BackupAndRestore(dir / "b", "batch"); }, {"save_freq", "\"epoch\""}));

  fit_resume::Setup s;
  nn::FitOptions o = s.options(2, {});
  o.callbacks.insert(o.callbacks.begin(), std::make_shared<io::BackupAndRestore>(dir / "b"));
  EXPECT_TRUE(throws<ValueError>([&] { s.model.fit(s.x, s.y, o); },
                                 {"EarlyStopping", "position 1", "after BackupAndRestore", "Put BackupAndRestore after it"}));

  // A backup of a fit that reached its last epoch: the fit runs nothing.
  auto keep = std::make_shared<io::BackupAndRestore>(dir / "k", "epoch", false);
  s.model.fit(s.x, s.y, s.options(2, {keep}));
  ASSERT_TRUE(std::filesystem::exists(keep->backup_path()));
  const nn::History h = s.model.fit(s.x, s.y, s.options(2, {keep}));
  EXPECT_TRUE(h.epoch.empty());
}

// ---- ModelCheckpoint ----

TEST(ModelCheckpoint, FilepathPlaceholdersAsPythonFormats) {
  const Logs logs{{"loss", 0.1}, {"val_loss", 0.123456}, {"accuracy", 1.0}, {"tiny", 1e-5}};
  EXPECT_EQ(io::ModelCheckpoint("m-{epoch:02d}-{val_loss:.4f}.gguf").file_path(2, logs), "m-03-0.1235.gguf");
  EXPECT_EQ(io::ModelCheckpoint("m{epoch}_{loss}_{accuracy}_{tiny}").file_path(9, logs), "m10_0.1_1.0_1e-05");
  EXPECT_EQ(io::ModelCheckpoint("{{x}}{epoch:3d}|{val_loss:.2e}|{accuracy:.0%}").file_path(0, logs),
            "{x}  1|1.23e-01|100%");
  EXPECT_TRUE(throws<ValueError>([&] { io::ModelCheckpoint("{val_acc}").file_path(0, logs); },
                                 {"{val_acc}", "epoch, accuracy, loss, tiny, val_loss"}));
  EXPECT_TRUE(throws<ValueError>([&] { io::ModelCheckpoint("{loss:d}").file_path(0, logs); }, {"'loss'", "metric"}));
  EXPECT_TRUE(throws<ValueError>([] { io::ModelCheckpoint("m-{epoch"); }, {"not closed"}));
  EXPECT_TRUE(throws<ValueError>([] { io::ModelCheckpoint("m-{loss:.4q}"); }, {"'.4q'", "not supported"}));
  EXPECT_TRUE(throws<ValueError>([] { io::ModelCheckpoint("m", "val_loss", 0, false, false, nn::MonitorMode::Auto, 5); },
                                 {"save_freq", "not implemented"}));
  EXPECT_TRUE(throws<ValueError>([] { io::ModelCheckpoint("m", "val_loss", 2); }, {"verbose", "2"}));
}

TEST(ModelCheckpoint, InfinitiesAndNaNAsPythonFormatsThem) {
  // Every spec the filepath accepts ([sign][0][width][.precision][type]) of
  // inf, -inf, nan and a NaN with its sign bit set. The expected strings are
  // CPython 3.11's str.format output (format(value, spec), generated with
  // python3): a NaN's sign is never shown, and the '0' flag pads inf and nan
  // with zeros as it pads numbers.
  struct Row {
    const char* spec;
    const char* inf;
    const char* neg_inf;
    const char* nan;
    const char* neg_nan;
  };
  const Row rows[] = {
      {"", "inf", "-inf", "nan", "nan"},
      {"f", "inf", "-inf", "nan", "nan"},
      {"F", "INF", "-INF", "NAN", "NAN"},
      {"e", "inf", "-inf", "nan", "nan"},
      {"E", "INF", "-INF", "NAN", "NAN"},
      {"g", "inf", "-inf", "nan", "nan"},
      {"G", "INF", "-INF", "NAN", "NAN"},
      {"%", "inf%", "-inf%", "nan%", "nan%"},
      {".2", "inf", "-inf", "nan", "nan"},
      {".2f", "inf", "-inf", "nan", "nan"},
      {".2F", "INF", "-INF", "NAN", "NAN"},
      {".2e", "inf", "-inf", "nan", "nan"},
      {".2E", "INF", "-INF", "NAN", "NAN"},
      {".2g", "inf", "-inf", "nan", "nan"},
      {".2G", "INF", "-INF", "NAN", "NAN"},
      {".2%", "inf%", "-inf%", "nan%", "nan%"},
      {"0", "inf", "-inf", "nan", "nan"},
      {"0f", "inf", "-inf", "nan", "nan"},
      {"0F", "INF", "-INF", "NAN", "NAN"},
      {"0e", "inf", "-inf", "nan", "nan"},
      {"0E", "INF", "-INF", "NAN", "NAN"},
      {"0g", "inf", "-inf", "nan", "nan"},
      {"0G", "INF", "-INF", "NAN", "NAN"},
      {"0%", "inf%", "-inf%", "nan%", "nan%"},
      {"0.2", "inf", "-inf", "nan", "nan"},
      {"0.2f", "inf", "-inf", "nan", "nan"},
      {"0.2F", "INF", "-INF", "NAN", "NAN"},
      {"0.2e", "inf", "-inf", "nan", "nan"},
      {"0.2E", "INF", "-INF", "NAN", "NAN"},
      {"0.2g", "inf", "-inf", "nan", "nan"},
      {"0.2G", "INF", "-INF", "NAN", "NAN"},
      {"0.2%", "inf%", "-inf%", "nan%", "nan%"},
      {"9", "      inf", "     -inf", "      nan", "      nan"},
      {"9f", "      inf", "     -inf", "      nan", "      nan"},
      {"9F", "      INF", "     -INF", "      NAN", "      NAN"},
      {"9e", "      inf", "     -inf", "      nan", "      nan"},
      {"9E", "      INF", "     -INF", "      NAN", "      NAN"},
      {"9g", "      inf", "     -inf", "      nan", "      nan"},
      {"9G", "      INF", "     -INF", "      NAN", "      NAN"},
      {"9%", "     inf%", "    -inf%", "     nan%", "     nan%"},
      {"9.2", "      inf", "     -inf", "      nan", "      nan"},
      {"9.2f", "      inf", "     -inf", "      nan", "      nan"},
      {"9.2F", "      INF", "     -INF", "      NAN", "      NAN"},
      {"9.2e", "      inf", "     -inf", "      nan", "      nan"},
      {"9.2E", "      INF", "     -INF", "      NAN", "      NAN"},
      {"9.2g", "      inf", "     -inf", "      nan", "      nan"},
      {"9.2G", "      INF", "     -INF", "      NAN", "      NAN"},
      {"9.2%", "     inf%", "    -inf%", "     nan%", "     nan%"},
      {"09", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"09f", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"09F", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"09e", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"09E", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"09g", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"09G", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"09%", "00000inf%", "-0000inf%", "00000nan%", "00000nan%"},
      {"09.2", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"09.2f", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"09.2F", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"09.2e", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"09.2E", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"09.2g", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"09.2G", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"09.2%", "00000inf%", "-0000inf%", "00000nan%", "00000nan%"},
      {"+", "+inf", "-inf", "+nan", "+nan"},
      {"+f", "+inf", "-inf", "+nan", "+nan"},
      {"+F", "+INF", "-INF", "+NAN", "+NAN"},
      {"+e", "+inf", "-inf", "+nan", "+nan"},
      {"+E", "+INF", "-INF", "+NAN", "+NAN"},
      {"+g", "+inf", "-inf", "+nan", "+nan"},
      {"+G", "+INF", "-INF", "+NAN", "+NAN"},
      {"+%", "+inf%", "-inf%", "+nan%", "+nan%"},
      {"+.2", "+inf", "-inf", "+nan", "+nan"},
      {"+.2f", "+inf", "-inf", "+nan", "+nan"},
      {"+.2F", "+INF", "-INF", "+NAN", "+NAN"},
      {"+.2e", "+inf", "-inf", "+nan", "+nan"},
      {"+.2E", "+INF", "-INF", "+NAN", "+NAN"},
      {"+.2g", "+inf", "-inf", "+nan", "+nan"},
      {"+.2G", "+INF", "-INF", "+NAN", "+NAN"},
      {"+.2%", "+inf%", "-inf%", "+nan%", "+nan%"},
      {"+0", "+inf", "-inf", "+nan", "+nan"},
      {"+0f", "+inf", "-inf", "+nan", "+nan"},
      {"+0F", "+INF", "-INF", "+NAN", "+NAN"},
      {"+0e", "+inf", "-inf", "+nan", "+nan"},
      {"+0E", "+INF", "-INF", "+NAN", "+NAN"},
      {"+0g", "+inf", "-inf", "+nan", "+nan"},
      {"+0G", "+INF", "-INF", "+NAN", "+NAN"},
      {"+0%", "+inf%", "-inf%", "+nan%", "+nan%"},
      {"+0.2", "+inf", "-inf", "+nan", "+nan"},
      {"+0.2f", "+inf", "-inf", "+nan", "+nan"},
      {"+0.2F", "+INF", "-INF", "+NAN", "+NAN"},
      {"+0.2e", "+inf", "-inf", "+nan", "+nan"},
      {"+0.2E", "+INF", "-INF", "+NAN", "+NAN"},
      {"+0.2g", "+inf", "-inf", "+nan", "+nan"},
      {"+0.2G", "+INF", "-INF", "+NAN", "+NAN"},
      {"+0.2%", "+inf%", "-inf%", "+nan%", "+nan%"},
      {"+9", "     +inf", "     -inf", "     +nan", "     +nan"},
      {"+9f", "     +inf", "     -inf", "     +nan", "     +nan"},
      {"+9F", "     +INF", "     -INF", "     +NAN", "     +NAN"},
      {"+9e", "     +inf", "     -inf", "     +nan", "     +nan"},
      {"+9E", "     +INF", "     -INF", "     +NAN", "     +NAN"},
      {"+9g", "     +inf", "     -inf", "     +nan", "     +nan"},
      {"+9G", "     +INF", "     -INF", "     +NAN", "     +NAN"},
      {"+9%", "    +inf%", "    -inf%", "    +nan%", "    +nan%"},
      {"+9.2", "     +inf", "     -inf", "     +nan", "     +nan"},
      {"+9.2f", "     +inf", "     -inf", "     +nan", "     +nan"},
      {"+9.2F", "     +INF", "     -INF", "     +NAN", "     +NAN"},
      {"+9.2e", "     +inf", "     -inf", "     +nan", "     +nan"},
      {"+9.2E", "     +INF", "     -INF", "     +NAN", "     +NAN"},
      {"+9.2g", "     +inf", "     -inf", "     +nan", "     +nan"},
      {"+9.2G", "     +INF", "     -INF", "     +NAN", "     +NAN"},
      {"+9.2%", "    +inf%", "    -inf%", "    +nan%", "    +nan%"},
      {"+09", "+00000inf", "-00000inf", "+00000nan", "+00000nan"},
      {"+09f", "+00000inf", "-00000inf", "+00000nan", "+00000nan"},
      {"+09F", "+00000INF", "-00000INF", "+00000NAN", "+00000NAN"},
      {"+09e", "+00000inf", "-00000inf", "+00000nan", "+00000nan"},
      {"+09E", "+00000INF", "-00000INF", "+00000NAN", "+00000NAN"},
      {"+09g", "+00000inf", "-00000inf", "+00000nan", "+00000nan"},
      {"+09G", "+00000INF", "-00000INF", "+00000NAN", "+00000NAN"},
      {"+09%", "+0000inf%", "-0000inf%", "+0000nan%", "+0000nan%"},
      {"+09.2", "+00000inf", "-00000inf", "+00000nan", "+00000nan"},
      {"+09.2f", "+00000inf", "-00000inf", "+00000nan", "+00000nan"},
      {"+09.2F", "+00000INF", "-00000INF", "+00000NAN", "+00000NAN"},
      {"+09.2e", "+00000inf", "-00000inf", "+00000nan", "+00000nan"},
      {"+09.2E", "+00000INF", "-00000INF", "+00000NAN", "+00000NAN"},
      {"+09.2g", "+00000inf", "-00000inf", "+00000nan", "+00000nan"},
      {"+09.2G", "+00000INF", "-00000INF", "+00000NAN", "+00000NAN"},
      {"+09.2%", "+0000inf%", "-0000inf%", "+0000nan%", "+0000nan%"},
      {"-", "inf", "-inf", "nan", "nan"},
      {"-f", "inf", "-inf", "nan", "nan"},
      {"-F", "INF", "-INF", "NAN", "NAN"},
      {"-e", "inf", "-inf", "nan", "nan"},
      {"-E", "INF", "-INF", "NAN", "NAN"},
      {"-g", "inf", "-inf", "nan", "nan"},
      {"-G", "INF", "-INF", "NAN", "NAN"},
      {"-%", "inf%", "-inf%", "nan%", "nan%"},
      {"-.2", "inf", "-inf", "nan", "nan"},
      {"-.2f", "inf", "-inf", "nan", "nan"},
      {"-.2F", "INF", "-INF", "NAN", "NAN"},
      {"-.2e", "inf", "-inf", "nan", "nan"},
      {"-.2E", "INF", "-INF", "NAN", "NAN"},
      {"-.2g", "inf", "-inf", "nan", "nan"},
      {"-.2G", "INF", "-INF", "NAN", "NAN"},
      {"-.2%", "inf%", "-inf%", "nan%", "nan%"},
      {"-0", "inf", "-inf", "nan", "nan"},
      {"-0f", "inf", "-inf", "nan", "nan"},
      {"-0F", "INF", "-INF", "NAN", "NAN"},
      {"-0e", "inf", "-inf", "nan", "nan"},
      {"-0E", "INF", "-INF", "NAN", "NAN"},
      {"-0g", "inf", "-inf", "nan", "nan"},
      {"-0G", "INF", "-INF", "NAN", "NAN"},
      {"-0%", "inf%", "-inf%", "nan%", "nan%"},
      {"-0.2", "inf", "-inf", "nan", "nan"},
      {"-0.2f", "inf", "-inf", "nan", "nan"},
      {"-0.2F", "INF", "-INF", "NAN", "NAN"},
      {"-0.2e", "inf", "-inf", "nan", "nan"},
      {"-0.2E", "INF", "-INF", "NAN", "NAN"},
      {"-0.2g", "inf", "-inf", "nan", "nan"},
      {"-0.2G", "INF", "-INF", "NAN", "NAN"},
      {"-0.2%", "inf%", "-inf%", "nan%", "nan%"},
      {"-9", "      inf", "     -inf", "      nan", "      nan"},
      {"-9f", "      inf", "     -inf", "      nan", "      nan"},
      {"-9F", "      INF", "     -INF", "      NAN", "      NAN"},
      {"-9e", "      inf", "     -inf", "      nan", "      nan"},
      {"-9E", "      INF", "     -INF", "      NAN", "      NAN"},
      {"-9g", "      inf", "     -inf", "      nan", "      nan"},
      {"-9G", "      INF", "     -INF", "      NAN", "      NAN"},
      {"-9%", "     inf%", "    -inf%", "     nan%", "     nan%"},
      {"-9.2", "      inf", "     -inf", "      nan", "      nan"},
      {"-9.2f", "      inf", "     -inf", "      nan", "      nan"},
      {"-9.2F", "      INF", "     -INF", "      NAN", "      NAN"},
      {"-9.2e", "      inf", "     -inf", "      nan", "      nan"},
      {"-9.2E", "      INF", "     -INF", "      NAN", "      NAN"},
      {"-9.2g", "      inf", "     -inf", "      nan", "      nan"},
      {"-9.2G", "      INF", "     -INF", "      NAN", "      NAN"},
      {"-9.2%", "     inf%", "    -inf%", "     nan%", "     nan%"},
      {"-09", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"-09f", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"-09F", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"-09e", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"-09E", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"-09g", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"-09G", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"-09%", "00000inf%", "-0000inf%", "00000nan%", "00000nan%"},
      {"-09.2", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"-09.2f", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"-09.2F", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"-09.2e", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"-09.2E", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"-09.2g", "000000inf", "-00000inf", "000000nan", "000000nan"},
      {"-09.2G", "000000INF", "-00000INF", "000000NAN", "000000NAN"},
      {"-09.2%", "00000inf%", "-0000inf%", "00000nan%", "00000nan%"},
      {" ", " inf", "-inf", " nan", " nan"},
      {" f", " inf", "-inf", " nan", " nan"},
      {" F", " INF", "-INF", " NAN", " NAN"},
      {" e", " inf", "-inf", " nan", " nan"},
      {" E", " INF", "-INF", " NAN", " NAN"},
      {" g", " inf", "-inf", " nan", " nan"},
      {" G", " INF", "-INF", " NAN", " NAN"},
      {" %", " inf%", "-inf%", " nan%", " nan%"},
      {" .2", " inf", "-inf", " nan", " nan"},
      {" .2f", " inf", "-inf", " nan", " nan"},
      {" .2F", " INF", "-INF", " NAN", " NAN"},
      {" .2e", " inf", "-inf", " nan", " nan"},
      {" .2E", " INF", "-INF", " NAN", " NAN"},
      {" .2g", " inf", "-inf", " nan", " nan"},
      {" .2G", " INF", "-INF", " NAN", " NAN"},
      {" .2%", " inf%", "-inf%", " nan%", " nan%"},
      {" 0", " inf", "-inf", " nan", " nan"},
      {" 0f", " inf", "-inf", " nan", " nan"},
      {" 0F", " INF", "-INF", " NAN", " NAN"},
      {" 0e", " inf", "-inf", " nan", " nan"},
      {" 0E", " INF", "-INF", " NAN", " NAN"},
      {" 0g", " inf", "-inf", " nan", " nan"},
      {" 0G", " INF", "-INF", " NAN", " NAN"},
      {" 0%", " inf%", "-inf%", " nan%", " nan%"},
      {" 0.2", " inf", "-inf", " nan", " nan"},
      {" 0.2f", " inf", "-inf", " nan", " nan"},
      {" 0.2F", " INF", "-INF", " NAN", " NAN"},
      {" 0.2e", " inf", "-inf", " nan", " nan"},
      {" 0.2E", " INF", "-INF", " NAN", " NAN"},
      {" 0.2g", " inf", "-inf", " nan", " nan"},
      {" 0.2G", " INF", "-INF", " NAN", " NAN"},
      {" 0.2%", " inf%", "-inf%", " nan%", " nan%"},
      {" 9", "      inf", "     -inf", "      nan", "      nan"},
      {" 9f", "      inf", "     -inf", "      nan", "      nan"},
      {" 9F", "      INF", "     -INF", "      NAN", "      NAN"},
      {" 9e", "      inf", "     -inf", "      nan", "      nan"},
      {" 9E", "      INF", "     -INF", "      NAN", "      NAN"},
      {" 9g", "      inf", "     -inf", "      nan", "      nan"},
      {" 9G", "      INF", "     -INF", "      NAN", "      NAN"},
      {" 9%", "     inf%", "    -inf%", "     nan%", "     nan%"},
      {" 9.2", "      inf", "     -inf", "      nan", "      nan"},
      {" 9.2f", "      inf", "     -inf", "      nan", "      nan"},
      {" 9.2F", "      INF", "     -INF", "      NAN", "      NAN"},
      {" 9.2e", "      inf", "     -inf", "      nan", "      nan"},
      {" 9.2E", "      INF", "     -INF", "      NAN", "      NAN"},
      {" 9.2g", "      inf", "     -inf", "      nan", "      nan"},
      {" 9.2G", "      INF", "     -INF", "      NAN", "      NAN"},
      {" 9.2%", "     inf%", "    -inf%", "     nan%", "     nan%"},
      {" 09", " 00000inf", "-00000inf", " 00000nan", " 00000nan"},
      {" 09f", " 00000inf", "-00000inf", " 00000nan", " 00000nan"},
      {" 09F", " 00000INF", "-00000INF", " 00000NAN", " 00000NAN"},
      {" 09e", " 00000inf", "-00000inf", " 00000nan", " 00000nan"},
      {" 09E", " 00000INF", "-00000INF", " 00000NAN", " 00000NAN"},
      {" 09g", " 00000inf", "-00000inf", " 00000nan", " 00000nan"},
      {" 09G", " 00000INF", "-00000INF", " 00000NAN", " 00000NAN"},
      {" 09%", " 0000inf%", "-0000inf%", " 0000nan%", " 0000nan%"},
      {" 09.2", " 00000inf", "-00000inf", " 00000nan", " 00000nan"},
      {" 09.2f", " 00000inf", "-00000inf", " 00000nan", " 00000nan"},
      {" 09.2F", " 00000INF", "-00000INF", " 00000NAN", " 00000NAN"},
      {" 09.2e", " 00000inf", "-00000inf", " 00000nan", " 00000nan"},
      {" 09.2E", " 00000INF", "-00000INF", " 00000NAN", " 00000NAN"},
      {" 09.2g", " 00000inf", "-00000inf", " 00000nan", " 00000nan"},
      {" 09.2G", " 00000INF", "-00000INF", " 00000NAN", " 00000NAN"},
      {" 09.2%", " 0000inf%", "-0000inf%", " 0000nan%", " 0000nan%"},
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double values[] = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(), nan,
                           std::copysign(nan, -1.0)};
  for (const Row& row : rows) {
    const io::ModelCheckpoint checkpoint(std::string("{loss:") + row.spec + "}");
    const char* expected[] = {row.inf, row.neg_inf, row.nan, row.neg_nan};
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(checkpoint.file_path(0, {{"loss", values[i]}}), expected[i]) << "spec '" << row.spec << "', value " << i;
  }
}

namespace {
// Sets logs["val_loss"] to values[epoch] (a callback placed first).
std::shared_ptr<nn::LambdaCallback> scripted_val_loss(std::vector<double> values) {
  auto cb = std::make_shared<nn::LambdaCallback>();
  cb->on_epoch_end_fn = [values](int epoch, Logs& logs) { logs["val_loss"] = values.at(size_t(epoch)); };
  return cb;
}
std::vector<std::string> files_in(const std::string& d) {
  std::vector<std::string> out;
  if (!std::filesystem::exists(d)) return out;
  for (const auto& e : std::filesystem::directory_iterator(d)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST(ModelCheckpoint, SavesEveryEpochOrTheBestOnly) {
  ThreadsGuard threads;
  TempDir dir;
  const std::vector<double> val = {1.0, 0.5, 0.7, 0.3};
  {
    fit_resume::Setup s;
    auto every = std::make_shared<io::ModelCheckpoint>(dir / "every/m{epoch}.gguf", "val_loss", 0, false, true);
    s.model.fit(s.x, s.y, s.options(2, {every}));
    EXPECT_EQ(files_in(dir / "every"), (std::vector<std::string>{"m1.gguf", "m2.gguf"}));
    EXPECT_EQ(io::GGUFFile::open(dir / "every/m2.gguf").get_string("tensorgrad.file_kind"), "weights");
  }
  {
    fit_resume::Setup s;
    auto best = std::make_shared<io::ModelCheckpoint>(dir / "best/m{epoch}.gguf", "val_loss", 1, true);
    nn::FitOptions o = s.options(4, {best});
    o.callbacks.insert(o.callbacks.begin(), scripted_val_loss(val));
    s.model.fit(s.x, s.y, o);
    EXPECT_EQ(files_in(dir / "best"), (std::vector<std::string>{"m1.gguf", "m2.gguf", "m4.gguf"}));
    EXPECT_EQ(best->best(), 0.3);
    EXPECT_EQ(io::GGUFFile::open(dir / "best/m4.gguf").get_string("tensorgrad.file_kind"), "model");
    // The last file is the model as fit left it before EarlyStopping put
    // back the best weights: epoch 4 is the best of val_loss too.
    nn::Model loaded = io::load_model(dir / "best/m4.gguf");
    EXPECT_EQ(loaded.weights()[0].value.to_vector(), s.model.weights()[0].value.to_vector());
  }
  {
    fit_resume::Setup s;
    auto threshold = std::make_shared<io::ModelCheckpoint>(dir / "thr/m{epoch}.gguf", "val_loss", 0, true, true,
                                                           nn::MonitorMode::Auto, "epoch", 0.4);
    nn::FitOptions o = s.options(4, {threshold});
    o.callbacks.insert(o.callbacks.begin(), scripted_val_loss(val));
    s.model.fit(s.x, s.y, o);
    EXPECT_EQ(files_in(dir / "thr"), (std::vector<std::string>{"m4.gguf"}));
  }
  {
    fit_resume::Setup s;
    auto maxed = std::make_shared<io::ModelCheckpoint>(dir / "max/m{epoch}.gguf", "val_loss", 0, true, true,
                                                       nn::MonitorMode::Max);
    nn::FitOptions o = s.options(4, {maxed});
    o.callbacks.insert(o.callbacks.begin(), scripted_val_loss(val));
    s.model.fit(s.x, s.y, o);
    EXPECT_EQ(files_in(dir / "max"), (std::vector<std::string>{"m1.gguf"}));
  }
  {
    fit_resume::Setup s;
    std::vector<std::string> warnings;
    set_log_handler([&](LogLevel level, const std::string& m) {
      if (level == LogLevel::Warning) warnings.push_back(m);
    });
    auto missing = std::make_shared<io::ModelCheckpoint>(dir / "none/m.gguf", "val_auc", 0, true);
    s.model.fit(s.x, s.y, s.options(3, {missing}));
    set_log_handler(nullptr);
    EXPECT_TRUE(files_in(dir / "none").empty());
    ASSERT_EQ(warnings.size(), 1u);  // once per fit
    EXPECT_NE(warnings[0].find("val_auc"), std::string::npos);
    EXPECT_NE(warnings[0].find("val_loss"), std::string::npos);  // the keys there are
  }
}

// ---- exact resume across processes ----

TEST(FitResume, InterruptedFitResumedInANewProcessIsBitIdentical) {
  ThreadsGuard threads;
  TempDir dir;
  const int total = kTotal;
  const std::vector<std::string> all = uninterrupted_run(dir / "whole.gguf");
  ASSERT_EQ(all.size(), size_t(total));

  // The first kFirst epochs here, the backup kept.
  const std::string backup_dir = dir / "backup";
  fit_resume::Setup first;
  const nn::History h_first = first.model.fit(
      first.x, first.y, first.options(fit_resume::kFirst, {std::make_shared<io::BackupAndRestore>(backup_dir, "epoch", false)}));
  EXPECT_EQ(loss_lines(h_first), std::vector<std::string>(all.begin(), all.begin() + fit_resume::kFirst));

  // The rest in a new process.
  const std::string child = FIT_RESUME_CHILD, epochs = std::to_string(total), final_ckpt = dir / "resumed.gguf",
                    losses = dir / "losses.txt";
  std::vector<char*> argv = {const_cast<char*>(child.c_str()), const_cast<char*>(backup_dir.c_str()),
                             const_cast<char*>(epochs.c_str()), const_cast<char*>(final_ckpt.c_str()),
                             const_cast<char*>(losses.c_str()), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, child.c_str(), nullptr, nullptr, argv.data(), environ), 0) << child;
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child failed (status " << status << ")";

  EXPECT_EQ(lines_of(losses), std::vector<std::string>(all.begin() + fit_resume::kFirst, all.end()));
  EXPECT_TRUE(same_files(dir / "whole.gguf", final_ckpt));
  EXPECT_FALSE(std::filesystem::exists(backup_dir));  // the child's fit ended: deleted
}
