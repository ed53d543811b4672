
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/backend/executable.cpp" "CMakeFiles/tensorgrad.dir/src/backend/executable.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/backend/executable.cpp.o.d"
  "/work/main/src/backend/thread_pool.cpp" "CMakeFiles/tensorgrad.dir/src/backend/thread_pool.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/backend/thread_pool.cpp.o.d"
  "/work/main/src/core/random.cpp" "CMakeFiles/tensorgrad.dir/src/core/random.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/core/random.cpp.o.d"
  "/work/main/src/core/shape.cpp" "CMakeFiles/tensorgrad.dir/src/core/shape.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/core/shape.cpp.o.d"
  "/work/main/src/core/tensor.cpp" "CMakeFiles/tensorgrad.dir/src/core/tensor.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/core/tensor.cpp.o.d"
  "/work/main/src/core/threads.cpp" "CMakeFiles/tensorgrad.dir/src/core/threads.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/core/threads.cpp.o.d"
  "/work/main/src/data/idx.cpp" "CMakeFiles/tensorgrad.dir/src/data/idx.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/data/idx.cpp.o.d"
  "/work/main/src/graph/graph.cpp" "CMakeFiles/tensorgrad.dir/src/graph/graph.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/graph/graph.cpp.o.d"
  "/work/main/src/graph/planner.cpp" "CMakeFiles/tensorgrad.dir/src/graph/planner.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/graph/planner.cpp.o.d"
  "/work/main/src/kernels/dispatch.cpp" "CMakeFiles/tensorgrad.dir/src/kernels/dispatch.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/kernels/dispatch.cpp.o.d"
  "/work/main/src/kernels/elementwise.cpp" "CMakeFiles/tensorgrad.dir/src/kernels/elementwise.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/kernels/elementwise.cpp.o.d"
  "/work/main/src/kernels/matmul.cpp" "CMakeFiles/tensorgrad.dir/src/kernels/matmul.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/kernels/matmul.cpp.o.d"
  "/work/main/src/kernels/optimizer.cpp" "CMakeFiles/tensorgrad.dir/src/kernels/optimizer.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/kernels/optimizer.cpp.o.d"
  "/work/main/src/kernels/softmax.cpp" "CMakeFiles/tensorgrad.dir/src/kernels/softmax.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/kernels/softmax.cpp.o.d"
  "/work/main/src/nn/layers.cpp" "CMakeFiles/tensorgrad.dir/src/nn/layers.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/nn/layers.cpp.o.d"
  "/work/main/src/nn/progress.cpp" "CMakeFiles/tensorgrad.dir/src/nn/progress.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/nn/progress.cpp.o.d"
  "/work/main/src/nn/sequential.cpp" "CMakeFiles/tensorgrad.dir/src/nn/sequential.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/nn/sequential.cpp.o.d"
  "/work/main/src/ops/gradients.cpp" "CMakeFiles/tensorgrad.dir/src/ops/gradients.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/ops/gradients.cpp.o.d"
  "/work/main/src/ops/op.cpp" "CMakeFiles/tensorgrad.dir/src/ops/op.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/ops/op.cpp.o.d"
  "/work/main/src/opt/optimizer.cpp" "CMakeFiles/tensorgrad.dir/src/opt/optimizer.cpp.o" "gcc" "CMakeFiles/tensorgrad.dir/src/opt/optimizer.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
