#pragma once
// While a model is rebuilt from a file (io::load_model), its layers' weights
// and random streams are about to be overwritten with the saved ones: the
// initialisers fill zeros and compile() seeds nothing from the global
// generator, so loading draws nothing from any random stream (the issue's
// rule: a program that loads a model draws the same numbers afterwards as one
// that does not). Private to the library.
namespace tensorgrad::nn::detail {

/// Active on this thread while an object lives; nests.
class LoadingScope {
 public:
  LoadingScope();
  ~LoadingScope();
  LoadingScope(const LoadingScope&) = delete;
  LoadingScope& operator=(const LoadingScope&) = delete;
  /// Whether a scope is active on this thread.
  static bool active();
};

}  // namespace tensorgrad::nn::detail
