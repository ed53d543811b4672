// Byte-level BPE training (Hugging Face tokenizers' BpeTrainer for GPT-2's
// ByteLevel): pair counts kept up to date per merge, the best pair taken
// from a heap whose stale entries are re-pushed when popped.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/text/tokenizer.h"
#include "text/byte_level.h"

namespace tensorgrad::text {
namespace {

uint64_t pair_of(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
int32_t left_of(uint64_t p) { return static_cast<int32_t>(p >> 32); }
int32_t right_of(uint64_t p) { return static_cast<int32_t>(p & 0xFFFFFFFFu); }

struct Candidate {
  int64_t count;
  uint64_t pair;
  // The heap's top: the highest count, then the smallest (left, right).
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

Tokenizer BpeTokenizer::train(std::string_view text, int64_t vocab_size, const BpeTrainerOptions& options) {
  if (!detail::known_pre(options.pre)) {
    throw ValueError("BpeTokenizer::train: pre is \"" + options.pre + "\"; the supported pre-tokenizers are " +
                     detail::known_pres());
  }
  const int64_t n_special = static_cast<int64_t>(options.special_tokens.size());
  if (vocab_size < 256 + n_special) {
    throw ValueError("BpeTokenizer::train: vocab_size " + std::to_string(vocab_size) + " is below the 256 byte tokens + " +
                     std::to_string(n_special) + " special tokens; ask for at least " + std::to_string(256 + n_special));
  }
  if (vocab_size > INT32_MAX) throw ValueError("BpeTokenizer::train: vocab_size " + std::to_string(vocab_size) + " is too large");
  if (!detail::valid_utf8(text)) throw ValueError("BpeTokenizer::train: the text is not valid UTF-8");
  if (options.min_frequency < 1) {
    throw ValueError("BpeTokenizer::train: min_frequency is " + std::to_string(options.min_frequency) + "; it must be at least 1");
  }
  auto special_index = [&](const std::string& name, const char* what) -> std::optional<int32_t> {
    if (name.empty()) return std::nullopt;
    for (size_t i = 0; i < options.special_tokens.size(); ++i) {
      if (options.special_tokens[i] == name) return static_cast<int32_t>(i);
    }
    throw ValueError(std::string("BpeTokenizer::train: ") + what + " \"" + name + "\" is not one of special_tokens; add it there");
  };
  const auto bos = special_index(options.bos_token, "bos_token");
  const auto eos = special_index(options.eos_token, "eos_token");
  if (options.add_bos && !bos) throw ValueError("BpeTokenizer::train: add_bos needs a bos_token");
  if (options.add_eos && !eos) throw ValueError("BpeTokenizer::train: add_eos needs an eos_token");

  // The 256 byte tokens, in the order of their characters.
  std::vector<std::string> tokens;
  tokens.reserve(static_cast<size_t>(vocab_size));
  std::array<int32_t, 256> byte_id{};
  for (int i = 0; i < 256; ++i) {
    uint8_t b = detail::bytes_in_unicode_order()[i];
    byte_id[b] = i;
    tokens.push_back(detail::byte_to_unicode()[b]);
  }

  // Words: the pre-tokenizer's pieces, counted.
  std::unordered_map<std::string_view, int64_t> counted;
  for (std::string_view piece : detail::pre_tokenize(text, options.pre)) ++counted[piece];
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  words.reserve(counted.size());
  freq.reserve(counted.size());
  for (const auto& [piece, count] : counted) {
    std::vector<int32_t> w;
    w.reserve(piece.size());
    for (char c : piece) w.push_back(byte_id[static_cast<uint8_t>(c)]);
    words.push_back(std::move(w));
    freq.push_back(count);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::unordered_set<int32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      uint64_t p = pair_of(s[i], s[i + 1]);
      pair_count[p] += freq[w];
      where[p].insert(static_cast<int32_t>(w));
    }
  }
  std::priority_queue<Candidate> heap;
  for (const auto& [p, c] : pair_count) heap.push({c, p});

  std::vector<std::string> merges;
  const int64_t target = vocab_size - n_special;
  std::vector<uint64_t> grown;
  while (static_cast<int64_t>(tokens.size()) < target && !heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    auto it = pair_count.find(top.pair);
    int64_t now = it == pair_count.end() ? 0 : it->second;
    if (now != top.count) {  // stale: counts only fall for existing pairs
      if (now > 0) heap.push({now, top.pair});
      continue;
    }
    if (now < options.min_frequency) break;
    const int32_t a = left_of(top.pair), b = right_of(top.pair);
    const auto new_id = static_cast<int32_t>(tokens.size());
    tokens.push_back(tokens[a] + tokens[b]);
    merges.push_back(tokens[a] + " " + tokens[b]);
    std::vector<int32_t> affected(where[top.pair].begin(), where[top.pair].end());
    grown.clear();
    for (int32_t w : affected) {
      auto& s = words[w];
      const int64_t f = freq[w];
      bool has = false;
      for (size_t i = 0; i + 1 < s.size(); ++i) has |= (s[i] == a && s[i + 1] == b);
      if (!has) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) pair_count[pair_of(s[i], s[i + 1])] -= f;
      std::vector<int32_t> merged;
      merged.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {  // left to right, without overlaps
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          merged.push_back(new_id);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      s = std::move(merged);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        uint64_t p = pair_of(s[i], s[i + 1]);
        pair_count[p] += f;
        where[p].insert(w);
        if (s[i] == new_id || s[i + 1] == new_id) grown.push_back(p);
      }
    }
    pair_count.erase(top.pair);
    where.erase(top.pair);
    std::sort(grown.begin(), grown.end());
    grown.erase(std::unique(grown.begin(), grown.end()), grown.end());
    for (uint64_t p : grown) heap.push({pair_count[p], p});
  }

  Tokenizer::Parts parts;
  parts.model = "gpt2";
  parts.pre = options.pre;
  std::vector<int32_t> types(tokens.size(), static_cast<int32_t>(TokenType::Normal));
  std::unordered_set<std::string> seen(tokens.begin(), tokens.end());
  const auto first_special = static_cast<int32_t>(tokens.size());
  for (const std::string& sp : options.special_tokens) {
    if (sp.empty()) throw ValueError("BpeTokenizer::train: a special token is empty");
    if (!seen.insert(sp).second) {
      throw ValueError("BpeTokenizer::train: special token \"" + sp +
                       "\" is already in the vocabulary (a byte token, a merge or another special token); rename it");
    }
    tokens.push_back(sp);
    types.push_back(static_cast<int32_t>(TokenType::Control));
  }
  parts.tokens = std::move(tokens);
  parts.types = std::move(types);
  parts.merges = std::move(merges);
  if (bos) parts.bos = first_special + *bos;
  if (eos) parts.eos = first_special + *eos;
  parts.add_bos = options.add_bos;
  parts.add_eos = options.add_eos;
  return Tokenizer::from_parts(std::move(parts));
}

}  // namespace tensorgrad::text
