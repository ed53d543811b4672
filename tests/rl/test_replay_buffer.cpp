// rl::ReplayBuffer and rl::PrioritizedReplayBuffer: the ring at capacity,
// n-step sums by hand (termination, truncation, the newest transition), the
// prioritized draw's frequencies against the priorities (chi-squared at a
// fixed seed), its importance weights against Schaul et al.'s formula, the
// state through a Trainer's checkpoint (a resumed run repeats bit for bit),
// and bad input as typed errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "tensorgrad/rl/replay_buffer.h"
#include "test_files.h"
#include "test_support.h"

namespace {
namespace tg = tensorgrad;
using tg::rl::PrioritizedReplayBuffer;
using tg::rl::ReplayBatch;
using tg::rl::ReplayBuffer;
using tg::rl::ReplayBufferOptions;

tg::Tensor obs(float v, int64_t n = 2) {
  tg::Tensor t = tg::Tensor::empty(tg::Shape{n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v + 0.5f * float(i);
  return t;
}

// Slot numbers as the Int64 tensor update_priorities takes.
tg::Tensor int64s(const std::vector<int64_t>& v) {
  tg::Tensor t = tg::Tensor::empty(tg::Shape{int64_t(v.size())}, tg::DType::Int64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

ReplayBufferOptions options(int64_t capacity, int n_step = 1, float gamma = 0.99f) {
  ReplayBufferOptions o;
  o.capacity = capacity;
  o.observation_shape = tg::Shape{2};
  o.n_step = n_step;
  o.gamma = gamma;
  o.seed = 5;
  return o;
}

// Transition t: observation t, action t % 3, reward t + 1, next observation t + 1.
void add_transition(ReplayBuffer& b, int t, bool terminated = false, bool truncated = false) {
  b.add(obs(float(t)), int64_t(t % 3), float(t + 1), obs(float(t + 1)), terminated, truncated);
}

// Which transition each stored slot holds, read back through the observations of a large sample.
struct Row {
  float observation, next_observation, reward, done, discount;
  int32_t action;
  int64_t slot;
};
std::vector<Row> rows(const ReplayBatch& b) {
  std::vector<Row> r;
  for (int64_t i = 0; i < b.size(); ++i)
    r.push_back({b.observations.data<float>()[2 * i], b.next_observations.data<float>()[2 * i],
                 b.rewards.data<float>()[i], b.dones.data<float>()[i], b.discounts.data<float>()[i],
                 b.actions.data<int32_t>()[i], b.indices.data<int64_t>()[i]});
  return r;
}
}  // namespace

TEST(ReplayBuffer, IsARingAtCapacity) {
  ReplayBuffer b(options(4));
  for (int t = 0; t < 6; ++t) add_transition(b, t);
  EXPECT_EQ(b.size(), 4);
  // Slots 0 and 1 were overwritten by transitions 4 and 5; slots 2 and 3 hold 2 and 3.
  ReplayBatch batch = b.make_batch(4);
  std::vector<int> seen(4, 0);
  for (int k = 0; k < 50; ++k) {
    b.sample(batch);
    for (const Row& r : rows(batch)) {
      const int want[4] = {4, 5, 2, 3};
      ASSERT_GE(r.slot, 0);
      ASSERT_LT(r.slot, 4);
      EXPECT_EQ(r.observation, float(want[r.slot]));
      EXPECT_EQ(r.next_observation, float(want[r.slot] + 1));
      EXPECT_EQ(r.action, want[r.slot] % 3);
      EXPECT_EQ(r.reward, float(want[r.slot] + 1));
      EXPECT_EQ(r.done, 0.0f);
      EXPECT_FLOAT_EQ(r.discount, 0.99f);
      ++seen[size_t(r.slot)];
    }
  }
  for (int s = 0; s < 4; ++s) EXPECT_GT(seen[size_t(s)], 20) << "slot " << s;  // 200 uniform draws over 4 slots
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(batch.weights.data<float>()[i], 1.0f);
}

TEST(ReplayBuffer, NStepSumsStopAtEpisodeEndsAndTheNewestTransition) {
  // Rewards 1..7 with gamma 0.5 and n = 3; transition 2 terminates, transition 4 is truncated
  // (a time limit), 6 is the newest.
  const float g = 0.5f;
  for (bool timeout_is_terminal : {false, true}) {
    ReplayBufferOptions o = options(16, 3, g);
    o.handle_timeout_termination = !timeout_is_terminal;
    ReplayBuffer b(o);
    for (int t = 0; t < 7; ++t) add_transition(b, t, t == 2, t == 4);
    struct Want {
      float reward, discount, next, done;
    };
    const Want want[7] = {
        {1 + g * 2 + g * g * 3, g * g * g, 3, 1},  // 0: 0, 1, 2 (2 terminates: the sum stops there anyway)
        {2 + g * 3, g * g, 3, 1},                  // 1: 1, 2 (terminated)
        {3, g, 3, 1},                              // 2: terminated at once
        {4 + g * 5, g * g, 5, timeout_is_terminal ? 1.0f : 0.0f},  // 3: 3, 4 (truncated: bootstraps unless told)
        {5, g, 5, timeout_is_terminal ? 1.0f : 0.0f},              // 4: truncated at once
        {6 + g * 7, g * g, 7, 0},                                  // 5: 5, 6 (the newest)
        {7, g, 7, 0},                                              // 6: the newest
    };
    ReplayBatch batch = b.make_batch(7);
    std::vector<bool> seen(7, false);
    for (int k = 0; k < 30; ++k) {
      b.sample(batch);
      for (const Row& r : rows(batch)) {
        const Want& w = want[r.slot];
        EXPECT_FLOAT_EQ(r.reward, w.reward) << "slot " << r.slot;
        EXPECT_FLOAT_EQ(r.discount, w.discount) << "slot " << r.slot;
        EXPECT_EQ(r.next_observation, w.next) << "slot " << r.slot;
        EXPECT_EQ(r.done, w.done) << "slot " << r.slot;
        EXPECT_EQ(r.observation, float(r.slot)) << "the first step's observation";
        seen[size_t(r.slot)] = true;
      }
    }
    for (int s = 0; s < 7; ++s) EXPECT_TRUE(seen[size_t(s)]) << "slot " << s << " never drawn";
  }
}

TEST(ReplayBuffer, NStepSumsDoNotRunFromTheNewestIntoTheOldest) {
  // Capacity 4 after 6 transitions holds 4, 5, 2, 3 in slots 0..3: from 3 the sum runs on to 4 and
  // 5 across the wrap; from 5 (the newest, slot 1) it stops rather than continue into 2.
  ReplayBuffer b(options(4, 3, 0.5f));
  for (int t = 0; t < 6; ++t) add_transition(b, t);
  ReplayBatch batch = b.make_batch(4);
  for (int k = 0; k < 20; ++k) {
    b.sample(batch);
    for (const Row& r : rows(batch)) {
      const int first = int(r.observation);
      const int last = std::min(first + 2, 5);
      float sum = 0.0f, d = 1.0f;
      for (int t = first; t <= last; ++t, d *= 0.5f) sum += d * float(t + 1);
      EXPECT_FLOAT_EQ(r.reward, sum) << "from transition " << first;
      EXPECT_EQ(r.next_observation, float(last + 1)) << "from transition " << first;
      EXPECT_FLOAT_EQ(r.discount, d) << "from transition " << first;
    }
  }
}

TEST(ReplayBuffer, StoresAnyShapeAndDtype) {
  // Int32 token observations {3} and float actions {2}.
  ReplayBufferOptions o;
  o.capacity = 3;
  o.observation_shape = tg::Shape{3};
  o.observation_dtype = tg::DType::Int32;
  o.action_shape = tg::Shape{2};
  o.action_dtype = tg::DType::Float32;
  ReplayBuffer b(o);
  const std::vector<int32_t> tokens{7, 8, 9}, next{8, 9, 10};
  const std::vector<float> action{0.25f, -1.5f};
  b.add(tg::Tensor::from_vector(tokens, tg::Shape{1, 3}), tg::Tensor::from_vector(action, tg::Shape{2}), 2.0f,
        tg::Tensor::from_vector(next, tg::Shape{3}), false, false);
  ReplayBatch batch = b.make_batch(1);
  b.sample(batch);
  EXPECT_EQ(batch.observations.shape(), (tg::Shape{1, 3}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(batch.observations.data<int32_t>()[i], tokens[size_t(i)]);
    EXPECT_EQ(batch.next_observations.data<int32_t>()[i], next[size_t(i)]);
  }
  EXPECT_EQ(batch.actions.data<float>()[0], 0.25f);
  EXPECT_EQ(batch.actions.data<float>()[1], -1.5f);
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { b.add(obs(0, 3), int64_t(1), 0, obs(0, 3), false, false); },
                                                   {"needs a buffer of discrete actions"}));
}

TEST(ReplayBuffer, RefusesBadInputWithTypedErrors) {
  using test_support::throws;
  EXPECT_TRUE(throws<tg::ValueError>([] { ReplayBuffer(options(0)); }, {"capacity must be at least 1; got 0"}));
  EXPECT_TRUE(throws<tg::ValueError>([] { ReplayBuffer(options(4, 0)); }, {"n_step must be at least 1"}));
  EXPECT_TRUE(throws<tg::ValueError>([] { ReplayBuffer(options(4, 1, 1.5f)); }, {"gamma must be in [0, 1]"}));
  ReplayBuffer b(options(4));
  EXPECT_TRUE(throws<tg::ShapeError>([&] { b.add(obs(0, 3), int64_t(0), 1, obs(1), false, false); },
                                     {"observation must have the buffer's shape {2}", "got {3}"}));
  EXPECT_TRUE(throws<tg::ShapeError>([&] { b.add(obs(0), int64_t(0), 1, obs(1, 5), false, false); },
                                     {"next_observation", "got {5}"}));
  const std::vector<int32_t> ints{1, 2};
  EXPECT_TRUE(throws<tg::TypeError>(
      [&] { b.add(tg::Tensor::from_vector(ints, tg::Shape{2}), int64_t(0), 1, obs(1), false, false); },
      {"observation must be float32", "got int32"}));
  EXPECT_TRUE(throws<tg::ValueError>([&] { b.add(obs(0), int64_t(0), NAN, obs(1), false, false); },
                                     {"the reward must be finite"}));
  EXPECT_TRUE(throws<tg::ValueError>([&] { b.add(obs(0), tg::Tensor(), 1, obs(1), false, false); },
                                     {"action is an undefined tensor"}));
  EXPECT_EQ(b.size(), 0) << "nothing stored on error";
  ReplayBatch batch = b.make_batch(2);
  EXPECT_TRUE(throws<tg::ValueError>([&] { b.sample(batch); }, {"asks for 2 transitions but the buffer holds 0"}));
  add_transition(b, 0);
  EXPECT_TRUE(throws<tg::ValueError>([&] { b.sample(batch); }, {"asks for 2 transitions but the buffer holds 1"}));
  ReplayBatch other = ReplayBuffer(options(4, 1)).make_batch(1);
  other.observations = tg::Tensor::zeros(tg::Shape{1, 3});
  EXPECT_TRUE(throws<tg::ShapeError>([&] { b.sample(other); }, {"observations must be a host float32 tensor {1, 2}"}));
  EXPECT_TRUE(throws<tg::ValueError>([&] { b.make_batch(0); }, {"batch_size must be at least 1"}));
}

TEST(PrioritizedReplayBuffer, DrawsInProportionToPriorities) {
  // Eight slots with TD errors of different sizes: 200,000 draws against P(i) = p_i^a / sum p^a.
  ReplayBufferOptions o = options(8);
  tg::rl::PrioritizedReplayOptions po;
  po.alpha = 0.6;
  PrioritizedReplayBuffer b(o, po);
  for (int t = 0; t < 8; ++t) add_transition(b, t);
  const std::vector<float> td{0.1f, 0.5f, 1.0f, 2.0f, 3.0f, 0.2f, 0.7f, 1.5f};
  std::vector<int64_t> slots{0, 1, 2, 3, 4, 5, 6, 7};
  b.update_priorities(int64s(slots),
                      tg::Tensor::from_vector(td, tg::Shape{8}));
  std::vector<double> p(8);
  double total = 0.0;
  for (int i = 0; i < 8; ++i) total += p[size_t(i)] = std::pow(double(td[size_t(i)]) + po.epsilon, po.alpha);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(b.priority(i), p[size_t(i)], 1e-6 * p[size_t(i)]);
  std::vector<double> counts(8, 0.0);
  ReplayBatch batch = b.make_batch(8);
  const int draws = 200000;
  for (int k = 0; k < draws / 8; ++k) {
    b.sample(batch);
    for (int64_t i = 0; i < 8; ++i) counts[size_t(batch.indices.data<int64_t>()[i])] += 1.0;
  }
  double chi2 = 0.0, chi2_uniform = 0.0;
  for (int i = 0; i < 8; ++i) {
    const double want = draws * p[size_t(i)] / total, flat = draws / 8.0;
    chi2 += (counts[size_t(i)] - want) * (counts[size_t(i)] - want) / want;
    chi2_uniform += (counts[size_t(i)] - flat) * (counts[size_t(i)] - flat) / flat;
  }
  // 7 degrees of freedom: 24.32 is the 0.999 quantile. The same counts are far from uniform.
  EXPECT_LT(chi2, 24.32);
  EXPECT_GT(chi2_uniform, 1000.0);
}

TEST(PrioritizedReplayBuffer, WeightsFollowTheImportanceSamplingFormula) {
  ReplayBufferOptions o = options(8);
  tg::rl::PrioritizedReplayOptions po;
  po.alpha = 0.7;
  po.beta = {0.4, 1.0, 10};
  PrioritizedReplayBuffer b(o, po);
  for (int t = 0; t < 5; ++t) add_transition(b, t);  // 5 of 8 slots: N = 5
  const std::vector<float> td{0.3f, -2.0f, 0.05f, 1.0f, 4.0f};
  const std::vector<int64_t> slots{0, 1, 2, 3, 4};
  b.update_priorities(int64s(slots),
                      tg::Tensor::from_vector(td, tg::Shape{5}));
  double total = 0.0, pmin = 1e300;
  std::vector<double> p(5);
  for (int i = 0; i < 5; ++i) {
    p[size_t(i)] = std::pow(std::abs(double(td[size_t(i)])) + po.epsilon, po.alpha);
    total += p[size_t(i)];
    pmin = std::min(pmin, p[size_t(i)]);
  }
  ReplayBatch batch = b.make_batch(5);
  for (int call = 0; call < 12; ++call) {
    const double beta = 0.4 + 0.6 * std::min(call / 10.0, 1.0);
    EXPECT_DOUBLE_EQ(b.beta(), beta);
    b.sample(batch);
    const double max_w = std::pow(5.0 * pmin / total, -beta);
    for (int64_t i = 0; i < 5; ++i) {
      const int64_t s = batch.indices.data<int64_t>()[i];
      const double want = std::pow(5.0 * p[size_t(s)] / total, -beta) / max_w;
      EXPECT_NEAR(batch.weights.data<float>()[i], want, 2e-6 * want) << "call " << call << " slot " << s;
      EXPECT_LE(batch.weights.data<float>()[i], 1.0f);
    }
  }
}

TEST(PrioritizedReplayBuffer, NewTransitionsGetTheLargestPriority) {
  PrioritizedReplayBuffer b(options(4));
  add_transition(b, 0);
  EXPECT_DOUBLE_EQ(b.priority(0), 1.0);  // nothing updated yet: 1^alpha
  const std::vector<int64_t> slot{0};
  b.update_priorities(int64s(slot),
                      tg::Tensor::from_vector(std::vector<float>{3.0f}, tg::Shape{1}));
  add_transition(b, 1);
  EXPECT_NEAR(b.priority(1), std::pow(3.0 + 1e-6, 0.6), 1e-6);
  EXPECT_NEAR(b.priority(0), b.priority(1), 1e-6);
}

TEST(PrioritizedReplayBuffer, RefusesBadPrioritiesWithTypedErrors) {
  using test_support::throws;
  PrioritizedReplayBuffer b(options(4));
  add_transition(b, 0);
  add_transition(b, 1);
  const std::vector<int64_t> slots{0, 1};
  const tg::Tensor idx = int64s(slots);
  const double before = b.priority(0);
  EXPECT_TRUE(throws<tg::ValueError>(
      [&] { b.update_priorities(idx, tg::Tensor::from_vector(std::vector<float>{0.5f, NAN}, tg::Shape{2})); },
      {"td_errors[1] is nan", "finite TD error"}));
  EXPECT_EQ(b.priority(0), before) << "nothing changes on error";
  const std::vector<int64_t> far{0, 3};
  EXPECT_TRUE(throws<tg::IndexError>(
      [&] {
        b.update_priorities(int64s(far),
                            tg::Tensor::from_vector(std::vector<float>{0.5f, 1.0f}, tg::Shape{2}));
      },
      {"indices[1] = 3 is not a stored slot (0 to 1)"}));
  EXPECT_TRUE(throws<tg::ShapeError>(
      [&] { b.update_priorities(idx, tg::Tensor::from_vector(std::vector<float>{1.0f}, tg::Shape{1})); },
      {"td_errors must be a Float32 tensor of the indices' shape {2}"}));
  EXPECT_TRUE(throws<tg::TypeError>(
      [&] { b.update_priorities(tg::Tensor::zeros(tg::Shape{2}), tg::Tensor::zeros(tg::Shape{2})); },
      {"indices must be an Int64 tensor"}));
  tg::rl::PrioritizedReplayOptions bad;
  bad.alpha = -1.0;
  EXPECT_TRUE(throws<tg::ValueError>([&] { PrioritizedReplayBuffer(options(4), bad); }, {"alpha must be"}));
  bad = {};
  bad.beta.steps = -1;
  EXPECT_TRUE(throws<tg::ValueError>([&] { PrioritizedReplayBuffer(options(4), bad); }, {"steps >= 0"}));
  EXPECT_TRUE(throws<tg::IndexError>([&] { b.priority(2); }, {"slot 2 is not stored"}));
}

namespace {

// A small Q-style regression trained on batches drawn from `buffer`: the loop an agent runs.
struct Loop {
  tg::nn::Trainer trainer;
  std::unique_ptr<ReplayBuffer> buffer;
  ReplayBatch batch;
  tg::Tensor y = tg::Tensor::zeros(tg::Shape{8, 1});

  static tg::nn::Trainer make_trainer() {
    tg::nn::clear_session();  // the same layer names in every loop: a checkpoint loads by name
    tg::manual_seed(3);
    tg::nn::Sequential m({2});
    m.add(tg::nn::Dense(8, "relu"));
    m.add(tg::nn::Dense(1));
    m.compile(tg::OptimizerSpec::adam(1e-2f), "mse");
    tg::nn::TrainerOptions opts;
    opts.batch_size = 8;
    return tg::nn::Trainer(m, opts);
  }
  explicit Loop(bool prioritized)
      : trainer(make_trainer()),
        buffer(prioritized ? std::unique_ptr<ReplayBuffer>(new PrioritizedReplayBuffer(options(32, 2, 0.9f)))
                           : std::make_unique<ReplayBuffer>(options(32, 2, 0.9f))) {
    batch = buffer->make_batch(8);
  }
  // One transition in, one training step out; returns the loss and what was drawn.
  float step(int t, std::vector<float>& drawn) {
    add_transition(*buffer, t, t % 7 == 6);
    if (buffer->size() < 8) return 0.0f;
    buffer->sample(batch);
    for (int64_t i = 0; i < 8; ++i) y.data<float>()[i] = batch.rewards.data<float>()[i];
    const float loss = trainer.step(batch.observations, y);
    for (int64_t i = 0; i < 8; ++i) drawn.push_back(float(batch.indices.data<int64_t>()[i]));
    if (auto* per = dynamic_cast<PrioritizedReplayBuffer*>(buffer.get()))
      per->update_priorities(batch.indices, batch.rewards);  // any finite errors: the priorities change
    return loss;
  }
};

}  // namespace

TEST(ReplayBuffer, ResumesBitForBitThroughATrainerCheckpoint) {
  test_support::ThreadsGuard threads;
  tg::set_num_threads(1);
  const test_support::TempDir dir;
  const std::string path = dir / "replay_resume.gguf";
  for (bool prioritized : {false, true}) {
    std::vector<float> straight_losses, resumed_losses, straight_drawn, resumed_drawn, ignore;
    {
      Loop a(prioritized);
      for (int t = 0; t < 40; ++t) a.step(t, ignore);  // past capacity: the ring has wrapped
      tg::io::save_checkpoint(a.trainer, path, {a.buffer.get()});
      for (int t = 40; t < 60; ++t) straight_losses.push_back(a.step(t, straight_drawn));
    }
    Loop b(prioritized);
    tg::io::load_checkpoint(b.trainer, path, {b.buffer.get()});
    EXPECT_EQ(b.buffer->size(), 32);
    for (int t = 40; t < 60; ++t) resumed_losses.push_back(b.step(t, resumed_drawn));
    EXPECT_EQ(straight_drawn, resumed_drawn) << (prioritized ? "prioritized" : "uniform");
    EXPECT_EQ(straight_losses, resumed_losses) << (prioritized ? "prioritized" : "uniform");
    // A fresh loop without the load draws otherwise: the test can tell.
    Loop c(prioritized);
    std::vector<float> fresh;
    for (int t = 0; t < 20; ++t) c.step(t + 40, fresh);
    EXPECT_NE(fresh, resumed_drawn);
  }
}

TEST(ReplayBuffer, CheckpointRefusesOtherStatesAndKeepsTheBuffer) {
  const test_support::TempDir dir;
  const std::string path = dir / "replay_mismatch.gguf";
  Loop a(false);
  std::vector<float> ignore;
  for (int t = 0; t < 10; ++t) a.step(t, ignore);
  tg::io::save_checkpoint(a.trainer, path, {a.buffer.get()});
  Loop b(true);
  add_transition(*b.buffer, 99);
  EXPECT_TRUE(test_support::throws<tg::ValueError>(
      [&] { tg::io::load_checkpoint(b.trainer, path, {b.buffer.get()}); },
      {"holds the states of [ReplayBuffer]", "given are [PrioritizedReplayBuffer]"}));
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { tg::io::load_checkpoint(b.trainer, path); },
                                                   {"[ReplayBuffer]", "given are []"}));
  EXPECT_EQ(b.buffer->size(), 1) << "nothing changes on error";
  // Another capacity: refused by the buffer itself, after which nothing has changed either.
  Loop c(false);
  ReplayBuffer small(options(4, 2, 0.9f));
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { tg::io::load_checkpoint(c.trainer, path, {&small}); },
                                                   {"a buffer of capacity 32; this one holds 4"}));
  EXPECT_EQ(small.size(), 0);
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { tg::io::save_checkpoint(a.trainer, path, {nullptr}); },
                                                   {"states[0] is null"}));
}

TEST(ReplayBuffer, SavesObservationsOfFiveDimensions) {
  // {size, 1, 2, 2, 2, 1} is six dimensions, more than GGUF's four: the state flattens each item.
  ReplayBufferOptions o;
  o.capacity = 3;
  o.observation_shape = tg::Shape{1, 2, 2, 2, 1};
  ReplayBuffer a(o), b(o);
  for (int t = 0; t < 2; ++t) {
    tg::Tensor x = tg::Tensor::full(o.observation_shape, float(t)), next = tg::Tensor::full(o.observation_shape, t + 1.0f);
    a.add(x, int64_t(t), 1.0f, next, false, false);
  }
  const test_support::TempDir dir;
  Loop loop(false);
  tg::io::save_checkpoint(loop.trainer, dir / "five.gguf", {&a});
  tg::io::load_checkpoint(loop.trainer, dir / "five.gguf", {&b});
  ReplayBatch ba = a.make_batch(2), bb = b.make_batch(2);
  a.sample(ba);
  b.sample(bb);
  EXPECT_TRUE(test_support::bit_equal(ba.observations, bb.observations));
  EXPECT_TRUE(test_support::bit_equal(ba.next_observations, bb.next_observations));
  o.observation_shape = tg::Shape{2, 0};
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { ReplayBuffer{o}; }, {"need at least one element"}));
}
