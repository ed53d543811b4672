#version 450
#include "common.glsl"
// GatherBackward: dtable{V, D}[v] = the sum of g{N, D}'s rows i with
// ids[i] == v, added to 0 in increasing i, the CPU's order: the same bits,
// without atomics or scratch memory. A workgroup owns `rows` consecutive
// rows of dtable; its lanes form R = WG / lanes teams of `lanes` lanes, team
// t owning the group's rows t, t + R, ... and each lane of a team the
// columns col, col + lanes, ... of them (its elements, only its own: no
// other invocation touches them). The group scans the ids once for all its
// rows, CHUNK at a time: each lane finds the hits among its PER consecutive
// ids, a prefix sum of the lanes' counts gives each hit its place, in id
// order, in a shared list, and each team then adds the listed g rows of its
// own rows into dtable. The scan costs N V / rows id reads in all, the
// additions N D. Ids outside [0, V) match no row: they are skipped, where
// the CPU would write out of bounds.
layout(constant_id = 1) const uint PER = 8;  // ids per lane and chunk

layout(push_constant) uniform Push {
  F32 g;
  I32 ids;
  F32 dt;
  uint n;      // ids
  uint d;
  uint vocab;
  uint rows;   // rows of dtable per workgroup, < 2^16
  uint lanes;  // lanes per team, at most WG
} p;

const uint WG = gl_WorkGroupSize.x;
const uint CHUNK = WG * PER;  // < 2^16: a hit packs its row in group and its place in the chunk

const uint NONE = 0xffffffffu;
const uint BLOCK = 16;  // the host's workgroups are multiples of 16
const uint BLOCKS = WG / BLOCK;

shared uint s_count[WG];
shared uint s_block[BLOCKS];
shared uint s_total;
shared uint s_hit[CHUNK];

void main() {
  const uint lane = gl_LocalInvocationID.x, teams = WG / p.lanes;
  const uint team = lane / p.lanes, col0 = lane % p.lanes;
  for (uint v0 = gl_WorkGroupID.x * p.rows; v0 < p.vocab; v0 += gl_NumWorkGroups.x * p.rows) {
    const uint v_end = min(v0 + p.rows, p.vocab);
    for (uint v = v0 + team; v < v_end && team < teams; v += teams)
      for (uint col = col0; col < p.d; col += p.lanes) p.dt.v[v * p.d + col] = 0.0;
    for (uint base = 0; base < p.n; base += CHUNK) {
      const uint first = base + lane * PER;
      uint row[PER];  // ids[first + k] - v0 where one of the group's rows, else NONE
      uint count = 0;
      for (uint k = 0; k < PER; ++k) {
        const int id = first + k < p.n ? p.ids.v[first + k] : -1;
        const bool hit = id >= int(v0) && id < int(v_end);
        row[k] = hit ? uint(id) - v0 : NONE;
        count += hit ? 1u : 0u;
      }
      // Each lane's place in the list: an exclusive prefix sum of the counts in
      // blocks of BLOCK lanes, then over the blocks' totals (4 barriers, which
      // lavapipe pays dearly for, instead of a tree's 2 log2(WG)).
      s_count[lane] = count;
      barrier();
      if (lane < BLOCKS) {
        uint sum = 0;
        for (uint l = lane * BLOCK; l < (lane + 1) * BLOCK; ++l) {
          const uint c = s_count[l];
          s_count[l] = sum;
          sum += c;
        }
        s_block[lane] = sum;
      }
      barrier();
      if (lane == 0) {
        uint sum = 0;
        for (uint b = 0; b < BLOCKS; ++b) {
          const uint c = s_block[b];
          s_block[b] = sum;
          sum += c;
        }
        s_total = sum;
      }
      barrier();
      uint at = s_count[lane] + s_block[lane / BLOCK];
      const uint total = s_total;
      for (uint k = 0; k < PER; ++k)
        if (row[k] != NONE) s_hit[at++] = (row[k] << 16) | (first + k - base);
      barrier();
      if (team < teams)
        for (uint h = 0; h < total; ++h) {
          const uint e = s_hit[h], row = e >> 16;
          if (row % teams != team) continue;
          const uint i = base + (e & 0xffffu), v = v0 + row;
          for (uint col = col0; col < p.d; col += p.lanes) p.dt.v[v * p.d + col] += p.g.v[i * p.d + col];
        }
      barrier();  // s_count and s_hit are refilled next
    }
  }
}
