#pragma once
// The op table, internal to the library. Every op is one entry, indexed by
// OpKind, in two halves because the kernels sit above the ops layer: this
// half (name, arity, flags, shape rule, gradient rule) in ops/op_table.cpp,
// the kernel half in kernels/dispatch.cpp. Both are checked at compile time
// with `indexed_by_op_kind`, so an op added to OpKind without its entries, or
// entries out of order, does not build.
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <span>
#include <string>

#include "tensorgrad/ops/builder.h"
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

using Shapes = std::span<const Shape>;
using DTypes = std::span<const DType>;

/// What a gradient rule sees: x = inputs, y = output, g = d(loss)/dy; it
/// writes d(loss)/dx[i] into dx[i] where needs[i], so no unused gradient is built.
struct GradientCall {
  Builder& b;
  OpKind op;
  const OpAttrs& at;
  std::span<const Value> x;
  Value y, g;
  std::span<const bool> needs;
  std::span<Value> dx;
  bool need(size_t i) const { return i < needs.size() && needs[i]; }
  Value back(OpKind k, std::initializer_list<Value> in) const { return b.apply(k, in); }
};

/// One op's facts in the ops layer. The shape rule runs after the arity check.
struct OpDef {
  OpKind kind;
  OpInfo info;
  OpSignature (*shape)(OpKind op, Shapes s, DTypes t, const OpAttrs& a);
  void (*gradient)(const GradientCall& d);
};

// Shape-rule helpers shared by the table (defined in ops/op.cpp). Each error
// names the op, what it expected and what came.
[[noreturn]] void shape_fail(OpKind op, const std::string& what);
void expect_float(OpKind op, DTypes dtypes, size_t i, const char* role);
void expect_rank(OpKind op, const Shape& s, int rank, const char* role);
void check_labels(OpKind op, const Shape& pred, const Shape& labels, DType ldtype);
void check_weights(OpKind op, const Shape& pred, const Shape& w, bool allow_elementwise);
void check_schedule(OpKind op, Shapes s, DTypes t, uint32_t kind);
bool broadcasts_to(const Shape& small, const Shape& big);

}  // namespace tensorgrad
