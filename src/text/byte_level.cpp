// GPT-2's byte mapping and llama.cpp's pre-tokenizers, on PCRE2 (Debian's
// libpcre2-8, with PCRE2_UTF | PCRE2_UCP for the Unicode classes).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/byte_level.h"

#include <pcre2.h>

#include <memory>
#include <mutex>
#include <unordered_map>

#include "tensorgrad/core/error.h"

namespace tensorgrad::text::detail {
namespace {

std::string utf8_of(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<uint8_t, 256> order{};
  std::unordered_map<uint32_t, uint8_t> from_codepoint;
  ByteTables() {
    // GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
    // others take the code points 256, 257, ... in byte order.
    std::array<uint32_t, 256> cp{};
    std::array<bool, 256> printable{};
    for (int b = 0; b < 256; ++b) {
      printable[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    }
    int n = 0, k = 0;
    for (int b = 0; b < 256; ++b) {
      if (printable[b]) { cp[b] = static_cast<uint32_t>(b); order[k++] = static_cast<uint8_t>(b); }
    }
    for (int b = 0; b < 256; ++b) {
      if (!printable[b]) { cp[b] = static_cast<uint32_t>(256 + n++); order[k++] = static_cast<uint8_t>(b); }
    }
    for (int b = 0; b < 256; ++b) {
      to_unicode[b] = utf8_of(cp[b]);
      from_codepoint[cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

// One compiled regex, shared by every thread (pcre2_match takes a const code
// and per-call match data).
struct Regex {
  pcre2_code* code = nullptr;
  explicit Regex(const char* pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                         &error, &offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw StateError(std::string("text: PCRE2 refused the pre-tokenizer regex '") + pattern + "' at " +
                       std::to_string(offset) + ": " + reinterpret_cast<const char*>(message));
    }
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
};

// Splits each piece into the regex's matches and the text between them
// (llama.cpp's unicode_regex_split_stl and custom splitters: the piece is
// the whole subject, so a lookahead never sees past it).
std::vector<std::string_view> split(const std::vector<std::string_view>& pieces, const Regex& regex) {
  std::vector<std::string_view> out;
  out.reserve(pieces.size() * 2);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(regex.code, nullptr), &pcre2_match_data_free);
  for (std::string_view piece : pieces) {
    size_t start = 0;  // where the unmatched text begins
    size_t at = 0;
    while (at < piece.size()) {
      int rc = pcre2_match(regex.code, reinterpret_cast<PCRE2_SPTR>(piece.data()), piece.size(), at,
                           PCRE2_NO_UTF_CHECK, match.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        throw StateError(std::string("text: PCRE2 failed while pre-tokenizing: ") +
                         reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
      size_t begin = ov[0], end = ov[1];
      if (end == begin) {  // none of the regexes matches empty text; step over a character if one does
        at = begin + utf8_len(static_cast<uint8_t>(piece[begin]));
        continue;
      }
      if (begin > start) out.push_back(piece.substr(start, begin - start));
      out.push_back(piece.substr(begin, end - begin));
      start = at = end;
    }
    if (start < piece.size()) out.push_back(piece.substr(start));
  }
  return out;
}

// llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT: four regexes in turn. The first
// is llama.cpp's "[\p{P}\$\+<=>\^~\|]+"; the second GPT-2's, which llama.cpp
// runs as its custom splitter, equal to the regex with a final |\s+.
const std::vector<const Regex*>& default_regexes() {
  static const Regex punct(R"([\p{P}\$\+<=>\^~\|]+)");
  static const Regex gpt2(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  static const Regex numbers(R"(\p{N}+)");
  static const Regex digits3(R"([0-9][0-9][0-9])");
  static const std::vector<const Regex*> all = {&punct, &gpt2, &numbers, &digits3};
  return all;
}

// LLAMA_VOCAB_PRE_TYPE_LLAMA3: the regex llama.cpp uses (its adaptation of
// LLaMA 3's tokenizer.json regex, case-insensitive contractions spelled out).
const std::vector<const Regex*>& llama3_regexes() {
  static const Regex llama3(
      R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  static const std::vector<const Regex*> all = {&llama3};
  return all;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return tables().to_unicode; }
const std::array<uint8_t, 256>& bytes_in_unicode_order() { return tables().order; }

size_t utf8_len(uint8_t lead) {
  // llama.cpp's unicode_len_utf8: by the lead byte's high nibble.
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[lead >> 4];
}

int unicode_to_byte(std::string_view text, size_t& pos) {
  auto b0 = static_cast<uint8_t>(text[pos]);
  size_t n = std::min(utf8_len(b0), text.size() - pos);
  uint32_t cp = 0;
  if (n == 1) {
    cp = b0;
  } else if (n == 2) {
    cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[pos + 1]) & 0x3Fu);
  } else {
    cp = 0x110000;  // three- and four-byte characters are none of the 256
  }
  pos += n;
  auto it = tables().from_codepoint.find(cp);
  return it == tables().from_codepoint.end() ? -1 : it->second;
}

std::string byte_encode(std::string_view text) {
  const auto& map = tables().to_unicode;
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) out += map[static_cast<uint8_t>(c)];
  return out;
}

bool valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto c = static_cast<uint8_t>(text[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else return false;
    if (i + n > text.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      auto d = static_cast<uint8_t>(text[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n;
  }
  return true;
}

bool known_pre(const std::string& pre) { return pre == "default" || pre == "llama-bpe"; }
const char* known_pres() { return "\"default\", \"llama-bpe\""; }

std::vector<std::string_view> pre_tokenize(std::string_view text, const std::string& pre) {
  const auto& regexes = pre == "llama-bpe" ? llama3_regexes() : default_regexes();
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (const Regex* regex : regexes) pieces = split(pieces, *regex);
  return pieces;
}

}  // namespace tensorgrad::text::detail
