// The second process of test_fit_checkpoint.cpp's cross-process resume: builds
// the fit of fit_resume_setup.h, runs it for `epochs` with a BackupAndRestore
// on `backup_dir` (which resumes from the backup the first process left), then
// writes a final checkpoint (weights, optimizer state, the callbacks' states)
// and the per-epoch losses for the test to compare with an uninterrupted run.
//
//   fit_resume_child <backup_dir> <epochs> <final_checkpoint> <losses_file>
//
// Exit status 0 on success; 1 with the error on standard error otherwise.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "fit_resume_setup.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <backup_dir> <epochs> <final_checkpoint> <losses_file>\n", argv[0]);
    return 2;
  }
  try {
    using namespace tensorgrad;
    fit_resume::Setup s;
    auto backup = std::make_shared<io::BackupAndRestore>(argv[1]);
    const nn::History h = s.model.fit(s.x, s.y, s.options(std::atoi(argv[2]), {backup}));
    io::save_checkpoint(s.model, argv[3], std::atoi(argv[2]), s.kept());
    if (!fit_resume::write_losses(argv[4], h)) {
      std::fprintf(stderr, "cannot write %s\n", argv[4]);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit_resume_child: %s\n", e.what());
    return 1;
  }
}
