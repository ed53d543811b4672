// The pooling Vulkan kernels against the CPU's. Tolerances
// (|vulkan - cpu| <= atol + rtol |cpu|):
//  - MaxPool2D, MaxPool2DBackward: exact (comparisons and, where windows
//    overlap, the same additions in the CPU's order).
//  - AvgPool2D: 1e-6 relative. The shader takes the CPU's taps in its order
//    and its 1 / count (corrected to the correctly rounded reciprocal), so it
//    gives the CPU's bits on lavapipe; the margin is for a driver whose
//    division rounds the correction differently.
//  - AvgPool2DBackward: 1e-6 relative plus 2e-6 absolute. The shader adds
//    the products g / count unfused (`precise`), in the CPU's order; the
//    CPU's compiler may fuse them into multiply-adds (GCC's default
//    contraction with -march=native), which moves each term by half an ulp
//    of g / count, an absolute error that survives where the terms cancel
//    (2^-27 seen where the exact sum is 0); the tests' |g| <= 10 bound it
//    by 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::all_weights;
using test_support::OpCase;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Window2D window(int64_t k, int64_t s, int64_t pad = 0, int64_t d = 1) {
  Window2D w;
  w.kh = w.kw = k;
  w.sh = w.sw = s;
  w.dh = w.dw = d;
  w.pad_top = w.pad_left = w.pad_bottom = w.pad_right = pad;
  return w;
}

// Keras' "same" padding of a k x k window with stride s over h x w: output
// ceil(h / s), the padding split with the extra row at the bottom and right.
Window2D same(int64_t k, int64_t s, int64_t h, int64_t w) {
  Window2D win = window(k, s);
  const int64_t ph = std::max<int64_t>(((h + s - 1) / s - 1) * s + k - h, 0);
  const int64_t pw = std::max<int64_t>(((w + s - 1) / s - 1) * s + k - w, 0);
  win.pad_top = ph / 2;
  win.pad_bottom = ph - ph / 2;
  win.pad_left = pw / 2;
  win.pad_right = pw - pw / 2;
  return win;
}

std::string str(const Window2D& w) {
  return std::to_string(w.kh) + "x" + std::to_string(w.kw) + " stride " + std::to_string(w.sh) + "x" +
         std::to_string(w.sw) + " dilation " + std::to_string(w.dh) + " pads " + std::to_string(w.pad_top) + "," +
         std::to_string(w.pad_left) + "," + std::to_string(w.pad_bottom) + "," + std::to_string(w.pad_right);
}

bool fits(const Window2D& w, const Shape& x) {
  return w.dh * (w.kh - 1) + 1 <= x[1] + w.pad_top + w.pad_bottom &&
         w.dw * (w.kw - 1) + 1 <= x[2] + w.pad_left + w.pad_right;
}

// x with values on a coarse grid (ties within windows: the first maximum's
// case; signed zeros among them), NaN and infinities where `special`.
Tensor image(const Shape& s, uint32_t seed, bool special) {
  Tensor x = test_support::random_tensor(s, seed, 2.0f);
  float* p = x.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::round(p[i] * 2.0f) / 2.0f;
    if (p[i] == 0.0f && i % 2) p[i] = -0.0f;
  }
  if (special && n >= 20) {
    p[n / 3] = NAN;
    p[n / 2] = kInf;
    p[n / 5] = -kInf;
    p[n - 1] = NAN;
    p[n / 7] = kInf;
    p[n / 7 + 1] = NAN;  // an infinity and a NaN in one window, either order
  }
  return x;
}

void expect_op(const std::shared_ptr<const Backend>& vk, OpKind op, const OpAttrs& attrs, std::vector<Tensor> in,
               double rtol, double atol = 0) {
  OpCase c;
  c.op = op;
  c.attrs = attrs;
  c.inputs = std::move(in);
  SCOPED_TRACE(op_info(op).name);
  test_support::expect_same_as_cpu(c, vk, rtol, atol);
}

// Every pooling op, masked forms included, on x of shape s with window w.
void expect_pooling(const std::shared_ptr<const Backend>& vk, const Shape& s, const Window2D& w, uint32_t& seed) {
  SCOPED_TRACE(s.str() + " window " + str(w));
  const Shape y{s[0], w.out_h(s[1]), w.out_w(s[2]), s[3]};
  for (bool special : {false, true}) {
    SCOPED_TRACE(special ? "with NaN and infinities" : "finite");
    OpAttrs at;
    at.window = w;
    const Tensor x = image(s, seed++, special), g = image(y, seed++, special);
    expect_op(vk, OpKind::MaxPool2D, at, {x}, 0);
    expect_op(vk, OpKind::AvgPool2D, at, {x}, 1e-6);
    expect_op(vk, OpKind::MaxPool2DBackward, at, {x, g}, 0);
    OpAttrs avg = at;
    avg.shape = s;
    expect_op(vk, OpKind::AvgPool2DBackward, avg, {g}, 1e-6, 2e-6);
    at.flags = avg.flags = kMaskNonPositive;
    expect_op(vk, OpKind::MaxPool2DBackward, at, {x, g}, 0);
    expect_op(vk, OpKind::AvgPool2DBackward, avg, {g, x}, 1e-6, 2e-6);
  }
}

}  // namespace

// 2x2 stride 2 (the tiling of MaxPooling2D's default), 3x3 stride 1
// (overlapping) and stride 2, valid and same padding, over odd and even
// images, one and several channels (C = 8: the CPU's vector paths), one
// image and several.
TEST(VulkanWindow, PoolingShapes) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<Shape> shapes{{1, 4, 4, 1}, {3, 7, 5, 5}, {1, 6, 6, 8}, {3, 9, 11, 1}, {1, 1, 1, 3}};
  uint32_t seed = 1;
  for (const Shape& s : shapes)
    for (const Window2D& w : {window(2, 2), window(3, 1), window(3, 2), same(2, 2, s[1], s[2]),
                              same(3, 1, s[1], s[2]), same(3, 2, s[1], s[2])})
      if (fits(w, s)) expect_pooling(vk, s, w, seed);
}

// Global pooling (GlobalAveragePooling2D, GlobalMaxPooling2D: one window
// the size of the image), a 1 x 1 window, uneven windows and strides, dilation,
// and padding wider than the window (windows wholly in the padding: -inf and 0
// forward, nothing backward, as the CPU).
TEST(VulkanWindow, GlobalDilatedAndPaddedWindows) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 100;
  for (const Shape& s : {Shape{3, 5, 7, 5}, Shape{1, 6, 4, 8}, Shape{2, 1, 9, 1}}) {
    Window2D global = window(1, 1);
    global.kh = global.sh = s[1];
    global.kw = global.sw = s[2];
    expect_pooling(vk, s, global, seed);
    expect_pooling(vk, s, window(1, 1), seed);
    Window2D uneven = window(2, 1);
    uneven.kw = 3;
    uneven.sw = 2;
    uneven.pad_bottom = 1;
    uneven.pad_right = 2;
    if (fits(uneven, s)) expect_pooling(vk, s, uneven, seed);
    const Window2D dilated = window(2, 1, 1, 2), wide = window(2, 1, 2), wide_strided = window(2, 3, 3);
    for (const Window2D& w : {dilated, wide, wide_strided})
      if (fits(w, s)) expect_pooling(vk, s, w, seed);
  }
}

// Ties: every tap of every window equal (zeros of either sign, then a
// constant), so the gradient goes to each window's first tap only; and
// windows wholly NaN or wholly -inf.
TEST(VulkanWindow, MaxTiesGoToTheFirstMaximum) {
  TG_VULKAN_OR_SKIP(vk);
  const Shape s{2, 5, 6, 3};
  uint32_t seed = 200;
  for (float v : {0.0f, -0.0f, 1.5f, -kInf, kInf, NAN})
    for (const Window2D& w : {window(2, 2), window(3, 1), same(3, 2, 5, 6)}) {
      SCOPED_TRACE("x = " + std::to_string(v) + ", window " + str(w));
      Tensor x = Tensor::full(s, v);
      if (v == 0.0f)  // both zeros, alternating
        for (int64_t i = 0; i < x.numel(); i += 2) x.data<float>()[i] = -0.0f;
      const Tensor g = image({2, w.out_h(5), w.out_w(6), 3}, seed++, false);
      OpAttrs at;
      at.window = w;
      expect_op(vk, OpKind::MaxPool2D, at, {x}, 0);
      expect_op(vk, OpKind::MaxPool2DBackward, at, {x, g}, 0);
      at.flags = kMaskNonPositive;
      expect_op(vk, OpKind::MaxPool2DBackward, at, {x, g}, 0);
    }
}

namespace {

// Dense + ReLU reshaped to 6 x 6 x 2 images, max pooling 3x3 stride 1
// "same" (overlapping; its gradient with the ReLU's folded in, the masked
// form), average pooling 2x2, a softmax head.
nn::Sequential pooling_model(Device device) {
  nn::clear_session();
  manual_seed(11);
  nn::Sequential m({10});
  m.add(nn::Dense(72, "relu"));
  m.add(nn::Reshape({6, 6, 2}));
  m.add(nn::MaxPooling2D({3, 3}, {1, 1}, "same"));
  m.add(nn::AveragePooling2D({2, 2}));
  m.add(nn::Flatten());
  m.add(nn::Dense(3, "softmax"));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, device);
  return m;
}

}  // namespace

// The kernels through a model's planned graphs, fused forms included:
// losses and weights within the model tests' 2e-4 relative plus 1e-5
// absolute after a few Adam steps (the other kernels sum in other orders).
TEST(VulkanWindow, APoolingModelTrainsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = test_support::random_tensor({48, 10}, 12);
  std::vector<int32_t> labels(48);
  for (int32_t i = 0; i < 48; ++i) labels[size_t(i)] = (i * 5 + 1) % 3;
  const Tensor y = Tensor::from_vector(labels, Shape{48});
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 16;
  fo.shuffle = false;
  fo.verbose = 0;
  nn::Sequential cpu = pooling_model(Device::CPU), dev = pooling_model(vk->device());
  ASSERT_EQ(all_weights(cpu), all_weights(dev));
  const nn::History hc = cpu.fit(x, y, fo), hd = dev.fit(x, y, fo);
  EXPECT_TRUE(test_support::close(hd["loss"], hc["loss"], 2e-4, 1e-5));
  EXPECT_TRUE(test_support::close(all_weights(dev), all_weights(cpu), 2e-4, 1e-5));
}

// Images of many short rows and of one element per row, in both backward
// paths (per element and per tiling window).
TEST(VulkanWindow, ManyShortRows) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 400;
  expect_pooling(vk, {1, 7002, 2, 1}, window(2, 2), seed);
  expect_pooling(vk, {2, 3001, 3, 1}, window(3, 1), seed);
  expect_pooling(vk, {3, 9, 1, 1}, window(1, 1), seed);
}
