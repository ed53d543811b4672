// The communicator in a build without MPI (the MPI build's tests run under
// mpiexec: tests/dist/mpi/, CTest's dist.Communicator.np2 and np3).
#include <gtest/gtest.h>

#include "test_support.h"
#include "tensorgrad/dist/communicator.h"

using namespace tensorgrad;
using test_support::throws;

TEST(Dist, WithoutMpiACommunicatorSaysHowToGetOne) {
  if (dist::built_with_mpi()) GTEST_SKIP() << "built with MPI: the communicator is tested under mpiexec";
  EXPECT_TRUE(throws<StateError>([] { dist::Communicator c; }, {"built without MPI", "libopenmpi-dev"}));
}
