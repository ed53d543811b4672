#include <algorithm>
#include <limits>

#include "tensorgrad/graph/graph.h"

namespace tensorgrad {

namespace {
constexpr size_t kAlign = 64;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// First-fit allocator over [0, inf) that only tracks offsets.
class SlotAllocator {
 public:
  size_t allocate(size_t size) {
    size_t at = 0;
    auto it = used_.begin();
    for (; it != used_.end(); ++it) {
      if (it->first >= at + size) break;
      at = std::max(at, it->first + it->second);
    }
    used_.insert(it, {at, size});
    high_ = std::max(high_, at + size);
    return at;
  }
  void release(size_t offset) {
    auto it = std::find_if(used_.begin(), used_.end(), [&](auto& u) { return u.first == offset; });
    if (it != used_.end()) used_.erase(it);
  }
  size_t high_water() const { return high_; }

 private:
  std::vector<std::pair<size_t, size_t>> used_;  // (offset, size), sorted by offset
  size_t high_ = 0;
};

// The bytes an op node's kernel writes just before its output, which its
// memory slot holds too: a Conv2D's kBatchStatsOutput statistics
// (batch_stats_side_floats floats); 0 for every other node.
size_t side_output_bytes(const Node& n) {
  if (n.role != NodeRole::Op || n.op != OpKind::Conv2D || !(n.attrs.flags & kBatchStatsOutput)) return 0;
  return size_t(batch_stats_side_floats(n.shape[-1])) * sizeof(float);
}

// Where a view node's memory starts, in bytes from its input's.
int64_t view_offset(const Graph& graph, const Node& view) {
  if (view.op != OpKind::AttachedBatchStats) return 0;
  return -int64_t(side_output_bytes(graph.node(view.inputs[0])));
}
}  // namespace

MemoryPlan plan_memory(const Graph& graph, std::span<const Value> outputs) {
  const auto& nodes = graph.nodes();
  const size_t n = nodes.size();
  constexpr int32_t kForever = std::numeric_limits<int32_t>::max();

  std::vector<bool> needed(n, false);
  for (Value v : outputs) needed[size_t((graph.node(v), v.id))] = true;
  for (size_t i = 0; i < n; ++i)
    if (nodes[i].role == NodeRole::Op && op_info(nodes[i].op).in_place) needed[i] = true;
  for (size_t i = n; i-- > 0;)
    if (needed[i])
      for (Value in : nodes[i].input_values()) needed[size_t(in.id)] = true;

  // A view (Reshape) shares its input's memory: liveness belongs to the root
  // node that owns the memory.
  std::vector<int32_t> root(n);
  for (size_t i = 0; i < n; ++i)
    root[i] = nodes[i].role == NodeRole::Op && op_info(nodes[i].op).view ? root[size_t(nodes[i].inputs[0].id)]
                                                                         : int32_t(i);
  std::vector<int32_t> last_use(n, -1);
  for (size_t i = 0; i < n; ++i)
    if (needed[i])
      for (Value in : nodes[i].input_values()) {
        int32_t& lu = last_use[size_t(root[size_t(in.id)])];
        lu = std::max(lu, int32_t(i));
      }
  for (Value v : outputs) last_use[size_t(root[size_t(v.id)])] = kForever;

  MemoryPlan plan;
  plan.offset.assign(n, -1);
  SlotAllocator slots;
  std::vector<std::vector<int32_t>> frees_after(n);
  for (size_t i = 0; i < n; ++i) {
    if (!needed[i] || nodes[i].role != NodeRole::Op) continue;
    const OpInfo& info = op_info(nodes[i].op);
    if (info.view) {
      const int64_t input = plan.offset[size_t(nodes[i].inputs[0].id)];  // -1 when the root is a leaf
      plan.views.push_back(int32_t(i));
      plan.view_offsets.push_back(view_offset(graph, nodes[i]));
      plan.offset[i] = input < 0 ? -1 : input + plan.view_offsets.back();
      continue;
    }
    plan.schedule.push_back(int32_t(i));
    if (!info.in_place) {
      // The slot holds the side output first, then the output.
      const size_t side = side_output_bytes(nodes[i]);
      plan.offset[i] = int64_t(slots.allocate(side + aligned(nodes[i].shape.numel() * dtype_size(nodes[i].dtype))) +
                               side);
      if (last_use[i] == -1) frees_after[i].push_back(int32_t(i));  // computed but unused: free at once
      else if (last_use[i] != kForever) frees_after[size_t(last_use[i])].push_back(int32_t(i));
    }
    for (int32_t f : frees_after[i])
      slots.release(size_t(plan.offset[size_t(f)]) - side_output_bytes(nodes[size_t(f)]));
  }
  plan.arena_bytes = slots.high_water();
  return plan;
}

}  // namespace tensorgrad
