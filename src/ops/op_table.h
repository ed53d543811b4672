#pragma once
// The op table, internal to the library. Every op is one entry, indexed by
// OpKind; the kernel half lives in kernels/dispatch.cpp, because the kernels
// sit above the ops layer. Each half is checked at compile time with
// `indexed_by_op_kind`, so an op added to OpKind without its entry, or
// entries out of order, does not build.
#include <cstddef>
#include <iterator>

#include "tensorgrad/ops/op.h"

namespace tensorgrad {

/// Whether entry i of `table` is the entry of OpKind i, for every op: the
/// property that lets a lookup index the table by OpKind.
template <class Table>
constexpr bool indexed_by_op_kind(const Table& table) {
  if (std::size(table) != size_t(OpKind::Count)) return false;
  for (size_t i = 0; i < std::size(table); ++i)
    if (size_t(table[i].kind) != i) return false;
  return true;
}

}  // namespace tensorgrad
