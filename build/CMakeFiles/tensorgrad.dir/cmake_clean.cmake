file(REMOVE_RECURSE
  "CMakeFiles/tensorgrad.dir/src/backend/executable.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/backend/executable.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/backend/thread_pool.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/backend/thread_pool.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/core/random.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/core/random.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/core/shape.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/core/shape.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/core/tensor.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/core/tensor.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/core/threads.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/core/threads.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/graph/graph.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/graph/graph.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/graph/planner.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/graph/planner.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/kernels/dispatch.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/kernels/dispatch.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/kernels/elementwise.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/kernels/elementwise.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/kernels/matmul.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/kernels/matmul.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/kernels/optimizer.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/kernels/optimizer.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/kernels/softmax.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/kernels/softmax.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/ops/gradients.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/ops/gradients.cpp.o.d"
  "CMakeFiles/tensorgrad.dir/src/ops/op.cpp.o"
  "CMakeFiles/tensorgrad.dir/src/ops/op.cpp.o.d"
  "libtensorgrad.a"
  "libtensorgrad.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/tensorgrad.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
