// The gather Vulkan kernels against the CPU's. Tolerances
// (|vulkan - cpu| <= atol + rtol |cpu|):
//  - Gather: exact (a copy).
//  - GatherBackward: 1e-5 relative. The shader adds each row's gradients to
//    0 in increasing position, the CPU's order, so it gives the CPU's bits;
//    the margin leaves room for a future kernel that sums in another fixed
//    order. Two Vulkan runs must give the same bits.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::all_weights;
using test_support::OpCase;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Ids of `shape` in [0, vocab), each id repeated when shape has more
// elements than vocab.
Tensor ids(const Shape& shape, int32_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(size_t(shape.numel()));
  for (int32_t& id : v) id = dist(gen);
  return Tensor::from_vector(v, shape);
}

// Random values with NaN and infinities where there is room.
Tensor values(const Shape& s, uint32_t seed) {
  Tensor t = test_support::random_tensor(s, seed);
  if (t.numel() >= 40) {
    t.data<float>()[7] = NAN;
    t.data<float>()[20] = kInf;
    t.data<float>()[33] = -kInf;
  }
  return t;
}

Shape with_last(const Shape& s, int64_t d) {
  std::vector<int64_t> dims;
  for (int i = 0; i < s.rank(); ++i) dims.push_back(s[i]);
  dims.push_back(d);
  return Shape(std::span<const int64_t>(dims));
}

OpCase gather_case(const Tensor& table, const Tensor& id) {
  OpCase c;
  c.op = OpKind::Gather;
  c.inputs = {table, id};
  return c;
}

OpCase backward_case(const Tensor& g, const Tensor& id, const Shape& table) {
  OpCase c;
  c.op = OpKind::GatherBackward;
  c.attrs.shape = table;
  c.inputs = {g, id};
  return c;
}

struct Sizes {
  int64_t vocab, d;
  Shape ids;
};

}  // namespace

// Ids of rank 1 and 2, repeated ids, one row, one column, odd widths, rows
// wider than a workgroup (lanes with several columns), more ids than one
// chunk of the backward's scan (512 ids), vocabularies of one and of several
// workgroups of rows.
TEST(VulkanGather, GatherAndBackward) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<Sizes> sizes{{1, 1, {1}},       {1, 5, {9}},        {7, 1, {3, 4}},     {10, 33, {2, 3}},
                                 {5, 300, {17}},    {300, 1, {5000}},   {7, 3, {4100}},     {1000, 64, {33, 65}},
                                 {50, 257, {3, 7}}, {2, 8, {1, 2049}}, {513, 5, {2048}}};
  uint32_t seed = 1;
  for (const Sizes& s : sizes) {
    SCOPED_TRACE("table {" + std::to_string(s.vocab) + ", " + std::to_string(s.d) + "}, ids " + s.ids.str());
    const Shape table_shape{s.vocab, s.d};
    const Tensor table = values(table_shape, seed++), id = ids(s.ids, int32_t(s.vocab), seed++);
    test_support::expect_same_as_cpu(gather_case(table, id), vk, 0, 0);
    const Tensor g = values(with_last(s.ids, s.d), seed++);
    test_support::expect_same_as_cpu(backward_case(g, id, table_shape), vk, 1e-5, 0);
  }
}

// Every id the same (one row takes all the sums), and each id once.
TEST(VulkanGather, BackwardAllOneIdAndEachIdOnce) {
  TG_VULKAN_OR_SKIP(vk);
  const Shape table{40, 6};
  const Tensor same = Tensor::from_vector(std::vector<int32_t>(3000, 17), Shape{3000});
  std::vector<int32_t> perm(40);
  for (int32_t i = 0; i < 40; ++i) perm[size_t(i)] = (i * 7) % 40;
  const Tensor once = Tensor::from_vector(perm, Shape{40});
  test_support::expect_same_as_cpu(backward_case(values({3000, 6}, 1), same, table), vk, 1e-5, 0);
  test_support::expect_same_as_cpu(backward_case(values({40, 6}, 2), once, table), vk, 1e-5, 0);
}

// Two Vulkan runs give the same bits.
TEST(VulkanGather, BackwardIsDeterministic) {
  TG_VULKAN_OR_SKIP(vk);
  const Shape table{97, 19};
  const Tensor id = ids({4099}, 97, 5), g = test_support::random_tensor({4099, 19}, 6);
  const OpCase c = backward_case(g, id, table);
  const auto a = test_support::run_op(c, vk).output, b = test_support::run_op(c, vk).output;
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)), 0);
}

namespace {

// What `f` throws as IndexError, or "" when it throws nothing.
template <class F>
std::string index_error(F&& f) {
  try {
    f();
  } catch (const IndexError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// An id outside [0, V): the CPU's kernel throws IndexError naming the id and
// its position; the Vulkan kernel reports it in its status words, never
// reads outside the table, and the host throws the same error after the
// submit. With one bad id the messages are the same; with several, the
// Vulkan kernel names one of them (the CPU the first).
TEST(VulkanGather, AnIdOutsideTheTableThrowsTheCpusIndexError) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor table = test_support::random_tensor({4, 3}, 7);
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{2, 4, 0}, std::vector<int32_t>{-1, 1, 3}}) {
    const OpCase c = gather_case(table, Tensor::from_vector(bad, Shape{3}));
    const std::string want = index_error([&] { test_support::run_op(c, cpu_backend()); });
    ASSERT_NE(want, "");
    EXPECT_EQ(index_error([&] { test_support::run_op(c, vk); }), want);
  }
  const OpCase several = gather_case(table, Tensor::from_vector(std::vector<int32_t>{2, -1, 4, 1 << 30, 0}, Shape{5}));
  const std::string got = index_error([&] { test_support::run_op(several, vk); });
  EXPECT_TRUE(got.find("gather: id -1 at position 1 ") == 0 || got.find("gather: id 4 at position 2 ") == 0 ||
              got.find("gather: id 1073741824 at position 3 ") == 0)
      << got;
  EXPECT_NE(got.find("outside the table of 4 rows [0, 4)"), std::string::npos) << got;
}

// In one submission with the bad gather, the kernels that change state do
// nothing (here a moving average of the gathered rows), and the report is
// cleared: the next run with good ids gives the CPU's values.
TEST(VulkanGather, ABadIdLeavesStateAsItWasAndIsReportedOnce) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor table = test_support::random_tensor({4, 3}, 11);
  const Tensor avg0 = test_support::random_tensor({2, 3}, 12);
  struct Run {
    Tensor avg;
    std::unique_ptr<Executable> exe;
    Value ids;
  };
  auto make = [&](const std::shared_ptr<const Backend>& b) {
    Run r;
    r.avg = avg0.clone().to(b->device());
    Graph g;
    const Value t = g.input("table", table.shape(), DType::Float32);
    r.ids = g.input("ids", Shape{2}, DType::Int32);
    const Value rows = g.apply(OpKind::Gather, {t, r.ids});
    OpAttrs m;
    m.momentum = 0.5f;
    const Value avg = g.apply(OpKind::MovingAverage, {g.state(r.avg, "avg"), rows}, m);
    r.exe = std::make_unique<Executable>(std::move(g), std::vector<Value>{avg}, BatchRule{}, b, FusionOptions::none());
    r.exe->bind(t, table);
    return r;
  };
  Run dev = make(vk), cpu = make(cpu_backend());
  dev.exe->bind(dev.ids, Tensor::from_vector(std::vector<int32_t>{1, 9}, Shape{2}));
  EXPECT_NE(index_error([&] { dev.exe->run(); }), "");
  EXPECT_EQ(test_support::values(dev.avg), test_support::values(avg0));
  const Tensor good = Tensor::from_vector(std::vector<int32_t>{3, 0}, Shape{2});
  dev.exe->bind(dev.ids, good);
  cpu.exe->bind(cpu.ids, good);
  dev.exe->run();
  cpu.exe->run();
  EXPECT_EQ(test_support::values(dev.avg), test_support::values(cpu.avg));
}

// The brief's size: V = 10000, D = 64, N = 4096 (the time of one Vulkan
// run of the compiled executable is printed).
TEST(VulkanGather, BackwardLargeVocabulary) {
  TG_VULKAN_OR_SKIP(vk);
  const Shape table{10000, 64};
  const Tensor id = ids({4096}, 10000, 8), g = test_support::random_tensor({4096, 64}, 9);
  test_support::expect_same_as_cpu(backward_case(g, id, table), vk, 1e-5, 0);
  Graph graph;
  const Value gi = graph.input("g", g.shape(), DType::Float32), ii = graph.input("ids", id.shape(), DType::Int32);
  OpAttrs at;
  at.shape = table;
  const Value out = graph.apply(OpKind::GatherBackward, {gi, ii}, at);
  Executable exe(std::move(graph), {out}, BatchRule{}, vk, FusionOptions::none());
  exe.bind(gi, g);
  exe.bind(ii, id);
  exe.run();
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < 5; ++k) exe.run();
  (void)exe.output(out).to(Device::CPU);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 5;
  std::printf("GatherBackward V=10000 D=64 N=4096: %.2f ms per run\n", ms);
}

namespace {

// An embedding of 6 token ids (repeated within rows), flattened, a softmax head.
nn::Sequential embedding_model(Device device) {
  nn::clear_session();
  manual_seed(13);
  nn::Sequential m({6});
  m.add(nn::Embedding(20, 5));
  m.add(nn::Flatten());
  m.add(nn::Dense(3, "softmax"));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, device);
  return m;
}

}  // namespace

// The kernels through a model's planned graphs (ids converted by ToIndex):
// losses and weights within the model tests' 2e-4 relative plus 1e-5
// absolute after a few Adam steps.
TEST(VulkanGather, AnEmbeddingModelTrainsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  std::vector<float> tokens(48 * 6);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = float((i * 7 + i / 6) % 20);
  const Tensor x = Tensor::from_vector(tokens, Shape{48, 6});
  std::vector<int32_t> labels(48);
  for (int32_t i = 0; i < 48; ++i) labels[size_t(i)] = (i * 5 + 1) % 3;
  const Tensor y = Tensor::from_vector(labels, Shape{48});
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 16;
  fo.shuffle = false;
  fo.verbose = 0;
  nn::Sequential cpu = embedding_model(Device::CPU), dev = embedding_model(vk->device());
  ASSERT_EQ(all_weights(cpu), all_weights(dev));
  const nn::History hc = cpu.fit(x, y, fo), hd = dev.fit(x, y, fo);
  EXPECT_TRUE(test_support::close(hd["loss"], hc["loss"], 2e-4, 1e-5));
  EXPECT_TRUE(test_support::close(all_weights(dev), all_weights(cpu), 2e-4, 1e-5));
}
