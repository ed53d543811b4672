// Model::summary(): Keras' table, each column as wide as its longest cell
// (a long layer name no longer pushes its row out of line), then Keras'
// total, trainable and non-trainable parameter counts.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;

namespace {

template <class L>
std::shared_ptr<L> named(L layer, const char* name, bool trainable = true) {
  layer.set_name(name);
  layer.trainable = trainable;
  return std::make_shared<L>(std::move(layer));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

// The whole text of a Sequential model: batch-norm moving statistics (16)
// and a frozen layer's weights (3,003) are non-trainable; the totals are
// grouped by thousands as Keras prints them.
TEST(Summary, ColumnsFitTheLongestCellAndParamsSplitAsKeras) {
  manual_seed(1);
  clear_session();
  Sequential m({4});
  m.add(named(Dense(8), "hidden"));
  m.add(named(BatchNormalization(), "norm"));
  m.add(named(Dense(1000), "a_layer_whose_name_is_longer_than_the_old_columns"));
  m.add(named(Dense(3), "frozen", false));
  const std::string want =
      "Model: \"sequential\"\n"
      "________________________________________________________________________________\n"
      "Layer (type)                                               Output Shape  Param #\n"
      "================================================================================\n"
      "hidden (Dense)                                             (None, 8)     40\n"
      "norm (BatchNormalization)                                  (None, 8)     32\n"
      "a_layer_whose_name_is_longer_than_the_old_columns (Dense)  (None, 1000)  9000\n"
      "frozen (Dense)                                             (None, 3)     3003\n"
      "================================================================================\n"
      "Total params: 12,075\n"
      "Trainable params: 9,056\n"
      "Non-trainable params: 3,019\n"
      "________________________________________________________________________________\n";
  EXPECT_EQ(m.summary(), want);
}

// A functional model: a row per input, and every column (Connected to
// included) starts at the header's offset in every row.
TEST(Summary, AFunctionalModelsColumnsLineUp) {
  manual_seed(2);
  clear_session();
  auto x = Input({6}, DType::Float32, "features");
  auto h = Dense(5)(x);
  auto long_named = named(Dense(5), "a_dense_layer_with_a_name_far_longer_than_forty_characters");
  auto y = Add()({h, (*long_named)(x)});
  Model m(x, Dense(2)(y), "net");
  const std::vector<std::string> lines = lines_of(m.summary());
  ASSERT_GE(lines.size(), 10u) << m.summary();
  EXPECT_EQ(lines[0], "Model: \"net\"");
  const std::string& header = lines[2];
  const size_t shape_at = header.find("Output Shape"), params_at = header.find("Param #"),
               connected_at = header.find("Connected to");
  ASSERT_NE(connected_at, std::string::npos) << m.summary();
  for (const auto& [at, rule] : {std::pair{1, '_'}, std::pair{3, '='}}) {
    EXPECT_EQ(lines[size_t(at)].find_first_not_of(rule), std::string::npos) << lines[size_t(at)];
    EXPECT_GE(lines[size_t(at)].size(), header.size());
  }
  size_t row = 4;
  for (; row < lines.size() && lines[row][0] != '='; ++row) {
    const std::string& r = lines[row];
    EXPECT_EQ(r.compare(shape_at, 5, "(None"), 0) << r;
    EXPECT_NE(r[params_at], ' ') << r;
    EXPECT_EQ(r[params_at - 1], ' ') << r;
    EXPECT_NE(r[connected_at], ' ') << r;
    EXPECT_EQ(r[connected_at - 1], ' ') << r;
  }
  EXPECT_EQ(row, 9u) << m.summary();  // the input and four layers
  EXPECT_EQ(lines[4].substr(0, 24), "features (InputLayer)   ");
  EXPECT_NE(m.summary().find("a_dense_layer_with_a_name_far_longer_than_forty_characters (Dense)"), std::string::npos);
  // 6*5+5 twice, 5*2+2; all trainable.
  EXPECT_NE(m.summary().find("Total params: 82\nTrainable params: 82\nNon-trainable params: 0\n"), std::string::npos)
      << m.summary();
}
