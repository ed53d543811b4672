// The two batch sources of the training loop (nn/training_loop.h): rows in
// memory, and a generator with the seed's contract (ggmlR's
// R/fit_generator.R) called inline or on a producer thread.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "nn/data_adapter.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/nn/training_loop.h"

namespace tensorgrad::nn {

namespace {
// Copies rows `index[0..count)` of src into the first rows of dst.
void gather_rows(const Tensor& src, const int64_t* index, int64_t count, const Tensor& dst) {
  const size_t row_bytes = size_t(src.shape().row_size()) * dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  for (int64_t i = 0; i < count; ++i) std::memcpy(d + size_t(i) * row_bytes, s + size_t(index[i]) * row_bytes, row_bytes);
}

}  // namespace

TensorSource::TensorSource(std::vector<Tensor> x, std::vector<Tensor> y, Tensor sample_weight, int64_t batch_size,
                           std::mt19937_64* shuffle_rng, std::string label)
    : x_(std::move(x)), y_(std::move(y)), w_(std::move(sample_weight)), rows_(0),
      batch_size_(batch_size), rng_(shuffle_rng), label_(std::move(label)) {
  if (batch_size_ < 1) throw ValueError("TensorSource: batch_size must be at least 1; got " + std::to_string(batch_size_));
  if (x_.empty()) throw ValueError("TensorSource: no x tensors; give one per model input");
  auto rows_in = [](const Tensor& t) { return t.defined() && t.shape().rank() > 0 ? t.shape()[0] : int64_t(-1); };
  rows_ = rows_in(x_[0]);
  if (rows_ < 1) throw ValueError("TensorSource: x has no rows; give at least one");
  auto check = [&](const Tensor& t, const std::string& what) {
    if (rows_in(t) != rows_)
      throw ShapeError("TensorSource: x has " + std::to_string(rows_) + " rows but " + what + " has " +
                       (rows_in(t) < 0 ? std::string("none") : std::to_string(rows_in(t))) +
                       "; give every tensor the same rows");
  };
  for (size_t i = 1; i < x_.size(); ++i) check(x_[i], "x " + std::to_string(i));
  for (size_t i = 0; i < y_.size(); ++i) check(y_[i], "y " + std::to_string(i));
  if (w_.defined()) check(w_, "sample_weight");
  if (!rng_) return;
  // Shuffled epochs gather into staging made once: no allocation per batch.
  order_.resize(size_t(rows_));
  const int64_t bs = std::min(batch_size_, rows_);
  for (const Tensor& t : x_) full_.x.push_back(Tensor::empty(t.shape().with_rows(bs), t.dtype()));
  for (const Tensor& t : y_) full_.y.push_back(Tensor::empty(t.shape().with_rows(bs), t.dtype()));
  if (w_.defined()) full_.sample_weight = Tensor::empty(w_.shape().with_rows(bs), w_.dtype());
  if (const int64_t rem = rows_ % bs; rem > 0) part_ = detail::rows_of(full_, 0, rem);
}

namespace {
void check_limit(int64_t limit) {
  if (limit < 0) throw ValueError("start_epoch: limit must be >= 0 batches (0: until the source ends); got " + std::to_string(limit));
}
}  // namespace

void TensorSource::start_epoch(int, int64_t limit) {
  check_limit(limit);
  started_ = true;
  next_row_ = 0;
  given_ = 0;
  limit_ = limit;
  if (!rng_) return;
  std::iota(order_.begin(), order_.end(), int64_t(0));
  std::shuffle(order_.begin(), order_.end(), *rng_);
}

const Batch* TensorSource::next() {
  if (!started_) throw StateError("TensorSource::next(): no epoch started; call start_epoch() first");
  if (next_row_ >= rows_ || (limit_ > 0 && given_ >= limit_)) return nullptr;
  const int64_t start = next_row_, rows = std::min(batch_size_, rows_ - next_row_);
  next_row_ += rows;
  ++given_;
  if (!rng_) {
    current_.x.resize(x_.size());
    current_.y.resize(y_.size());
    for (size_t i = 0; i < x_.size(); ++i) current_.x[i] = x_[i].rows(start, start + rows);
    for (size_t i = 0; i < y_.size(); ++i) current_.y[i] = y_[i].rows(start, start + rows);
    if (w_.defined()) current_.sample_weight = w_.rows(start, start + rows);
    return &current_;
  }
  Batch& b = rows == full_.x[0].shape()[0] ? full_ : part_;
  const int64_t* index = &order_[size_t(start)];
  for (size_t i = 0; i < x_.size(); ++i) gather_rows(x_[i], index, rows, full_.x[i]);
  for (size_t i = 0; i < y_.size(); ++i) gather_rows(y_[i], index, rows, full_.y[i]);
  if (w_.defined()) gather_rows(w_, index, rows, full_.sample_weight);
  return &b;
}

int64_t TensorSource::batches_per_epoch() const { return (rows_ + batch_size_ - 1) / batch_size_; }

// Calls a generator one epoch at a time: inline (depth 0), or on a producer
// thread at most `depth` batches ahead. Never calls past the end of an epoch
// (a nullopt, an exception, or `limit` calls); the next epoch's calls start
// at start_epoch.
class GeneratorSource::Feed {
 public:
  Feed(const Generator& generator, int depth, std::string what)
      : generator_(generator), depth_(depth), what_(std::move(what)) {
    if (depth_ > 0) producer_ = std::thread([this] { produce(); });
  }
  ~Feed() { stop(); }

  void start_epoch(int64_t limit, int epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;  // a call still running for an epoch left early is discarded when it returns
    calls_ = 0;
    limit_ = limit;
    epoch_ = epoch;
    done_ = false;
    items_.clear();
    cv_.notify_all();
  }

  std::optional<Batch> next() {
    Item item;
    if (depth_ == 0) {
      if (done_) return std::nullopt;
      item = call(++calls_);
      finish(item);
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !items_.empty() || (done_ && !busy_); });
      if (items_.empty()) return std::nullopt;
      item = std::move(items_.front());
      items_.pop_front();
      cv_.notify_all();
    }
    if (item.error) {
      log_message(LogLevel::Warning, what_ + " threw at batch " + std::to_string(item.number) +
                                         (epoch_ >= 0 ? " of epoch " + std::to_string(epoch_ + 1) : std::string()) +
                                         "; training stops and the exception is rethrown");
      std::rethrow_exception(item.error);
    }
    return std::move(item.batch);
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (producer_.joinable()) producer_.join();
  }

 private:
  struct Item {
    std::optional<Batch> batch;
    std::exception_ptr error;
    int64_t number = 0;
  };
  Item call(int64_t number) {
    Item item;
    item.number = number;
    try {
      item.batch = generator_();
    } catch (...) {
      item.error = std::current_exception();
    }
    return item;
  }
  // Under the lock (or inline): whether this call ended the epoch.
  void finish(const Item& item) {
    if (!item.batch || item.error || (limit_ > 0 && calls_ >= limit_)) done_ = true;
  }
  void produce() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || (!done_ && items_.size() < size_t(depth_)); });
      if (stopping_) return;
      const int64_t number = ++calls_;
      const uint64_t generation = generation_;
      busy_ = true;
      lock.unlock();
      Item item = call(number);
      lock.lock();
      busy_ = false;
      if (generation != generation_) {  // its epoch was left before it came back
        cv_.notify_all();
        continue;
      }
      finish(item);
      items_.push_back(std::move(item));
      cv_.notify_all();
    }
  }

  const Generator& generator_;
  const int depth_;
  const std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::thread producer_;
  int64_t calls_ = 0, limit_ = 0;
  uint64_t generation_ = 0;  // start_epoch calls
  int epoch_ = -1;
  bool done_ = true;  // no epoch started yet
  bool busy_ = false, stopping_ = false;
};

GeneratorSource::GeneratorSource(const Generator& generator, int64_t batch_size, int prefetch, std::string label,
                                 SourceRole role)
    : batch_size_(batch_size), label_(std::move(label)), role_(role) {
  if (!generator) throw ValueError("the generator is empty; give a callable returning std::optional<Batch>");
  if (batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(batch_size));
  if (prefetch < 0)
    throw ValueError("prefetch must be >= 0 batches (0: call the generator on this thread); got " +
                     std::to_string(prefetch));
  feed_ = std::make_unique<Feed>(generator, prefetch, "the " + noun());
}

std::string GeneratorSource::noun() const {
  switch (role_) {
    case SourceRole::kTraining: return "generator";
    case SourceRole::kValidation: return "validation generator";
  }
  throw ValueError("GeneratorSource: unknown SourceRole " + std::to_string(int(role_)));
}

std::string GeneratorSource::batch_size_option() const {
  switch (role_) {
    case SourceRole::kTraining: return "batch_size";
    case SourceRole::kValidation: return "validation_batch_size";
  }
  throw ValueError("GeneratorSource: unknown SourceRole " + std::to_string(int(role_)));
}

GeneratorSource::~GeneratorSource() = default;

void GeneratorSource::start_epoch(int epoch, int64_t limit) {
  check_limit(limit);
  if (stopped_) throw StateError("GeneratorSource::start_epoch(): the source was stopped; make a new one");
  started_ = true;
  current_.reset();
  feed_->start_epoch(limit, epoch);
}

const Batch* GeneratorSource::next() {
  if (!started_) throw StateError("GeneratorSource::next(): no epoch started; call start_epoch() first");
  if (stopped_) return nullptr;
  current_ = feed_->next();
  return current_ ? &*current_ : nullptr;
}

void GeneratorSource::stop() {
  stopped_ = true;
  feed_->stop();
}

}  // namespace tensorgrad::nn
