// The second half of the Trainer exact-resume test (test_checkpoint.cpp), in a
// process of its own: builds the trainer as the first process did, loads the
// checkpoint, runs the remaining steps, and writes a final checkpoint and the
// losses for the test to compare.
//   trainer_resume_child CHECKPOINT FIRST_STEP STEPS OUT_CHECKPOINT OUT_LOSSES
#include <cstdio>
#include <string>

#include "trainer_resume_model.h"

int main(int argc, char** argv) {
  using namespace tensorgrad;
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s CHECKPOINT FIRST_STEP STEPS OUT_CHECKPOINT OUT_LOSSES\n", argv[0]);
    return 2;
  }
  try {
    set_num_threads(1);
    nn::Trainer t = trainer_resume::make_trainer();
    io::load_checkpoint(t, argv[1]);
    const std::vector<float> losses = trainer_resume::run(t, std::stoi(argv[2]), std::stoi(argv[3]));
    io::save_checkpoint(t, argv[4]);
    io::GGUFWriter w;
    w.add_tensor("losses", Tensor::from_vector(losses, Shape{int64_t(losses.size())}));
    w.write(argv[5]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer_resume_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
