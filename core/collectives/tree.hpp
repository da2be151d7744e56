// tree.hpp — the shapes of the tree collectives: who is whose parent, and in which step.
//
// Binomial tree (Open MPI's and MPICH's reduce and broadcast), ranks relative to the root
// (v = (rank - root) mod N):
//   round k = 0, 1, ..:  every v with bit k set and no lower bit set sends to v - 2^k
//   (reduce: children to parents, leaves first) or receives from it (broadcast: the same
//   edges in the other order, the root first). ceil(log2 N) rounds; v's children are
//   v + 2^k for the k below its lowest set bit (every k for the root).
//
//      v: 0   1   2   3   4   5   6   7        reduce, N = 8
//   round 0:  0<-1    2<-3    4<-5    6<-7
//   round 1:  0<----2         4<----6
//   round 2:  0<------------4
//
// In-order binary tree (the two trees of NCCL's double binary tree), over positions 1 .. N:
// position i with lowest set bit b sits at height log2 b; its parent is i + b when bit 2b of i
// is clear, else i - b, climbing on past N; the root is the largest power of two <= N.
// Positions with an odd number (half of them) are the leaves.
//
//   position:  1   2   3   4   5   6   7       height 2:  4
//              .   .   .   .   .   .   .       height 1:  2, 6
//                                              height 0:  1, 3, 5, 7  (leaves)
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "core/base/check.hpp"

namespace distlab::coll {

// ceil(log2 n): the rounds of a binomial tree over n ranks (0 for n <= 1).
inline int binomial_rounds(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Relative rank v of a binomial tree over n: its parent and its round (-1 for the root), and
// its children in the order of their rounds.
struct BinomialNode {
  int parent = -1, round = -1;  // v sends to (reduce) or receives from (broadcast) its parent
  std::vector<int> children;    // children[j] is v + 2^j, met in round j
};
inline BinomialNode binomial_node(int v, int n) {
  BinomialNode b;
  const int low = v == 0 ? binomial_rounds(n) : std::countr_zero(unsigned(v));
  for (int k = 0; k < low && v + (1 << k) < n; ++k) b.children.push_back(v + (1 << k));
  if (v != 0) b.parent = v - (1 << low), b.round = low;
  return b;
}

// Relative ranks [v, v + 2^rounds) clipped to n: the ranks whose data v holds after `rounds`
// rounds of a binomial reduce (its subtree so far).
inline std::vector<int> binomial_subtree(int v, int rounds, int n) {
  std::vector<int> out;
  for (int u = v; u < v + (1 << rounds) && u < n; ++u) out.push_back(u);
  return out;
}

// An in-order binary tree over n ranks, rank r at position pos(r) = (r + shift) mod n, + 1.
struct InOrderTree {
  int n = 1;
  int shift = 0;
  std::vector<int> parent;                 // per rank; -1 for the root
  std::vector<std::vector<int>> children;  // per rank, lower position first
  std::vector<int> height;                 // per rank: 0 for a leaf
  int root = 0, top = 0;                   // the root's rank, and its height

  InOrderTree(int ranks, int shift_by) : n(ranks), shift(shift_by) {
    DL_CHECK(n >= 1, "a tree needs a rank, not {}", n);
    parent.assign(std::size_t(n), -1);
    children.assign(std::size_t(n), {});
    height.assign(std::size_t(n), 0);
    const auto rank_at = [&](int pos) { return ((pos - 1 - shift) % n + n) % n; };
    for (int pos = 1; pos <= n; ++pos) {
      const int r = rank_at(pos);
      height[std::size_t(r)] = std::countr_zero(unsigned(pos));
      int b = pos & -pos, up = pos;
      do {  // climb until the parent is inside 1 .. n (or there is none: the root)
        up = (up & (2 * b)) ? up - b : up + b;
        b *= 2;
      } while (up > n && b <= 2 * n);
      if (up >= 1 && up <= n && up != pos) parent[std::size_t(r)] = rank_at(up);
    }
    for (int pos = 1; pos <= n; ++pos) {
      const int r = rank_at(pos);
      if (parent[std::size_t(r)] >= 0)
        children[std::size_t(parent[std::size_t(r)])].push_back(r);
      else
        root = r, top = height[std::size_t(r)];
    }
  }
};

// NCCL's pair of trees: the second is the first shifted by one rank, so that (for even n) every
// rank is a leaf in one tree and an inner node in the other; for odd n one rank is a leaf in
// both.
inline InOrderTree first_tree(int n) {
  return InOrderTree(n, 0);
}
inline InOrderTree second_tree(int n) {
  return InOrderTree(n, 1);
}

}  // namespace distlab::coll
