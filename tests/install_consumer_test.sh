#!/usr/bin/env bash
# CTest's install.consumer: installs the built library into a temporary
# prefix (cmake --install), then builds tests/consumer/ against it twice, as
# a user's project would: with CMake (find_package(tensorgrad), target
# tensorgrad::tensorgrad) and with pkg-config (--static, the library being
# static). Each program trains a one-unit model and must print "ok".
#   install_consumer_test.sh CMAKE BUILD_DIR SOURCE_DIR GENERATOR CXX
set -euo pipefail
if (($# != 5)); then
  echo "usage: $0 CMAKE BUILD_DIR SOURCE_DIR GENERATOR CXX" >&2
  exit 2
fi
cmake_exe=$1 build_dir=$2 source_dir=$3 generator=$4 cxx=$5

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tensorgrad-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

step() { echo "== $*"; }

step "install into $prefix"
"$cmake_exe" --install "$build_dir" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; exit 1; }
# Only the library: headers, the archive, the CMake package, tensorgrad.pc.
if grep -vE '/include/tensorgrad(/|$)|/libtensorgrad(_mpi)?\.a$|/cmake/tensorgrad/tensorgrad[A-Za-z-]*\.cmake$|/pkgconfig/tensorgrad(-mpi)?\.pc$' \
     "$tmp/install.log" | grep -E '^-- (Installing|Up-to-date):'; then
  echo "FAIL: the install put the files above in place, which are not the library's" >&2
  exit 1
fi
[[ -f $prefix/include/tensorgrad/tensorgrad.h ]] || { echo "FAIL: no include/tensorgrad/tensorgrad.h in $prefix" >&2; exit 1; }

# MPI is not imposed: the consumer configures with CMake unable to find MPI,
# and neither its program nor pkg-config's flags name MPI.
step "CMake consumer: find_package(tensorgrad), tensorgrad::tensorgrad, MPI hidden from CMake"
"$cmake_exe" -S "$source_dir/tests/consumer" -B "$tmp/cmake-build" -G "$generator" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
  >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
"$cmake_exe" --build "$tmp/cmake-build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
out=$("$tmp/cmake-build/consumer")
echo "$out"
grep -qx "tensorgrad consumer: ok" <<<"$out" || { echo "FAIL: the CMake consumer did not print ok" >&2; exit 1; }
if ldd "$tmp/cmake-build/consumer" | grep -i 'mpi'; then
  echo "FAIL: the consumer that did not ask for MPI loads the libraries above" >&2
  exit 1
fi

step "pkg-config consumer: pkg-config --cflags --libs --static tensorgrad"
pc_dir=$(dirname "$(find "$prefix" -name tensorgrad.pc -print -quit)")
export PKG_CONFIG_PATH=$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
cflags=$(pkg-config --cflags tensorgrad)
libs=$(pkg-config --libs --static tensorgrad)
echo "cflags: $cflags"
echo "libs: $libs"
# shellcheck disable=SC2086 # the flags are words
"$cxx" -std=c++20 -O1 $cflags -c "$source_dir/tests/consumer/main.cpp" -o "$tmp/main.o"
# shellcheck disable=SC2086
"$cxx" "$tmp/main.o" -o "$tmp/consumer-pc" $libs
out=$("$tmp/consumer-pc")
echo "$out"
grep -qx "tensorgrad consumer: ok" <<<"$out" || { echo "FAIL: the pkg-config consumer did not print ok" >&2; exit 1; }
if grep -qi mpi <<<"$libs"; then
  echo "FAIL: pkg-config's flags for tensorgrad name MPI: $libs" >&2
  exit 1
fi

# A program that asks for MPI gets the communicator (where the build has it).
if [[ -f $pc_dir/tensorgrad-mpi.pc ]]; then
  step "CMake consumer with MPI: find_package(tensorgrad COMPONENTS mpi), tensorgrad::mpi"
  "$cmake_exe" -S "$source_dir/tests/consumer" -B "$tmp/cmake-build-mpi" -G "$generator" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
    -DTENSORGRAD_CONSUMER_MPI=ON >"$tmp/configure-mpi.log" || { cat "$tmp/configure-mpi.log"; exit 1; }
  "$cmake_exe" --build "$tmp/cmake-build-mpi" >"$tmp/build-mpi.log" 2>&1 || { cat "$tmp/build-mpi.log"; exit 1; }
  out=$("$tmp/cmake-build-mpi/consumer")
  echo "$out"
  grep -qx "tensorgrad consumer: ok" <<<"$out" || { echo "FAIL: the MPI consumer did not print ok" >&2; exit 1; }
  step "pkg-config consumer with MPI: pkg-config --libs --static tensorgrad-mpi"
  libs=$(pkg-config --libs --static tensorgrad-mpi)
  echo "libs: $libs"
  # shellcheck disable=SC2086
  "$cxx" -std=c++20 -O1 $cflags -DTENSORGRAD_CONSUMER_MPI -c "$source_dir/tests/consumer/main.cpp" -o "$tmp/main-mpi.o"
  # shellcheck disable=SC2086
  "$cxx" "$tmp/main-mpi.o" -o "$tmp/consumer-pc-mpi" $libs
  out=$("$tmp/consumer-pc-mpi")
  echo "$out"
  grep -qx "tensorgrad consumer: ok" <<<"$out" || { echo "FAIL: the MPI pkg-config consumer did not print ok" >&2; exit 1; }
fi
echo "install.consumer: ok"
