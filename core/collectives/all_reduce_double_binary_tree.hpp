// all_reduce_double_binary_tree.hpp — NCCL's double binary tree: two trees, half the data each.
//
// A binary tree all-reduce (reduce up, broadcast down) has log2 N latency, but its leaves only
// send and half its links idle. NCCL runs two binary trees at once (tree.hpp, ncclGetDtree): the
// second is the first mirrored (even N) or shifted by one rank (odd N), so every rank (every rank
// but rank 0, for odd N) is a leaf in one tree and an inner node in the other, and the two trees'
// traffic is balanced. Tree
// t reduces and broadcasts half t of the buffer, cut into kTreeSegments segments that follow each
// other up and down the tree (a pipeline, as NCCL's chunks):
//   reduce     a rank of height h sends segment s of half t to its parent at step s + h, after
//              adding its children's segment s (leaves, height 0, send at once)
//   broadcast  the root of tree t holds each summed segment; a rank of height h sends segment
//              s down to its children at step R + s + (H - h), R = S + H - 1 the reduce's steps
// S segments, H the trees' height (ceil(log2 N)): 2(S + H - 1) steps. An inner rank sends
// and receives about a half buffer per child each way; a leaf one half buffer each way.
//   cost: 2(S + H - 1) (alpha + n/S beta) + n gamma for n bytes (an inner rank moves a segment
//         of n/2S to or from each of two children a step; cost_model.cpp)
// Each tree has its own tag (NCCL gives them channels of their own): the two trees can join the
// same two ranks (at N = 3, ranks 0 and 2 in both), and one tag would match tree 2's segment to a
// receive posted for tree 1's.
// Each segment is summed once, at its tree's root, and copied down: every rank ends with the
// same bits.
#pragma once

#include <array>
#include <vector>

#include "core/collectives/algo.hpp"
#include "core/collectives/common.hpp"
#include "core/collectives/tree.hpp"

namespace distlab::coll {

// The step ids a double binary tree over n ranks takes (both phases).
inline int double_tree_steps(int n) {
  if (n <= 1) return 0;
  const int H = std::max(first_tree(n).top, second_tree(n).top);
  return 2 * (kTreeSegments + H - 1);
}

// data: this rank's input, replaced by the sum over all ranks.
template <class T>
void all_reduce_double_binary_tree(Comm& comm, View<T> data, const std::string& buffer = "data") {
  const int n = comm.size(), me = comm.rank(), S = kTreeSegments;
  if (n == 1) return;
  const std::array<BinaryTree, 2> trees = {first_tree(n), second_tree(n)};
  const int H = std::max(trees[0].top, trees[1].top), R = S + H - 1;
  const int first_step = comm.next_steps(double_tree_steps(n));
  const Partition part{data.size(), 2 * S};  // chunk t S + s: segment s of half t
  comm.declare_buffer(buffer, data.size(), 2 * S);
  const auto segment = [&](int t, int s) {
    return data.sub(part.begin(t * S + s), part.size(t * S + s));
  };
  // Whose data segment s of tree t holds once a rank has added its subtree: the subtree's ranks.
  const auto subtree = [&](int t, int r) {
    std::uint64_t m = 0;
    std::vector<int> todo{r};
    while (!todo.empty()) {
      const int u = todo.back();
      todo.pop_back();
      m |= rank_bit(u);
      for (int c : trees[std::size_t(t)].children[std::size_t(u)]) todo.push_back(c);
    }
    return m;
  };
  // quote: double-binary-tree
  // Reduce: every child's segments are received into scratch, posted at once.
  std::array<std::vector<Buffer<T>>, 2> incoming;
  std::array<std::vector<Request>, 2> from_child, to_parent;
  for (int t = 0; t < 2; ++t) {
    const BinaryTree& tree = trees[std::size_t(t)];
    const auto& kids = tree.children[std::size_t(me)];
    for (std::size_t c = 0; c < kids.size(); ++c) {
      incoming[std::size_t(t)].push_back(
          comm.scratch<T>(part.begin(t * S + S) - part.begin(t * S)));
      for (int s = 0; s < S; ++s) {
        const int h = tree.height[std::size_t(kids[c])];
        View<T> into = incoming[std::size_t(t)][c].view().sub(
            part.begin(t * S + s) - part.begin(t * S), part.size(t * S + s));
        from_child[std::size_t(t)].push_back(
            comm.irecv(into, kids[c], kTagDoubleTree + t,
                       meta(first_step + s + h, buffer, t * S + s, t * S + s + 1, Apply::reduce,
                            subtree(t, kids[c]))));
      }
    }
  }
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < 2; ++t) {
      // step s + h: segment s of half t, my children's added, on to my parent
      const BinaryTree& tree = trees[std::size_t(t)];
      const auto& kids = tree.children[std::size_t(me)];
      const int h = tree.height[std::size_t(me)];
      for (std::size_t c = 0; c < kids.size(); ++c) {
        comm.wait(from_child[std::size_t(t)][c * std::size_t(S) + std::size_t(s)]);
        auto add = comm.phase("add");
        ops::add(segment(t, s),
                 cview(incoming[std::size_t(t)][c].view().sub(
                     part.begin(t * S + s) - part.begin(t * S), part.size(t * S + s))));
      }
      const int parent = tree.parent[std::size_t(me)];
      if (parent >= 0) {
        comm.mark_step(first_step + s + h);
        to_parent[std::size_t(t)].push_back(
            comm.isend(cview(segment(t, s)), parent, kTagDoubleTree + t,
                       meta(first_step + s + h, buffer, t * S + s, t * S + s + 1, Apply::reduce,
                            subtree(t, me))));
      }
    }
  // Broadcast: the roots hold the sums; each segment comes down from the parent (once my own
  // send of it up has left) and goes on to the children.
  std::vector<Request> down;
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < 2; ++t) {
      const BinaryTree& tree = trees[std::size_t(t)];
      const int parent = tree.parent[std::size_t(me)];
      if (parent >= 0) {
        comm.wait(to_parent[std::size_t(t)][std::size_t(s)]);
        const int step = first_step + R + s + (H - tree.height[std::size_t(parent)]);
        comm.recv(segment(t, s), parent, kTagDoubleTree + t,
                  meta(step, buffer, t * S + s, t * S + s + 1, Apply::copy, all_ranks(n)));
      }
      // step R + s + (H - h): segment s of half t, summed, down to my children
      const int step = first_step + R + s + (H - tree.height[std::size_t(me)]);
      for (int child : tree.children[std::size_t(me)]) {
        comm.mark_step(step);
        down.push_back(
            comm.isend(cview(segment(t, s)), child, kTagDoubleTree + t,
                       meta(step, buffer, t * S + s, t * S + s + 1, Apply::copy, all_ranks(n))));
      }
    }
  comm.wait_all(down);
  // end quote: double-binary-tree
}

}  // namespace distlab::coll
