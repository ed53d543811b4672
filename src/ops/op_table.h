#pragma once
// The op table, internal to the library. Every op is one line of the op list
// (tensorgrad/ops/op_list.h), which gives its name, arity, effect, float
// parameter and flop rule; this table adds its shape and gradient rules
// (ops/op_table.cpp), the kernel table of each backend its kernel
// (kernels/dispatch.cpp for the CPU). Both tables are indexed by OpKind and
// checked at compile time with `indexed_by_op_kind`, so an op added to the
// list without its entries, or entries out of order, does not build.
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

/// One op's rules in the ops layer. The shape rule runs after the arity check.
struct OpDef {
  OpKind kind;
  OpSignature (*shape)(OpKind op, Shapes s, DTypes t, const OpAttrs& a);
  void (*gradient)(const GradientCall& d);
};

/// The floating-point operations of one application of `op` to inputs of
/// shapes `in` giving `out`, by the op's flop rule (op_list.h): twice the
/// multiply-adds of the product-like ops, one per output element for the
/// others (their bytes are their cost). Backends choose their launchers by
/// it (Backend::launcher), summed over a graph.
double op_flops(OpKind op, const OpAttrs& at, std::span<const Shape> in, const Shape& out);

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
