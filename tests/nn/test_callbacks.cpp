// fit's callbacks (Keras 3's interface and built-ins): the order of the
// hooks, the logs they see, stop_training, and each built-in's rule traced by
// hand on scripted metric values. A LambdaCallback placed first overwrites
// "val_loss" with a scripted sequence, so the rules are checked on known
// numbers instead of on whatever training produces.
#include <gtest/gtest.h>

#include "test_support.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::throws;

namespace {
// y = 2x on 6 rows: SGD at lr 0.1, batch 2 (3 batches an epoch), the last
// two rows held out.
struct Linear {
  Sequential model{Shape{1}};
  Tensor x = Tensor::from_vector(std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f}, {8, 1});
  Tensor y = Tensor::from_vector(std::vector<float>{0.2f, 0.4f, 0.6f, 0.8f, 1.0f, 1.2f, 1.4f, 1.6f}, {8, 1});
  FitOptions options;
  Linear() {
    manual_seed(1);
    model.add(Dense(1));
    model.compile(OptimizerSpec::sgd(0.1f), "mse");
    options.batch_size = 2;
    options.validation_split = 0.25;
    options.verbose = 0;
    options.shuffle = false;
  }
};

// Sets logs["val_loss"] to values[epoch] at on_epoch_end.
std::shared_ptr<LambdaCallback> scripted_val_loss(std::vector<double> values) {
  auto cb = std::make_shared<LambdaCallback>();
  cb->on_epoch_end_fn = [values](int epoch, Logs& logs) { logs["val_loss"] = values.at(size_t(epoch)); };
  return cb;
}
}  // namespace

TEST(Callbacks, HooksRunInKerasOrderWithTheirLogs) {
  Linear t;
  std::vector<std::string> events;
  std::vector<Logs> test_end_logs, epoch_end_logs;
  auto cb = std::make_shared<LambdaCallback>();
  cb->on_train_begin_fn = [&](Logs&) { events.push_back("train_begin"); };
  cb->on_epoch_begin_fn = [&](int e, Logs&) { events.push_back("epoch_begin " + std::to_string(e)); };
  cb->on_train_batch_begin_fn = [&](int64_t b, Logs&) { events.push_back("batch_begin " + std::to_string(b)); };
  cb->on_train_batch_end_fn = [&](int64_t b, Logs& l) {
    events.push_back("batch_end " + std::to_string(b) + (l.count("loss") ? " loss" : ""));
  };
  cb->on_epoch_end_fn = [&](int e, Logs& l) {
    events.push_back("epoch_end " + std::to_string(e));
    epoch_end_logs.push_back(l);
  };
  cb->on_train_end_fn = [&](Logs&) { events.push_back("train_end"); };
  struct TestHooks : Callback {
    std::vector<std::string>* events;
    std::vector<Logs>* logs;
    void on_test_begin(Logs&) override { events->push_back("test_begin"); }
    void on_test_end(Logs& l) override {
      events->push_back("test_end");
      logs->push_back(l);
    }
  };
  auto test_hooks = std::make_shared<TestHooks>();
  test_hooks->events = &events;
  test_hooks->logs = &test_end_logs;
  auto mine = std::make_shared<History>();
  t.options.epochs = 2;
  t.options.callbacks = {cb, test_hooks, mine};
  const History h = t.model.fit(t.x, t.y, t.options);

  std::vector<std::string> want{"train_begin"};
  for (int e = 0; e < 2; ++e) {
    want.push_back("epoch_begin " + std::to_string(e));
    for (int b = 0; b < 3; ++b) {
      want.push_back("batch_begin " + std::to_string(b));
      want.push_back("batch_end " + std::to_string(b) + " loss");
    }
    want.push_back("test_begin");
    want.push_back("test_end");
    want.push_back("epoch_end " + std::to_string(e));
  }
  want.push_back("train_end");
  EXPECT_EQ(events, want);
  // on_test_end has the validation metrics unprefixed; the epoch's logs have
  // them as val_*; History (the returned one and one passed in) records them.
  ASSERT_EQ(test_end_logs.size(), 2u);
  EXPECT_EQ(test_end_logs[1].count("loss"), 1u);
  EXPECT_EQ(test_end_logs[1].at("loss"), epoch_end_logs[1].at("val_loss"));
  EXPECT_EQ(h["val_loss"], (std::vector<double>{epoch_end_logs[0].at("val_loss"), epoch_end_logs[1].at("val_loss")}));
  EXPECT_EQ(h["loss"], (std::vector<double>{epoch_end_logs[0].at("loss"), epoch_end_logs[1].at("loss")}));
  EXPECT_EQ(mine->history, h.history);
  EXPECT_EQ(h.epoch, (std::vector<int>{0, 1}));
}

TEST(Callbacks, StopTrainingEndsAfterTheCurrentBatch) {
  Linear t;
  int batches = 0;
  auto cb = std::make_shared<LambdaCallback>();
  cb->on_train_batch_end_fn = [&](int64_t b, Logs&) {
    ++batches;
    if (b == 1) t.model.set_stop_training(true);
  };
  t.options.epochs = 5;
  t.options.callbacks = {cb};
  const History h = t.model.fit(t.x, t.y, t.options);
  EXPECT_EQ(batches, 2);
  EXPECT_EQ(h.epoch, (std::vector<int>{0}));  // the stopped epoch still ends (with validation)
  EXPECT_EQ(h["val_loss"].size(), 1u);
  FitOptions quiet;
  quiet.verbose = 0;
  EXPECT_FALSE(t.model.fit(t.x, t.y, quiet).epoch.empty());  // the next fit clears the flag
}

// Keras 3's rule, traced by hand: wait counts epochs since the best; a stop
// needs wait >= patience (and epoch > 0).
TEST(Callbacks, EarlyStoppingPatienceMinDeltaBaselineStart) {
  struct Case {
    const char* name;
    std::vector<double> values;
    int patience;
    double min_delta;
    std::optional<double> baseline;
    int start_from_epoch;
    int stopped, best;
  };
  const std::vector<Case> cases = {
      {"improves then stalls", {1.0, 0.9, 0.95, 0.96, 0.97, 0.98}, 2, 0.0, std::nullopt, 0, 3, 1},
      {"patience 0 stops at the first miss", {1.0, 0.9, 0.95, 0.8, 0.7, 0.6}, 0, 0.0, std::nullopt, 0, 2, 1},
      {"below min_delta is no improvement", {1.0, 0.95, 0.94, 0.5, 0.4, 0.3}, 2, 0.1, std::nullopt, 0, 2, 0},
      {"never beats the baseline", {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}, 2, 0.0, 0.5, 0, 1, 0},
      {"no baseline: same values run longer", {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}, 2, 0.0, std::nullopt, 0, 2, 0},
      {"start_from_epoch skips the first", {0.1, 0.2, 1.0, 1.0, 1.0, 1.0}, 1, 0.0, std::nullopt, 2, 3, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Linear t;
    auto es = std::make_shared<EarlyStopping>("val_loss", c.min_delta, c.patience, MonitorMode::Auto, c.baseline,
                                              false, c.start_from_epoch);
    t.options.epochs = 6;
    t.options.callbacks = {scripted_val_loss(c.values), es};
    const History h = t.model.fit(t.x, t.y, t.options);
    EXPECT_EQ(es->stopped_epoch(), c.stopped);
    EXPECT_EQ(es->best_epoch(), c.best);
    EXPECT_EQ(int(h.epoch.size()), c.stopped + 1);
  }
}

TEST(Callbacks, EarlyStoppingRestoresTheBestEpochsWeights) {
  Linear t;
  std::vector<std::vector<Tensor>> at_epoch_end;
  auto record = std::make_shared<LambdaCallback>();
  record->on_epoch_end_fn = [&](int, Logs&) { at_epoch_end.push_back(t.model.get_weights()); };
  auto es = std::make_shared<EarlyStopping>("val_loss", 0.0, 2, MonitorMode::Auto, std::nullopt, true);
  t.options.epochs = 6;
  t.options.callbacks = {scripted_val_loss({1.0, 0.5, 0.7, 0.8, 0.9, 1.0}), es, record};
  t.model.fit(t.x, t.y, t.options);
  ASSERT_EQ(at_epoch_end.size(), 4u);  // stopped at epoch 3
  const std::vector<Tensor> now = t.model.get_weights();
  ASSERT_EQ(now.size(), at_epoch_end[1].size());
  for (size_t i = 0; i < now.size(); ++i) EXPECT_EQ(now[i].to_vector(), at_epoch_end[1][i].to_vector()) << i;
  EXPECT_NE(now[0].to_vector(), at_epoch_end[3][0].to_vector());
  // "accuracy" keys are maximised under Auto; losses minimised.
  Linear u;
  auto acc = std::make_shared<EarlyStopping>("val_accuracy", 0.0, 1);
  auto set_acc = std::make_shared<LambdaCallback>();
  set_acc->on_epoch_end_fn = [](int e, Logs& l) { l["val_accuracy"] = std::vector<double>{0.5, 0.6, 0.7, 0.6, 0.5}.at(size_t(e)); };
  u.options.epochs = 5;
  u.options.callbacks = {set_acc, acc};
  u.model.fit(u.x, u.y, u.options);
  EXPECT_EQ(acc->best_epoch(), 2);
  EXPECT_EQ(acc->stopped_epoch(), 3);
}

TEST(Callbacks, ReduceLROnPlateauTracedByHand) {
  Linear t;
  auto plateau = std::make_shared<ReduceLROnPlateau>("val_loss", 0.5, 2, MonitorMode::Auto, 1e-4, 1, 0.03);
  t.options.epochs = 7;
  t.options.callbacks = {scripted_val_loss(std::vector<double>(7, 1.0)), plateau};
  const History h = t.model.fit(t.x, t.y, t.options);
  // lr logged at each epoch end before its reduction: waits 0,1,2 -> x0.5 at
  // epoch 2, a cooldown epoch, then 1,2 -> x0.5 at epoch 4 floored at min_lr 0.03.
  const std::vector<double> want{0.1, 0.1, 0.1, 0.05, 0.05, 0.03, 0.03};
  ASSERT_EQ(h["learning_rate"].size(), want.size());
  for (size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(h["learning_rate"][e], want[e], 1e-8) << "epoch " << e;
  EXPECT_NEAR(t.model.learning_rate(), 0.03, 1e-8);
  EXPECT_TRUE(throws<ValueError>([] { ReduceLROnPlateau("val_loss", 1.5); }, {"factor", "(0, 1)"}));
}

TEST(Callbacks, LearningRateSchedulerSetsTheRateTheUpdateUses) {
  Linear t;
  t.options.epochs = 3;
  t.options.validation_split = 0.0;
  t.options.batch_size = 8;  // one update an epoch
  std::vector<std::pair<double, double>> kb;  // (kernel, bias) before each epoch and after the last
  auto weights_now = [&] {
    const std::vector<Tensor> w = t.model.get_weights();
    return std::make_pair(double(w[0].to_vector()[0]), double(w[1].to_vector()[0]));
  };
  kb.push_back(weights_now());
  auto record = std::make_shared<LambdaCallback>();
  record->on_epoch_end_fn = [&](int, Logs&) { kb.push_back(weights_now()); };
  t.options.callbacks = {std::make_shared<LearningRateScheduler>([](int epoch, double lr) { return epoch == 0 ? 0.5 : lr / 2; }),
                         record};
  const History h = t.model.fit(t.x, t.y, t.options);
  EXPECT_EQ(h["learning_rate"], (std::vector<double>{0.5, 0.25, 0.125}));
  // SGD, one update an epoch: k -= lr mean(2 (k x + b - y) x), b -= lr mean(2 (k x + b - y)).
  const std::vector<float> xs = t.x.to_vector(), ys = t.y.to_vector();
  for (size_t e = 0; e < 3; ++e) {
    const double lr = 0.5 / double(1 << e);
    double gk = 0, gb = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double r = kb[e].first * xs[i] + kb[e].second - ys[i];
      gk += 2 * r * xs[i] / double(xs.size());
      gb += 2 * r / double(xs.size());
    }
    EXPECT_NEAR(kb[e + 1].first, kb[e].first - lr * gk, 1e-5) << "epoch " << e;
    EXPECT_NEAR(kb[e + 1].second, kb[e].second - lr * gb, 1e-5) << "epoch " << e;
  }
  t.options.callbacks = {std::make_shared<LearningRateScheduler>([](int, double) { return 0.0; })};
  EXPECT_TRUE(throws<ValueError>([&] { t.model.fit(t.x, t.y, t.options); }, {"returned 0", "epoch 0", "positive"}));
}

TEST(Callbacks, TerminateOnNaNStopsAtTheFirstBadBatch) {
  Sequential m({1});
  m.add(Dense(1));
  m.compile(OptimizerSpec::sgd(1e30f), "mse");
  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel, const std::string& s) { warnings.push_back(s); });
  int batches = 0;
  auto count = std::make_shared<LambdaCallback>();
  count->on_train_batch_end_fn = [&](int64_t, Logs&) { ++batches; };
  FitOptions o;
  o.verbose = 0;
  o.epochs = 10;
  o.batch_size = 1;
  o.shuffle = false;
  o.callbacks = {count, std::make_shared<TerminateOnNaN>()};
  const History h = m.fit(Tensor::from_vector(std::vector<float>{1e10f, -1e10f, 1e10f, 1e10f}, {4, 1}),
                          Tensor::from_vector(std::vector<float>{1e10f, 1e10f, 1e10f, 1e10f}, {4, 1}), o);
  set_log_handler(nullptr);
  EXPECT_LT(batches, 40);
  EXPECT_EQ(h.epoch.size(), size_t((batches + 3) / 4));
  bool named = false;
  for (const std::string& w : warnings) named = named || w.find("TerminateOnNaN: batch " + std::to_string((batches - 1) % 4)) != std::string::npos;
  EXPECT_TRUE(named);
}

TEST(Callbacks, CSVLoggerWritesHistoryAndAppends) {
  const std::string path = ::testing::TempDir() + "tg_csv_logger.csv";
  std::remove(path.c_str());
  Linear t;
  t.options.epochs = 2;
  t.options.callbacks = {std::make_shared<CSVLogger>(path)};
  const History h = t.model.fit(t.x, t.y, t.options);
  t.options.callbacks = {std::make_shared<CSVLogger>(path, ';', true)};
  t.options.epochs = 1;
  const History h2 = t.model.fit(t.x, t.y, t.options);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "epoch,loss,val_loss");
  for (int e = 0; e < 2; ++e) {
    double loss = 0, val = 0;
    int epoch = -1;
    ASSERT_EQ(std::sscanf(lines[size_t(e + 1)].c_str(), "%d,%lf,%lf", &epoch, &loss, &val), 3) << lines[size_t(e + 1)];
    EXPECT_EQ(epoch, e);
    EXPECT_EQ(loss, h["loss"][size_t(e)]);
    EXPECT_EQ(val, h["val_loss"][size_t(e)]);
  }
  double loss = 0, val = 0;
  int epoch = -1;
  ASSERT_EQ(std::sscanf(lines[3].c_str(), "%d;%lf;%lf", &epoch, &loss, &val), 3) << lines[3];
  EXPECT_EQ(epoch, 0);
  EXPECT_EQ(loss, h2["loss"][0]);
  std::remove(path.c_str());
  t.options.callbacks = {std::make_shared<CSVLogger>("/nonexistent-dir/log.csv")};
  EXPECT_TRUE(throws<IOError>([&] { t.model.fit(t.x, t.y, t.options); }, {"CSVLogger", "/nonexistent-dir/log.csv"}));
}

TEST(Callbacks, MisuseIsRefused) {
  Linear t;
  LambdaCallback loose;
  EXPECT_TRUE(throws<StateError>([&] { loose.model(); }, {"not attached", "inside fit"}));
  t.options.callbacks = {nullptr};
  EXPECT_TRUE(throws<ValueError>([&] { t.model.fit(t.x, t.y, t.options); }, {"callbacks[0]", "null"}));
  std::vector<Tensor> w = t.model.get_weights();
  EXPECT_TRUE(throws<ValueError>([&] { t.model.set_weights({w[0]}); }, {"2 weights", "got 1"}));
  EXPECT_TRUE(throws<ShapeError>([&] { t.model.set_weights({w[0], Tensor::zeros(Shape{3})}); }, {"bias", "{3}"}));
  EXPECT_TRUE(throws<ValueError>([&] { EarlyStopping("val_loss", 0.0, -1); }, {"patience", "-1"}));
  Sequential raw({1});
  raw.add(Dense(1));
  EXPECT_TRUE(throws<StateError>([&] { raw.learning_rate(); }, {"compile"}));
}

// A monitor key that never appears is warned about once per fit (naming the
// keys there are); a callback that throws stops training, the exception
// reaches the caller as it was, and the model keeps its last completed update.
TEST(Callbacks, MissingMonitorWarnsOnceAndAThrowingCallbackStopsTraining) {
  Linear t;
  t.options.epochs = 4;
  t.options.callbacks = {std::make_shared<EarlyStopping>("val_acuracy"),
                         std::make_shared<ReduceLROnPlateau>("val_acuracy")};
  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel, const std::string& m) { warnings.push_back(m); });
  const History h = t.model.fit(t.x, t.y, t.options);
  set_log_handler(nullptr);
  EXPECT_EQ(h.epoch.size(), 4u);
  ASSERT_EQ(warnings.size(), 2u);  // one per callback
  EXPECT_NE(warnings[0].find("'val_acuracy'"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("val_loss"), std::string::npos) << warnings[0];

  Linear u;
  std::vector<Tensor> after_batch_1;
  auto thrower = std::make_shared<LambdaCallback>();
  thrower->on_train_batch_end_fn = [&](int64_t b, Logs&) {
    if (b == 1) {
      after_batch_1 = u.model.get_weights();
      throw std::runtime_error("stop here");
    }
  };
  u.options.epochs = 3;
  u.options.callbacks = {thrower};
  try {
    u.model.fit(u.x, u.y, u.options);
    ADD_FAILURE() << "fit did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "stop here");
  }
  ASSERT_EQ(after_batch_1.size(), 2u);
  EXPECT_EQ(u.model.get_weights()[0].to_vector(), after_batch_1[0].to_vector());
  EXPECT_EQ(u.model.get_weights()[1].to_vector(), after_batch_1[1].to_vector());
  EXPECT_TRUE(throws<StateError>([&] { thrower->model(); }, {"not attached"}));  // detached on the way out
}
