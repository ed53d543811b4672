// libFuzzer target for tensorgrad's ONNX importer (scripts/fuzz.sh onnx
// builds and runs it; fuzz/README.md). Each input is imported as a whole
// file with io::parse_onnx; when it imports and its inputs hold at most
// 4096 values a row, the model predicts one row of zeros (a bigger input is
// a valid file whose run would only cost time, e.g. a 1000 x 1000 image). A tensorgrad::Error is the importer's correct answer to a malformed
// or unsupported file; anything else (another exception, a crash, an
// AddressSanitizer or UndefinedBehaviorSanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/io/onnx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorgrad;
  try {
    nn::Model model = io::parse_onnx(std::span<const uint8_t>(data, size));
    std::vector<Tensor> zeros;
    int64_t values = 0;
    for (const nn::SymbolicTensor& in : model.inputs()) {
      zeros.push_back(Tensor::zeros(in.shape().with_batch(1), in.dtype()));
      values += in.shape().numel();
    }
    if (values <= 4096) (void)model.predict(zeros, 1);
  } catch (const Error&) {
  }
  return 0;
}
