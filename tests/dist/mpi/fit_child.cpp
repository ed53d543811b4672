// A data-parallel fit run by tests/dist/mpi/resume_test.sh under mpiexec, three
// ways: "crash" (the last rank throws at the start of epoch 3: the job must
// end by MPI_Abort, leaving rank 0's backup of epoch 2), "resume" (the same
// fit again: every rank resumes from that backup) and "straight" (the same
// fit, uninterrupted, with a fresh backup folder). Rank 0 writes the first
// epoch run and a hash of the final weights to `out`.
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensorgrad/core/random.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/io/callbacks.h"
#include "tensorgrad/nn/callbacks.h"
#include "tensorgrad/nn/sequential.h"

using namespace tensorgrad;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s crash|resume|straight BACKUP_DIR OUT\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  auto comm = std::make_shared<dist::Communicator>(&argc, &argv);
  manual_seed(5);
  nn::Sequential m(Shape{4});
  m.add(nn::Dense(8, "relu"));
  m.add(nn::Dense(2, "softmax"));
  m.compile(OptimizerSpec::adam(0.01f), "sparse_categorical_crossentropy");
  std::mt19937_64 g(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int64_t rows = 50;
  std::vector<float> x(size_t(rows) * 4), y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0;
    for (int j = 0; j < 4; ++j) s += (x[size_t(r * 4 + j)] = n(g));
    y[size_t(r)] = s > 0 ? 1.0f : 0.0f;
  }
  auto crash = std::make_shared<nn::LambdaCallback>();
  crash->on_epoch_begin_fn = [&](int epoch, nn::Logs&) {
    if (mode == "crash" && epoch == 2 && comm->rank() == comm->size() - 1)
      throw std::runtime_error("a failure on one rank only");
  };
  nn::FitOptions o{.epochs = 5, .batch_size = 10, .verbose = 0, .communicator = comm};
  o.callbacks = {crash, std::make_shared<io::BackupAndRestore>(argv[2])};
  const nn::History h = m.fit(Tensor::from_vector(x, Shape{rows, 4}), Tensor::from_vector(y, Shape{rows}), o);
  uint64_t hash = 1469598103934665603ull;
  for (const Tensor& t : m.get_weights()) {
    const auto* p = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  }
  if (comm->rank() == 0) {
    std::FILE* f = std::fopen(argv[3], "w");
    if (!f) return 3;
    std::fprintf(f, "first_epoch=%d epochs=%zu hash=%llu\n", h.epoch.empty() ? -1 : h.epoch.front(), h.epoch.size(),
                 static_cast<unsigned long long>(hash));
    std::fclose(f);
  }
  return 0;
}
