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
// NCCL's binary tree (ncclGetBtree, src/graph/trees.cc), over roles 0 .. N-1: role 0 is the
// root and has one child; below it, roles 1 .. N-1 form the in-order binary tree of those
// positions: role i with lowest set bit b sits at height log2 b; its parent is i + b when bit 2b
// of i is clear, else i - b, climbing on past N-1; the top is the largest power of two <= N-1,
// role 0's child. The odd roles (half of them) are the leaves; the tree is ceil(lg N) high.
//
//   role:  0   1   2   3   4   5   6   7       height 3:  0 (root, one child)
//                                              height 2:  4
//                                              height 1:  2, 6
//                                              height 0:  1, 3, 5, 7  (leaves)
//
// NCCL's second tree (ncclGetDtree) gives rank r the role N-1-r (the first mirrored) when N is
// even, and (r - 1) mod N (shifted by one rank) when N is odd, as Sanders, Speck and Traeff
// (2009) build their two trees. Mirrored, an even N turns every odd role (a leaf) into an even
// one (inner), and back: every rank is a leaf in one tree and inner in the other. Shifted, an
// odd N does the same for every rank but rank 0, inner in both (tree 1's root, with one child,
// and tree 2's role N-1). NCCL's trees join nodes (a chain of GPUs inside each node); here
// every rank is a node.
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

// A binary tree over n ranks as NCCL builds it, rank r in the role role_of(r) of the layout
// above (a permutation of 0 .. n-1).
struct BinaryTree {
  int n = 1;
  std::vector<int> parent;                 // per rank; -1 for the root
  std::vector<std::vector<int>> children;  // per rank, lower role first
  std::vector<int> height;                 // per rank: 0 for a leaf
  int root = 0, top = 0;                   // the root's rank, and its height

  template <class RoleOf>
  BinaryTree(int ranks, RoleOf role_of) : n(ranks) {
    DL_CHECK(n >= 1, "a tree needs a rank, not {}", n);
    parent.assign(std::size_t(n), -1);
    children.assign(std::size_t(n), {});
    height.assign(std::size_t(n), 0);
    std::vector<int> rank_at(std::size_t(n), -1);  // role -> rank
    for (int r = 0; r < n; ++r) {
      const int role = role_of(r);
      DL_CHECK(role >= 0 && role < n && rank_at[std::size_t(role)] < 0,
               "role {} of rank {} is not a new role of 0 .. {}", role, r, n - 1);
      rank_at[std::size_t(role)] = r;
    }
    const int below = n - 1;  // roles 1 .. n-1, in order under role 0
    for (int pos = 1; pos <= below; ++pos) {
      const int r = rank_at[std::size_t(pos)];
      height[std::size_t(r)] = std::countr_zero(unsigned(pos));
      int b = pos & -pos, up = pos;
      do {  // climb until the parent is inside 1 .. n-1 (or there is none: under role 0)
        up = (up & (2 * b)) ? up - b : up + b;
        b *= 2;
      } while (up > below && b <= 2 * below);
      parent[std::size_t(r)] = rank_at[std::size_t(up >= 1 && up <= below && up != pos ? up : 0)];
    }
    root = rank_at[0];
    top = n >= 2 ? std::bit_width(unsigned(below)) : 0;  // one above the in-order top
    height[std::size_t(root)] = top;
    for (int pos = 1; pos <= below; ++pos) {
      const int r = rank_at[std::size_t(pos)];
      children[std::size_t(parent[std::size_t(r)])].push_back(r);
    }
  }
};

// NCCL's pair of trees (ncclGetDtree): the second is the first mirrored (rank r takes role
// N-1-r) for even n, shifted by one rank (role (r - 1) mod n) for odd n.
inline BinaryTree first_tree(int n) {
  return BinaryTree(n, [](int r) { return r; });
}
inline BinaryTree second_tree(int n) {
  if (n % 2 == 0) return BinaryTree(n, [n](int r) { return n - 1 - r; });
  return BinaryTree(n, [n](int r) { return (r - 1 + n) % n; });
}

}  // namespace distlab::coll
