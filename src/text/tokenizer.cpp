// Tokenizer: reading, checking and writing the tokenizer.ggml.* keys, and
// encoding and decoding as llama.cpp's llama-vocab.cpp does (its
// llm_tokenizer_spm_session, llm_tokenizer_bpe_session, tokenizer_st_partition,
// token_to_piece and detokenize).
#include "tensorgrad/text/tokenizer.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "tensorgrad/core/error.h"
#include "text/byte_level.h"

namespace tensorgrad::text {
namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kPre = "tokenizer.ggml.pre";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kTypes = "tokenizer.ggml.token_type";
constexpr const char* kMerges = "tokenizer.ggml.merges";
constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kUnk = "tokenizer.ggml.unknown_token_id";
constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string pair_key(std::string_view left, std::string_view right) {
  std::string key = std::to_string(left.size());
  key += ':';
  key += left;
  key += right;
  return key;
}

bool is_special(TokenType type) { return type == TokenType::Control || type == TokenType::Unknown; }

TokenType type_of(int32_t raw) {
  switch (raw) {
    case 1: return TokenType::Normal;
    case 2: return TokenType::Unknown;
    case 3: return TokenType::Control;
    case 4: return TokenType::UserDefined;
    case 5: return TokenType::Unused;
    case 6: return TokenType::Byte;
    default: return TokenType::Undefined;  // llama.cpp reads any other value as undefined
  }
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = text.find(from, pos)) != std::string::npos) {
    text.replace(pos, from.size(), to);
    pos += to.size();
  }
  return text;
}

// llama.cpp's detokenize clean_spaces passes (clean_up_tokenization_spaces).
std::string clean_spaces(const std::string& in) {
  std::string a;
  for (size_t i = 0; i < in.size(); ++i) {
    char x = in[i];
    if (i > 0 && in[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') && !a.empty()) a.pop_back();
    a += x;
  }
  // llama.cpp works in place and blanks the space it skips, which a later
  // apostrophe then no longer sees as a space: `a` is blanked the same way.
  std::string b;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    if (i > 0 && x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b += x;
      a[++i] = '\0';  // the space after it
      continue;
    }
    b += x;
  }
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    char x = b[i];
    if (i > 0 && b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      char x1 = b[i + 1];
      if (x1 == 's' || x1 == 'm') {
        c.pop_back();
      } else if (i + 2 < b.size() && ((x1 == 'r' && b[i + 2] == 'e') || (x1 == 'v' && b[i + 2] == 'e'))) {
        c.pop_back();
      }
    }
    c += x;
  }
  return c;
}

const io::MetadataValue& array_of(const io::GGUFFile& file, const char* key, const io::MetadataValue* v) {
  if (v->type != io::ValueType::Array) {
    throw FormatError(std::string("text: ") + key + " in " + file.path() + " is a " + io::value_type_name(v->type) +
                      ", not an array; rewrite the file with the tokenizer's arrays");
  }
  return *v;
}

std::optional<int32_t> read_id(const io::GGUFFile& file, const char* key, std::optional<int32_t> fallback) {
  const io::MetadataValue* v = file.find(key);
  if (!v) return fallback;
  if (v->type == io::ValueType::Array || v->ints.size() != 1 || v->type == io::ValueType::Bool) {
    throw FormatError(std::string("text: ") + key + " in " + file.path() + " must be an integer (UINT32), got a " +
                      io::value_type_name(v->type));
  }
  int64_t id = v->ints[0];
  if (v->type == io::ValueType::UInt32) id = static_cast<uint32_t>(id);
  if (id < 0 || id > INT32_MAX) {
    throw FormatError(std::string("text: ") + key + " in " + file.path() + " is " + std::to_string(id) +
                      ", not a token id");
  }
  return static_cast<int32_t>(id);
}

bool read_bool(const io::GGUFFile& file, const char* key, bool fallback) {
  return file.find(key) ? file.get_bool(key) : fallback;
}

}  // namespace

Tokenizer Tokenizer::from_parts(Parts parts) {
  Tokenizer t;
  if (parts.model != "llama" && parts.model != "gpt2") {
    throw FormatError(std::string("text: ") + kModel + " is \"" + parts.model +
                      "\"; the supported tokenizers are \"llama\" (SentencePiece BPE) and \"gpt2\" (byte-level BPE)");
  }
  if (parts.model == "gpt2" && !detail::known_pre(parts.pre)) {
    throw FormatError(std::string("text: ") + kPre + " is \"" + parts.pre + "\"; the supported pre-tokenizers are " +
                      detail::known_pres());
  }
  const size_t n = parts.tokens.size();
  if (n == 0) throw FormatError(std::string("text: ") + kTokens + " is empty; a tokenizer needs a vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) throw FormatError(std::string("text: ") + kTokens + " is too long");
  if (!parts.scores.empty() && parts.scores.size() != n) {
    throw FormatError(std::string("text: ") + kScores + " has " + std::to_string(parts.scores.size()) +
                      " entries but " + kTokens + " has " + std::to_string(n) + "; they must be the same length");
  }
  if (!parts.types.empty() && parts.types.size() != n) {
    throw FormatError(std::string("text: ") + kTypes + " has " + std::to_string(parts.types.size()) +
                      " entries but " + kTokens + " has " + std::to_string(n) + "; they must be the same length");
  }
  if (parts.model == "llama" && !parts.merges.empty()) {
    throw FormatError(std::string("text: ") + kMerges + " is given for a \"llama\" tokenizer, which merges by " +
                      kScores + "; drop it or use \"gpt2\"");
  }
  auto check_id = [n](const char* key, const std::optional<int32_t>& id) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      throw FormatError(std::string("text: ") + key + " is " + std::to_string(*id) + ", outside the vocabulary [0, " +
                        std::to_string(n) + ")");
    }
  };
  check_id(kBos, parts.bos);
  check_id(kEos, parts.eos);
  check_id(kUnk, parts.unk);
  check_id(kPad, parts.pad);
  if (parts.add_bos && !parts.bos) {
    throw FormatError(std::string("text: ") + kAddBos + " is true but there is no " + kBos);
  }
  if (parts.add_eos && !parts.eos) {
    throw FormatError(std::string("text: ") + kAddEos + " is true but there is no " + kEos);
  }
  t.model_ = std::move(parts.model);
  t.pre_ = t.model_ == "gpt2" ? std::move(parts.pre) : std::string("default");
  t.tokens_ = std::move(parts.tokens);
  t.scores_ = parts.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(parts.scores);
  t.types_ = parts.types.empty() ? std::vector<int32_t>(n, 1) : std::move(parts.types);
  t.merges_ = std::move(parts.merges);
  t.bos_ = parts.bos;
  t.eos_ = parts.eos;
  t.unk_ = parts.unk;
  t.pad_ = parts.pad;
  t.add_bos_ = parts.add_bos;
  t.add_eos_ = parts.add_eos;
  t.add_space_prefix_ = t.model_ == "llama" ? parts.add_space_prefix : false;
  // llama.cpp: every BPE pre-tokenizer supported here cleans spaces when
  // decoding; LLaMA 3's keeps a word that is a token whole.
  t.clean_spaces_ = t.model_ == "gpt2";
  t.ignore_merges_ = t.model_ == "gpt2" && t.pre_ == "llama-bpe";
  t.index();
  return t;
}

void Tokenizer::index() {
  ids_.clear();
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].empty()) {
      throw FormatError(std::string("text: ") + kTokens + " entry " + std::to_string(i) +
                        " is empty; every token needs text");
    }
    auto [it, fresh] = ids_.emplace(tokens_[i], static_cast<int32_t>(i));
    if (!fresh) {
      throw FormatError(std::string("text: ") + kTokens + " lists \"" + tokens_[i] + "\" twice (ids " +
                        std::to_string(it->second) + " and " + std::to_string(i) + "); tokens must be distinct");
    }
  }
  ranks_.clear();
  ranks_.reserve(merges_.size());
  for (size_t r = 0; r < merges_.size(); ++r) {
    const std::string& m = merges_[r];
    size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 >= m.size()) {
      throw FormatError(std::string("text: ") + kMerges + " entry " + std::to_string(r) + " is \"" + m +
                        "\"; a merge is two tokens separated by one space");
    }
    std::string left = m.substr(0, space), right = m.substr(space + 1);
    if (!ids_.count(left) || !ids_.count(right)) {
      throw FormatError(std::string("text: ") + kMerges + " entry " + std::to_string(r) + " (\"" + m +
                        "\") names \"" + (ids_.count(left) ? right : left) + "\", which is not in " + kTokens);
    }
    ranks_.emplace(pair_key(left, right), static_cast<int32_t>(r));  // the first of duplicates wins, as in llama.cpp
  }
  user_defined_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (types_[i] == static_cast<int32_t>(TokenType::UserDefined)) user_defined_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(user_defined_.begin(), user_defined_.end(),
                   [this](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
}

Tokenizer Tokenizer::from_gguf(const io::GGUFFile& file) {
  Parts parts;
  if (!file.find(kModel)) {
    throw FormatError(std::string("text: ") + file.path() + " has no " + kModel +
                      "; it holds no tokenizer (write one with Tokenizer::write_gguf)");
  }
  parts.model = file.get_string(kModel);
  if (parts.model != "llama" && parts.model != "gpt2") {
    throw FormatError(std::string("text: ") + kModel + " in " + file.path() + " is \"" + parts.model +
                      "\"; the supported tokenizers are \"llama\" (SentencePiece BPE) and \"gpt2\" (byte-level BPE)");
  }
  // llama.cpp takes a "gpt2" file without a pre as "default" (with a warning).
  parts.pre = file.find(kPre) ? file.get_string(kPre) : std::string("default");
  if (!file.find(kTokens)) throw FormatError(std::string("text: ") + file.path() + " has no " + kTokens);
  parts.tokens = file.get_string_array(kTokens);
  if (const io::MetadataValue* v = file.find(kScores)) {
    const auto& a = array_of(file, kScores, v);
    if (a.element_type == io::ValueType::Float32 || a.element_type == io::ValueType::Float64) {
      for (double d : a.floats) parts.scores.push_back(static_cast<float>(d));
    } else if (a.element_type == io::ValueType::Int32) {
      for (int64_t i : a.ints) parts.scores.push_back(static_cast<float>(i));
    } else {
      throw FormatError(std::string("text: ") + kScores + " in " + file.path() + " is an array of " +
                        io::value_type_name(a.element_type) + "; llama.cpp reads FLOAT32 or INT32");
    }
    if (parts.scores.empty() && !parts.tokens.empty()) {
      throw FormatError(std::string("text: ") + kScores + " in " + file.path() + " is empty but " + kTokens + " has " +
                        std::to_string(parts.tokens.size()) + " entries");
    }
  }
  if (const io::MetadataValue* v = file.find(kTypes)) {
    const auto& a = array_of(file, kTypes, v);
    if (a.element_type != io::ValueType::Int32) {
      throw FormatError(std::string("text: ") + kTypes + " in " + file.path() + " is an array of " +
                        io::value_type_name(a.element_type) + "; llama.cpp reads INT32");
    }
    for (int64_t i : a.ints) parts.types.push_back(static_cast<int32_t>(i));
    if (parts.types.empty() && !parts.tokens.empty()) {
      throw FormatError(std::string("text: ") + kTypes + " in " + file.path() + " is empty but " + kTokens + " has " +
                        std::to_string(parts.tokens.size()) + " entries");
    }
  }
  const bool llama = parts.model == "llama";
  if (!llama) {
    if (!file.find(kMerges)) {
      throw FormatError(std::string("text: ") + file.path() + " has a \"gpt2\" tokenizer but no " + kMerges +
                        " (llama.cpp refuses it too)");
    }
    parts.merges = file.get_string_array(kMerges);
  }
  // llama.cpp's defaults where a key is absent.
  const size_t n = parts.tokens.size();
  auto fallback = [n](int32_t id) { return static_cast<size_t>(id) < n ? std::optional<int32_t>(id) : std::nullopt; };
  parts.bos = read_id(file, kBos, llama ? fallback(1) : fallback(11));
  parts.eos = read_id(file, kEos, llama ? fallback(2) : fallback(11));
  parts.unk = read_id(file, kUnk, llama ? fallback(0) : std::nullopt);
  parts.pad = read_id(file, kPad, std::nullopt);
  parts.add_bos = read_bool(file, kAddBos, llama || parts.pre == "llama-bpe");
  parts.add_eos = read_bool(file, kAddEos, false);
  parts.add_space_prefix = read_bool(file, kAddSpacePrefix, llama);
  try {
    return from_parts(std::move(parts));
  } catch (const FormatError& e) {
    throw FormatError(std::string(e.what()) + " (in " + file.path() + ")");
  }
}

Tokenizer Tokenizer::from_gguf(const std::string& path) { return from_gguf(io::GGUFFile::open(path)); }

Tokenizer Tokenizer::byte_level() {
  Parts parts;
  parts.model = "gpt2";
  parts.pre = "default";
  const auto& map = detail::byte_to_unicode();
  parts.tokens.assign(map.begin(), map.end());
  parts.bos = 0;
  parts.eos = 0;
  parts.add_bos = false;
  parts.add_eos = false;
  return from_parts(std::move(parts));
}

const std::string& Tokenizer::token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw IndexError("text: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(vocab_size()) + ")");
  }
  return tokens_[id];
}

float Tokenizer::score(int32_t id) const {
  token(id);
  return scores_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  token(id);
  return type_of(types_[id]);
}

std::optional<int32_t> Tokenizer::find(std::string_view text) const {
  auto it = ids_.find(std::string(text));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::spm_byte_token(uint8_t byte) const {
  static const char* hex = "0123456789ABCDEF";
  const char buf[7] = {'<', '0', 'x', hex[byte >> 4], hex[byte & 15], '>', 0};
  if (auto id = find(buf)) return *id;
  if (auto id = find(std::string(1, static_cast<char>(byte)))) return *id;
  throw ValueError(std::string("text: the \"llama\" vocabulary has no byte token ") + buf +
                   " for a character outside it; add the 256 <0xNN> tokens (type 6)");
}

void Tokenizer::encode_spm(std::string_view raw, std::vector<int32_t>& out) const {
  // llama.cpp's llm_tokenizer_spm_session: UTF-8 characters as symbols, the
  // best-scoring adjacent pair whose text is a token merged first (ties to the
  // leftmost), symbols that are no token as their bytes.
  const std::string text = replace_all(std::string(raw), " ", kSpace);
  struct Symbol {
    int prev, next;
    size_t begin, n;
  };
  struct Bigram {
    int left, right;
    float score;
    size_t size;
  };
  auto worse = [](const Bigram& l, const Bigram& r) {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  };
  std::vector<Symbol> symbols;
  for (size_t offs = 0; offs < text.size();) {
    size_t len = std::min(detail::utf8_len(static_cast<uint8_t>(text[offs])), text.size() - offs);
    int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offs + len == text.size() ? -1 : index + 1, offs, len});
    offs += len;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    std::string_view piece(text.data() + symbols[left].begin, symbols[left].n + symbols[right].n);
    auto it = ids_.find(std::string(piece));
    if (it == ids_.end()) return;
    queue.push({left, right, scores_[it->second], piece.size()});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  if (symbols.empty()) return;
  for (int i = 0; i != -1; i = symbols[i].next) {
    std::string piece = text.substr(symbols[i].begin, symbols[i].n);
    auto it = ids_.find(piece);
    if (it != ids_.end()) {
      out.push_back(it->second);
    } else {
      for (char c : piece) out.push_back(spm_byte_token(static_cast<uint8_t>(c)));
    }
  }
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  // llama.cpp's llm_tokenizer_bpe_session: per pre-tokenized piece, its
  // byte characters as symbols, the lowest-ranked adjacent merge first (ties
  // to the leftmost).
  struct Symbol {
    int prev, next;
    size_t begin, n;
  };
  struct Bigram {
    int left, right;
    int32_t rank;
    std::string text;
  };
  auto worse = [](const Bigram& l, const Bigram& r) {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  };
  for (std::string_view piece : detail::pre_tokenize(text, pre_)) {
    const std::string word = detail::byte_encode(piece);
    if (ignore_merges_) {
      auto it = ids_.find(word);
      if (it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
    }
    std::vector<Symbol> symbols;
    for (size_t offs = 0; offs < word.size();) {
      size_t len = std::min(detail::utf8_len(static_cast<uint8_t>(word[offs])), word.size() - offs);
      int index = static_cast<int>(symbols.size());
      symbols.push_back({index - 1, offs + len == word.size() ? -1 : index + 1, offs, len});
      offs += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto sym = [&](int i) { return std::string_view(word.data() + symbols[i].begin, symbols[i].n); };
    auto try_add = [&](int left, int right) {
      if (left == -1 || right == -1) return;
      auto it = ranks_.find(pair_key(sym(left), sym(right)));
      if (it == ranks_.end()) return;
      queue.push({left, right, it->second, std::string(sym(left)) + std::string(sym(right))});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      Bigram b = queue.top();
      queue.pop();
      Symbol& l = symbols[b.left];
      Symbol& r = symbols[b.right];
      if (l.n == 0 || r.n == 0) continue;
      if (std::string(sym(b.left)) + std::string(sym(b.right)) != b.text) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (symbols[i].n == 0) continue;
      std::string s(sym(static_cast<int>(i)));
      auto it = ids_.find(s);
      if (it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      // llama.cpp looks each byte of the symbol up as a one-byte token and
      // drops those that are none (only a vocabulary whose merges make
      // tokens it lacks gets here).
      for (char c : s) {
        auto b = ids_.find(std::string(1, c));
        if (b != ids_.end()) out.push_back(b->second);
      }
    }
  }
}

void Tokenizer::encode_fragments(std::string_view text, std::vector<int32_t>& out) const {
  // tokenizer_st_partition with parse_special = false: user-defined tokens
  // are cut out of the text first, longest first; the rest is tokenized.
  struct Fragment {
    std::string_view text;
    int32_t token;  // -1: text
  };
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({text, -1});
  for (int32_t id : user_defined_) {
    const std::string& special = tokens_[id];
    std::vector<Fragment> next;
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      size_t at;
      while ((at = rest.find(special)) != std::string_view::npos) {
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({{}, id});
        rest = rest.substr(at + special.size());
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    fragments = std::move(next);
  }
  bool prev_special = true;  // "llama": a space before the first text, and after a special token
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
    } else if (model_ == "llama") {
      std::string piece;
      if (add_space_prefix_ && prev_special) piece = " ";
      piece += f.text;
      encode_spm(piece, out);
      prev_special = false;
    } else {
      encode_bpe(f.text, out);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  if (model_ == "gpt2" && !detail::valid_utf8(text)) {
    throw ValueError("text: encode() got text that is not valid UTF-8; a \"gpt2\" tokenizer splits Unicode text");
  }
  std::vector<int32_t> out;
  if (add_special && add_bos_) out.push_back(*bos_);
  encode_fragments(text, out);
  if (add_special && add_eos_) out.push_back(*eos_);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string text;
  bool remove_space = add_space_prefix_;
  for (int32_t id : ids) {
    token(id);  // IndexError
    const TokenType type = type_of(types_[id]);
    std::string piece;
    if (is_special(type) || type == TokenType::UserDefined) {
      if (!(skip_special && is_special(type))) piece = tokens_[id];
    } else if (type == TokenType::Normal) {
      if (model_ == "llama") {
        piece = replace_all(tokens_[id], kSpace, " ");
      } else {
        const std::string& t = tokens_[id];
        for (size_t pos = 0; pos < t.size();) {
          size_t start = pos;
          int b = detail::unicode_to_byte(t, pos);
          if (b >= 0) {
            piece += static_cast<char>(b);
          } else {  // llama.cpp's llama_decode_text marks a character that is no byte
            static const char* hex = "0123456789abcdef";
            piece += "[UNK_BYTE_0x";
            for (size_t k = start; k < pos; ++k) {
              auto c = static_cast<uint8_t>(t[k]);
              piece += hex[c >> 4];
              piece += hex[c & 15];
            }
            piece += t + "]";
          }
        }
      }
    } else if (type == TokenType::Byte) {
      piece += static_cast<char>(std::stoi(tokens_[id].substr(3, 2), nullptr, 16));
    }
    // Undefined and unused tokens have no text (llama.cpp's token_to_piece).
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    text += piece;
  }
  return clean_spaces_ ? clean_spaces(text) : text;
}

void Tokenizer::write_gguf(io::GGUFWriter& writer) const {
  writer.set_string(kModel, model_);
  if (model_ == "gpt2") writer.set_string(kPre, pre_);
  writer.set_string_array(kTokens, tokens_);
  writer.set_f32_array(kScores, scores_);
  writer.set_i32_array(kTypes, types_);
  if (model_ == "gpt2") writer.set_string_array(kMerges, merges_);
  if (bos_) writer.set_u32(kBos, static_cast<uint32_t>(*bos_));
  if (eos_) writer.set_u32(kEos, static_cast<uint32_t>(*eos_));
  if (unk_) writer.set_u32(kUnk, static_cast<uint32_t>(*unk_));
  if (pad_) writer.set_u32(kPad, static_cast<uint32_t>(*pad_));
  writer.set_bool(kAddBos, add_bos_);
  writer.set_bool(kAddEos, add_eos_);
  if (model_ == "llama") writer.set_bool(kAddSpacePrefix, add_space_prefix_);
}

}  // namespace tensorgrad::text
