// How the ONNX importer holds a computed tensor (io/onnx/import.cpp): the
// engine's tensor has the batch first; the file's view of it may order the
// axes otherwise (NCHW images held as NHWC, a sequence-first tensor held
// batch first) and may merge several held axes into one of its axes (the
// batch folded into attention heads, {L, B * heads, d}). Each file axis is a
// group of held axes, major to minor; a Transpose only reorders the groups
// and a Reshape only regroups (splitting a held axis when it must), so the
// data moves only where an op needs a particular order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "io/onnx/node.h"

namespace tensorgrad::io::onnx_import {

// groups[j]: the held axes (0 = the batch) that file axis j is made of,
// major to minor; an empty group is a file axis of size 1.
using Groups = std::vector<std::vector<int64_t>>;

// The file's own order: file axis j is held axis j.
inline Groups identity_groups(int64_t rank) {
  Groups g(static_cast<size_t>(rank));
  for (int64_t j = 0; j < rank; ++j) g[size_t(j)] = {j};
  return g;
}

// When every group is one held axis: perm[i] is the file axis of held axis i.
inline bool singleton_perm(const Groups& g, int64_t held_rank, std::vector<int64_t>* perm) {
  if (int64_t(g.size()) != held_rank) return false;
  std::vector<int64_t> p(static_cast<size_t>(held_rank), -1);
  for (size_t j = 0; j < g.size(); ++j) {
    if (g[j].size() != 1) return false;
    p[size_t(g[j][0])] = int64_t(j);
  }
  if (perm) *perm = p;
  return true;
}

inline Groups groups_from_perm(const std::vector<int64_t>& perm) {
  Groups g(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) g[size_t(perm[i])] = {int64_t(i)};
  return g;
}

// Batch multiples among folded shape values: B * k is held as kBatch + k - 1.
constexpr int64_t kMaxBatchFactor = int64_t(1) << 40;
inline bool is_batch(int64_t v) { return v >= kBatch && v < kBatch + kMaxBatchFactor; }
inline int64_t batch_factor(int64_t v) { return v - kBatch + 1; }
inline int64_t batch_times(int64_t k) { return kBatch + k - 1; }

// The file's dimensions of a held tensor whose held dims are `held` (held[0]
// the batch): a group holding the batch is B times the product of the rest.
inline std::vector<int64_t> file_dims(const Groups& g, const std::vector<int64_t>& held) {
  std::vector<int64_t> d;
  for (const std::vector<int64_t>& group : g) {
    int64_t p = 1;
    bool batch = false;
    for (int64_t a : group) {
      if (a == 0)
        batch = true;
      else
        p *= held[size_t(a)];
    }
    d.push_back(batch ? batch_times(p) : p);
  }
  return d;
}

// A Reshape of a held tensor as a regrouping: the file's flat order is the
// groups' held axes in sequence, so a target shape that cuts that sequence
// at axis boundaries is only new groups; a cut inside a held axis splits it
// (a view of the held tensor). Size-1 held axes other than the batch are
// dropped and each size-1 target axis gets a new held axis of its own, so
// that a squeeze or unsqueeze keeps one held axis per file axis.
struct Regrouped {
  std::vector<int64_t> held_dims;  // the held tensor's new dims without the batch (a view of the old)
  Groups groups;                   // of the new held axes
};

// `held` are the held dims (held[0], the batch, unused), `target` the file's
// new dims (batch multiples coded). False when the target is not a view of
// the held tensor (it would move elements across held axes).
inline bool regroup(const Groups& g, const std::vector<int64_t>& held, const std::vector<int64_t>& target,
                    Regrouped& out) {
  std::vector<int64_t> dim = held, order;  // ids of held axes (0 the batch) in physical order
  std::vector<int64_t> seq;                // ids in the file's flat order
  for (size_t a = 0; a < held.size(); ++a)
    if (a == 0 || held[a] != 1) order.push_back(int64_t(a));
  for (const std::vector<int64_t>& group : g)
    for (int64_t a : group)
      if (a == 0 || held[size_t(a)] != 1) seq.push_back(a);
  Groups runs;
  size_t pos = 0;
  for (int64_t t : target) {
    const bool want_batch = is_batch(t);
    const int64_t want = want_batch ? batch_factor(t) : t;
    if (want <= 0) return false;
    std::vector<int64_t> run;
    if (want == 1 && !want_batch) {  // a new size-1 held axis, at the end
      dim.push_back(1);
      order.push_back(int64_t(dim.size()) - 1);
      runs.push_back({int64_t(dim.size()) - 1});
      continue;
    }
    int64_t have = 1;
    bool got_batch = false;
    while (have != want || got_batch != want_batch) {
      if (pos >= seq.size()) return false;
      const int64_t a = seq[pos];
      if (a == 0) {
        if (!want_batch || got_batch) return false;
        got_batch = true;
      } else if (want % have != 0) {
        return false;
      } else if ((want / have) % dim[size_t(a)] == 0) {
        have *= dim[size_t(a)];
      } else {
        const int64_t need = want / have;
        if (need <= 1 || dim[size_t(a)] % need != 0) return false;
        // Split held axis a into (need, rest): the major part closes this run.
        dim.push_back(dim[size_t(a)] / need);
        dim[size_t(a)] = need;
        const int64_t rest = int64_t(dim.size()) - 1;
        order.insert(std::find(order.begin(), order.end(), a) + 1, rest);
        seq.insert(seq.begin() + int64_t(pos) + 1, rest);
        have *= need;
      }
      run.push_back(a);
      ++pos;
    }
    runs.push_back(run);
  }
  if (pos != seq.size()) return false;
  // A run of held axes side by side in memory, major to minor, is one held axis (a view).
  for (std::vector<int64_t>& run : runs) {
    if (run.size() < 2 || std::find(run.begin(), run.end(), 0) != run.end()) continue;
    const auto first = std::find(order.begin(), order.end(), run[0]);
    if (first + int64_t(run.size()) > order.end() || !std::equal(run.begin(), run.end(), first)) continue;
    int64_t p = 1;
    for (int64_t a : run) p *= dim[size_t(a)];
    dim.push_back(p);
    const int64_t joined = int64_t(dim.size()) - 1;
    order.erase(first + 1, first + int64_t(run.size()));
    *std::find(order.begin(), order.end(), run[0]) = joined;
    run = {joined};
  }
  // Ids to physical indices.
  std::vector<int64_t> index(dim.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) index[size_t(order[i])] = int64_t(i);
  out.held_dims.clear();
  for (size_t i = 1; i < order.size(); ++i) out.held_dims.push_back(dim[size_t(order[i])]);
  out.groups = runs;
  for (std::vector<int64_t>& run : out.groups)
    for (int64_t& a : run) a = index[size_t(a)];
  return true;
}

}  // namespace tensorgrad::io::onnx_import
