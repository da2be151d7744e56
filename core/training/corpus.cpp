#include "core/training/corpus.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cstring>

#include "core/base/check.hpp"
#include "core/runtime/data.hpp"

namespace distlab::gpt {

namespace {

// The grammar: [Opening] Subject Verb Object [Place] End.
constexpr std::array kSubjects = {"the old fisherman", "a small girl",  "the baker",
                                  "my brother",        "the tired cat", "a young sailor",
                                  "the teacher",       "her mother",    "the miller"};
constexpr std::array kVerbs = {"mends", "carries", "finds", "paints",
                               "sells", "watches", "keeps", "loses"};
constexpr std::array kObjects = {"a net",        "the bread", "a red boat", "two apples",
                                 "an old map",   "the lamp",  "a letter",   "the blue door",
                                 "some flowers", "the key"};
constexpr std::array kPlaces = {" by the harbour", " in the morning", " at the market",
                                " near the mill",  " after supper",   ""};
constexpr std::array kOpenings = {"", "", "", "Then ", "Today ", "Later, ", "At noon "};
constexpr std::array kEnds = {".", ".", ".", "!", "?", "; ", ", and "};

template <class A>
const char* pick(const A& options, std::uint64_t& state) {
  state = splitmix64(state);
  return options[state % options.size()];
}

}  // namespace

Corpus::Corpus(std::uint64_t seed, std::size_t characters) {
  std::uint64_t state = splitmix64(seed ^ 0x14);
  bool capital = true;
  while (text_.size() < characters) {
    std::string sentence = pick(kOpenings, state);
    sentence += pick(kSubjects, state);
    sentence += ' ';
    sentence += pick(kVerbs, state);
    sentence += ' ';
    sentence += pick(kObjects, state);
    sentence += pick(kPlaces, state);
    sentence[0] =
        static_cast<char>(capital ? std::toupper(sentence[0]) : std::tolower(sentence[0]));
    const std::string end = pick(kEnds, state);
    sentence += end;
    capital = end.back() != ' ';
    if (capital) {
      state = splitmix64(state);
      sentence += state % 4 == 0 ? "\n" : " ";
    }
    text_ += sentence;
  }
  text_.resize(characters);
  for (char c : text_) token(c);  // every character is one of the alphabet's
}

std::int32_t Corpus::token(char c) {
  const char* at = c == 0 ? nullptr : std::strchr(kAlphabet, c);
  DL_CHECK(at != nullptr, "the corpus holds a character outside the alphabet: {:?}", c);
  return static_cast<std::int32_t>(at - kAlphabet);
}

char Corpus::character(std::int32_t token) {
  DL_CHECK(token >= 0 && static_cast<std::size_t>(token) < kVocab,
           "token {} is not in the "
           "vocabulary of {}",
           token, kVocab);
  return kAlphabet[token];
}

void Corpus::sequence(std::uint64_t i, std::size_t seq, std::vector<std::int32_t>& ids,
                      std::vector<std::int32_t>& targets) const {
  DL_CHECK(text_.size() > seq + 1, "the corpus of {} characters is too short for sequences of {}",
           text_.size(), seq);
  const std::uint64_t places = text_.size() - seq - 1;
  const std::uint64_t start = splitmix64(i * 0x9e3779b97f4a7c15ull + 14) % places;
  for (std::size_t t = 0; t < seq; ++t) {
    ids.push_back(token(text_[start + t]));
    targets.push_back(token(text_[start + t + 1]));
  }
}

}  // namespace distlab::gpt
