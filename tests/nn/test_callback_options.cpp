// The options structs of the callbacks and of fit (designated initializers,
// Keras' argument names): each gives the same run, bit for bit, as the
// positional constructor (or the field-by-field assignment) it stands beside,
// and refuses the same bad arguments with the same error.
#include <gtest/gtest.h>

#include "test_files.h"
#include "test_support.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::bit_equal;
using test_support::TempDir;
using test_support::throws;

namespace {

// y = 3x - 1 on 8 rows, SGD at lr 0.05, batch 4 (2 batches an epoch), built
// after the same seed and with the same names every time (the files two runs
// save are then the same), so two runs differ only by their callbacks.
Sequential linear_model() {
  clear_session();
  manual_seed(7);
  Sequential model(Shape{1});
  model.add(Dense(1));
  model.compile(OptimizerSpec::sgd(0.05f), "mse");
  return model;
}

Tensor inputs() {
  return Tensor::from_vector(std::vector<float>{0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f}, {8, 1});
}
Tensor targets() {
  return Tensor::from_vector(std::vector<float>{-1.0f, -0.7f, -0.4f, -0.1f, 0.2f, 0.5f, 0.8f, 1.1f}, {8, 1});
}

struct FitRun {
  History history;
  std::vector<Tensor> weights;
};

// Fits the model for `epochs` epochs with `callback` after a callback that
// sets "val_loss" to val_loss[epoch] (known numbers for the monitors' rules).
FitRun fit_with(const std::shared_ptr<Callback>& callback, const std::vector<double>& val_loss, int epochs) {
  Sequential model = linear_model();
  auto scripted = std::make_shared<LambdaCallback>();
  scripted->on_epoch_end_fn = [val_loss](int epoch, Logs& logs) { logs["val_loss"] = val_loss.at(size_t(epoch)); };
  FitOptions options;
  options.epochs = epochs;
  options.batch_size = 4;
  options.shuffle = false;
  options.verbose = 0;
  options.callbacks = {scripted, callback};
  FitRun run;
  run.history = model.fit(inputs(), targets(), options);
  run.weights = model.get_weights();
  return run;
}

::testing::AssertionResult same_run(const FitRun& a, const FitRun& b) {
  if (a.history.epoch != b.history.epoch) return ::testing::AssertionFailure() << "the epochs differ";
  if (a.history.history != b.history.history) return ::testing::AssertionFailure() << "the logs differ";
  if (a.weights.size() != b.weights.size()) return ::testing::AssertionFailure() << "the weight counts differ";
  for (size_t i = 0; i < a.weights.size(); ++i)
    if (!bit_equal(a.weights[i], b.weights[i])) return ::testing::AssertionFailure() << "weight " << i << " differs";
  return ::testing::AssertionSuccess();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::set<std::string> file_names(const std::filesystem::path& dir) {
  std::set<std::string> names;
  if (std::filesystem::exists(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

}  // namespace

TEST(CallbackOptions, EarlyStoppingMatchesItsPositionalConstructor) {
  const std::vector<double> val_loss{1.0, 0.8, 0.85, 0.79, 0.9, 0.95, 0.7, 0.6};
  auto positional = std::make_shared<EarlyStopping>("val_loss", 0.02, 2, MonitorMode::Auto, std::nullopt, true, 1);
  auto named = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions{.min_delta = 0.02, .patience = 2, .restore_best_weights = true, .start_from_epoch = 1});
  const FitRun a = fit_with(positional, val_loss, 8), b = fit_with(named, val_loss, 8);
  EXPECT_TRUE(same_run(a, b));
  EXPECT_GT(positional->stopped_epoch(), 0);  // the rule did act
  EXPECT_EQ(named->stopped_epoch(), positional->stopped_epoch());
  EXPECT_EQ(named->best_epoch(), positional->best_epoch());
  EXPECT_EQ(named->get_state().values, positional->get_state().values);

  // The defaults are the positional constructor's.
  auto default_positional = std::make_shared<EarlyStopping>();
  auto default_named = std::make_shared<EarlyStopping>(EarlyStoppingOptions{});
  EXPECT_TRUE(same_run(fit_with(default_positional, val_loss, 8), fit_with(default_named, val_loss, 8)));
  EXPECT_EQ(default_named->stopped_epoch(), default_positional->stopped_epoch());

  // A baseline and a maximized monitor, through both forms.
  auto with_baseline = std::make_shared<EarlyStopping>("val_loss", 0.0, 1, MonitorMode::Max, 0.5);
  auto with_baseline_named =
      std::make_shared<EarlyStopping>(EarlyStoppingOptions{.patience = 1, .mode = MonitorMode::Max, .baseline = 0.5});
  EXPECT_TRUE(same_run(fit_with(with_baseline, val_loss, 8), fit_with(with_baseline_named, val_loss, 8)));
  EXPECT_EQ(with_baseline_named->stopped_epoch(), with_baseline->stopped_epoch());

  EXPECT_TRUE(throws<ValueError>([] { EarlyStopping({.patience = -1}); }, {"patience", "-1"}));
  EXPECT_TRUE(throws<ValueError>([] { EarlyStopping({.start_from_epoch = -2}); }, {"start_from_epoch", "-2"}));
}

TEST(CallbackOptions, ReduceLROnPlateauMatchesItsPositionalConstructor) {
  const std::vector<double> val_loss{1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5};
  auto positional = std::make_shared<ReduceLROnPlateau>("val_loss", 0.5, 1, MonitorMode::Min, 1e-3, 1, 0.01);
  auto named = std::make_shared<ReduceLROnPlateau>(ReduceLROnPlateauOptions{
      .factor = 0.5, .patience = 1, .mode = MonitorMode::Min, .min_delta = 1e-3, .cooldown = 1, .min_lr = 0.01});
  const FitRun a = fit_with(positional, val_loss, 8), b = fit_with(named, val_loss, 8);
  EXPECT_TRUE(same_run(a, b));
  const std::vector<double>& rates = a.history["learning_rate"];
  EXPECT_LT(rates.back(), rates.front());  // the rule did act
  EXPECT_EQ(named->get_state().values, positional->get_state().values);

  auto default_positional = std::make_shared<ReduceLROnPlateau>();
  auto default_named = std::make_shared<ReduceLROnPlateau>(ReduceLROnPlateauOptions{});
  EXPECT_TRUE(same_run(fit_with(default_positional, val_loss, 8), fit_with(default_named, val_loss, 8)));

  EXPECT_TRUE(throws<ValueError>([] { ReduceLROnPlateau({.factor = 1.5}); }, {"factor", "(0, 1)"}));
  EXPECT_TRUE(throws<ValueError>([] { ReduceLROnPlateau({.cooldown = -1}); }, {"cooldown"}));
}

TEST(CallbackOptions, CSVLoggerMatchesItsPositionalConstructor) {
  const TempDir dir("tg_csv_options");
  const std::vector<double> val_loss{0.5, 0.4, 0.3};
  for (int pass = 0; pass < 2; ++pass) {  // the second pass appends to the first's files
    const bool append = pass == 1;
    const FitRun a = fit_with(std::make_shared<CSVLogger>(dir / "positional.csv", ';', append), val_loss, 3);
    const FitRun b = fit_with(
        std::make_shared<CSVLogger>(CSVLoggerOptions{.filename = dir / "named.csv", .separator = ';', .append = append}),
        val_loss, 3);
    EXPECT_TRUE(same_run(a, b));
  }
  const std::string text = read_text(dir / "positional.csv");
  EXPECT_EQ(text.rfind("epoch;loss;val_loss\n", 0), 0u) << text;
  EXPECT_EQ(read_text(dir / "named.csv"), text);

  fit_with(std::make_shared<CSVLogger>(dir / "default_positional.csv"), val_loss, 3);
  fit_with(std::make_shared<CSVLogger>(CSVLoggerOptions{.filename = dir / "default_named.csv"}), val_loss, 3);
  EXPECT_EQ(read_text(dir / "default_named.csv"), read_text(dir / "default_positional.csv"));
}

TEST(CallbackOptions, ModelCheckpointMatchesItsPositionalConstructor) {
  const TempDir dir("tg_checkpoint_options");
  const std::vector<double> val_loss{0.5, 0.6, 0.4, 0.45, 0.3};
  const std::string positional_path = dir / "positional/epoch_{epoch:02d}.gguf";
  const std::string named_path = dir / "named/epoch_{epoch:02d}.gguf";
  auto positional = std::make_shared<io::ModelCheckpoint>(positional_path, "val_loss", 0, true, true,
                                                          MonitorMode::Min, "epoch", 0.55);
  auto named = std::make_shared<io::ModelCheckpoint>(io::ModelCheckpointOptions{.filepath = named_path,
                                                                               .save_best_only = true,
                                                                               .save_weights_only = true,
                                                                               .mode = MonitorMode::Min,
                                                                               .initial_value_threshold = 0.55});
  EXPECT_TRUE(same_run(fit_with(positional, val_loss, 5), fit_with(named, val_loss, 5)));
  const std::set<std::string> saved{"epoch_01.gguf", "epoch_03.gguf", "epoch_05.gguf"};
  EXPECT_EQ(file_names(dir.path / "positional"), saved);
  EXPECT_EQ(file_names(dir.path / "named"), saved);
  for (const std::string& name : saved)
    EXPECT_TRUE(test_support::same_files(dir / ("positional/" + name), dir / ("named/" + name))) << name;
  EXPECT_EQ(named->best(), positional->best());

  // The defaults: every epoch saved, the whole model.
  fit_with(std::make_shared<io::ModelCheckpoint>(dir / "default_positional/{epoch}.gguf"), val_loss, 2);
  fit_with(std::make_shared<io::ModelCheckpoint>(io::ModelCheckpointOptions{.filepath = dir / "default_named/{epoch}.gguf"}),
           val_loss, 2);
  EXPECT_EQ(file_names(dir.path / "default_named"), (std::set<std::string>{"1.gguf", "2.gguf"}));
  EXPECT_TRUE(test_support::same_files(dir / "default_positional/2.gguf", dir / "default_named/2.gguf"));

  EXPECT_TRUE(throws<ValueError>([] { io::ModelCheckpoint(io::ModelCheckpointOptions{}); }, {"filepath is empty"}));
  EXPECT_TRUE(throws<ValueError>([] { io::ModelCheckpoint({.filepath = "m.gguf", .verbose = 2}); }, {"verbose"}));
  EXPECT_TRUE(throws<ValueError>([] { io::ModelCheckpoint({.filepath = "m.gguf", .save_freq = 10}); },
                                 {"save_freq", "not implemented"}));
}

TEST(CallbackOptions, BackupAndRestoreMatchesItsPositionalConstructor) {
  const TempDir dir("tg_backup_options");
  const std::vector<double> val_loss{0.5, 0.4};
  auto positional = std::make_shared<io::BackupAndRestore>(dir / "positional", "epoch", false);
  auto named =
      std::make_shared<io::BackupAndRestore>(io::BackupAndRestoreOptions{.backup_dir = dir / "named", .delete_checkpoint = false});
  EXPECT_TRUE(same_run(fit_with(positional, val_loss, 2), fit_with(named, val_loss, 2)));
  ASSERT_TRUE(std::filesystem::exists(named->backup_path()));
  EXPECT_TRUE(test_support::same_files(positional->backup_path(), named->backup_path()));

  // By default the backup goes when the fit ends.
  auto default_named = std::make_shared<io::BackupAndRestore>(io::BackupAndRestoreOptions{.backup_dir = dir / "default"});
  fit_with(default_named, val_loss, 2);
  EXPECT_FALSE(std::filesystem::exists(default_named->backup_path()));

  EXPECT_TRUE(throws<ValueError>([] { io::BackupAndRestore(io::BackupAndRestoreOptions{}); }, {"backup_dir is empty"}));
  EXPECT_TRUE(throws<ValueError>([] { io::BackupAndRestore({.backup_dir = "b", .save_freq = 3}); },
                                 {"save_freq", "not implemented"}));
}

TEST(CallbackOptions, LambdaCallbackTakesEveryFunctionByKerasName) {
  std::vector<std::string> events;
  auto named = std::make_shared<LambdaCallback>(LambdaCallbackOptions{
      .on_epoch_begin = [&](int epoch, Logs&) { events.push_back("epoch_begin " + std::to_string(epoch)); },
      .on_epoch_end = [&](int epoch, Logs&) { events.push_back("epoch_end " + std::to_string(epoch)); },
      .on_train_begin = [&](Logs&) { events.push_back("train_begin"); },
      .on_train_end = [&](Logs&) { events.push_back("train_end"); },
      .on_train_batch_begin = [&](int64_t batch, Logs&) { events.push_back("batch_begin " + std::to_string(batch)); },
      .on_train_batch_end = [&](int64_t batch, Logs&) { events.push_back("batch_end " + std::to_string(batch)); }});
  fit_with(named, {0.5}, 1);
  EXPECT_EQ(events, (std::vector<std::string>{"train_begin", "epoch_begin 0", "batch_begin 0", "batch_end 0",
                                              "batch_begin 1", "batch_end 1", "epoch_end 0", "train_end"}));
  events.clear();
  fit_with(std::make_shared<LambdaCallback>(LambdaCallbackOptions{
               .on_epoch_end = [&](int epoch, Logs&) { events.push_back("epoch_end " + std::to_string(epoch)); }}),
           {0.5, 0.4}, 2);
  EXPECT_EQ(events, (std::vector<std::string>{"epoch_end 0", "epoch_end 1"}));  // unset ones do nothing
}

TEST(FitOptionsDesignated, FitTakesDesignatedInitializersInFieldOrder) {
  Sequential assigned = linear_model();
  FitOptions options;
  options.epochs = 3;
  options.batch_size = 2;
  options.validation_split = 0.25;
  options.shuffle = true;
  options.verbose = 0;
  const History a = assigned.fit(inputs(), targets(), options);

  Sequential designated = linear_model();
  const History b = designated.fit(
      inputs(), targets(), {.epochs = 3, .batch_size = 2, .validation_split = 0.25, .shuffle = true, .verbose = 0});
  EXPECT_EQ(b["val_loss"].size(), 3u);
  EXPECT_TRUE(same_run({a, assigned.get_weights()}, {b, designated.get_weights()}));
  // The Trainer's options too (this file compiles with
  // -Werror=missing-field-initializers: every field left out has a default).
  const nn::TrainerOptions t{.batch_size = 4, .nbatch_logical = 8};
  EXPECT_EQ(t.loss_mask, 0);
  EXPECT_FALSE(t.weight_decay.has_value());
}

TEST(FitOptionsDesignated, GeneratorFitTakesDesignatedInitializersInFieldOrder) {
  const Tensor x = inputs(), y = targets();
  auto batches = [&x, &y] {
    auto next = std::make_shared<int64_t>(0);
    return Generator([&x, &y, next]() -> std::optional<Batch> {
      if (*next >= 8) {
        *next = 0;  // restart for the next epoch
        return std::nullopt;
      }
      const int64_t begin = *next;
      *next += 4;
      return Batch{{x.rows(begin, begin + 4)}, {y.rows(begin, begin + 4)}, {}};
    });
  };
  Sequential assigned = linear_model();
  GeneratorFitOptions options;
  options.epochs = 2;
  options.batch_size = 4;
  options.validation_generator = batches();
  options.prefetch = 0;
  options.verbose = 0;
  const History a = assigned.fit(batches(), options);

  Sequential designated = linear_model();
  const History b = designated.fit(
      batches(), {.epochs = 2, .batch_size = 4, .validation_generator = batches(), .prefetch = 0, .verbose = 0});
  EXPECT_EQ(b["val_loss"].size(), 2u);
  EXPECT_TRUE(same_run({a, assigned.get_weights()}, {b, designated.get_weights()}));
}
