// Training, evaluation and prediction from a generator (the seed's
// ggml_fit_opt_gen in R/fit_generator.R), written on the loop's public
// layers (nn/training_loop.h) with a GeneratorSource.
#include <optional>

#include "nn/prefixed_error.h"
#include "tensorgrad/nn/data_parallel.h"
#include "tensorgrad/nn/model.h"
#include "tensorgrad/nn/training_loop.h"

namespace tensorgrad::nn {

History Model::fit(const Generator& generator, const GeneratorFitOptions& opt) {
  check_live("fit()");
  if (!state_.compiled) throw StateError(not_compiled_message("fit()"));
  if (!generator) throw ValueError("fit: the generator is empty; give a callable returning std::optional<Batch>");
  if (opt.validation_steps > 0 && !opt.validation_generator)
    throw ValueError("validation_steps is given without a validation_generator");
  if (opt.validation_batch_size && !opt.validation_generator)
    throw ValueError("validation_batch_size is given without a validation_generator");
  if (opt.validation_batch_size && *opt.validation_batch_size < 1)
    throw ValueError("validation_batch_size must be at least 1 (or none: batch_size); got " +
                     std::to_string(*opt.validation_batch_size));
  // The sources check batch_size and prefetch, fit_loop the rest, all before
  // the generator's first call (made at the first epoch's start).
  GeneratorSource train(generator, opt.batch_size, opt.prefetch, "generator batch");
  std::optional<GeneratorSource> validation;
  if (opt.validation_generator)
    validation.emplace(opt.validation_generator, opt.validation_batch_size.value_or(opt.batch_size), 0,
                       "validation batch", SourceRole::kValidation);
  if (opt.nbatch_logical > 0) optimizer_context(opt.batch_size, opt.nbatch_logical);  // checks the multiple
  LoopOptions loop;
  loop.epochs = opt.epochs;
  loop.initial_epoch = opt.initial_epoch;
  loop.steps_per_epoch = opt.steps_per_epoch;
  loop.validation_steps = opt.validation_steps;
  loop.nbatch_logical = opt.nbatch_logical;
  loop.verbose = opt.verbose;
  loop.callbacks = opt.callbacks;
  loop.group = data_parallel_group(opt.communicator);
  return fit_loop(*this, train, validation ? &*validation : nullptr, loop);
}

std::map<std::string, double> Model::evaluate(const Generator& generator, int64_t steps, int64_t batch_size) {
  check_live("evaluate()");
  if (!state_.compiled) throw StateError(not_compiled_message("evaluate()"));
  if (!generator) throw ValueError("evaluate: the generator is empty; give a callable returning std::optional<Batch>");
  if (steps < 0)
    throw ValueError("steps must be >= 0 (0: until the generator returns nothing); got " + std::to_string(steps));
  GeneratorSource source(generator, batch_size, 0, "validation batch");
  return test_epoch(*this, source, steps);
}

std::vector<Tensor> Model::predict(const Generator& generator, int64_t steps) {
  check_live("predict()");
  if (!generator) throw ValueError("predict: the generator is empty; give a callable returning std::optional<Batch>");
  if (steps < 0)
    throw ValueError("steps must be >= 0 (0: until the generator returns nothing); got " + std::to_string(steps));
  GeneratorSource source(generator, 1, 0, "predict batch");
  source.start_epoch(-1, steps);
  std::vector<std::vector<Tensor>> parts;
  int64_t rows = 0;
  while (const Batch* b = source.next()) {
    try {
      parts.push_back(predict(std::span<const Tensor>(b->x), 256));
    } catch (const Error&) {
      rethrow_prefixed("predict batch " + std::to_string(parts.size() + 1) + ": ");
    }
    rows += parts.back()[0].shape()[0];
  }
  if (parts.empty()) throw ValueError("predict: the generator gave no batch");
  std::vector<Tensor> out;
  for (size_t o = 0; o < parts[0].size(); ++o) {
    Tensor t = Tensor::empty(parts[0][o].shape().with_rows(rows));
    int64_t at = 0;
    for (const auto& p : parts) {
      const int64_t r = p[o].shape()[0];
      t.rows(at, at + r).copy_from(p[o]);
      at += r;
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace tensorgrad::nn
