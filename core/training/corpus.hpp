// corpus.hpp — lesson 14's training text, generated, and the batches every rank cuts from it.
//
// The text is made here from a seed, so nothing is downloaded and every rank (and the float64
// reference) makes the same: short sentences from a small grammar ("the old fisherman mends
// a net by the harbour."), with enough regularity that a small model's loss falls visibly in a
// few dozen steps (from ln 64 = 4.16 at the start). Characters are the tokens: the 64 of
// kAlphabet, so the vocabulary is 64.
//
// Sequence i of a run is a window of `seq` characters at a place fixed by i (the targets are the
// same window one character on). A training step takes `global` consecutive sequences; a rank
// takes its replica's micro-batches' share of them (sequence_index).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace distlab::gpt {

inline constexpr const char* kAlphabet =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'-\n()";
inline constexpr std::size_t kVocab = 64;

class Corpus {
 public:
  Corpus(std::uint64_t seed, std::size_t characters);

  const std::string& text() const { return text_; }
  // The token of a character of kAlphabet (throws on any other).
  static std::int32_t token(char c);
  static char character(std::int32_t token);

  // Sequence i's `seq` input tokens and its `seq` targets (the next characters), appended.
  void sequence(std::uint64_t i, std::size_t seq, std::vector<std::int32_t>& ids,
                std::vector<std::int32_t>& targets) const;

 private:
  std::string text_;
};

// Which sequence of the run a micro-batch's b-th sequence is: step k takes sequences
// [k G, (k + 1) G) with G = dp x microbatches x batch, replica by replica, then micro-batch by
// micro-batch.
inline std::uint64_t sequence_index(int step, int replica, int micro, std::size_t b, int dp,
                                    int microbatches, std::size_t batch) {
  const std::uint64_t per_replica = std::uint64_t(microbatches) * batch;
  return std::uint64_t(step) * std::uint64_t(dp) * per_replica +
         std::uint64_t(replica) * per_replica + std::uint64_t(micro) * batch + b;
}

}  // namespace distlab::gpt
