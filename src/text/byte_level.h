#pragma once
// Internals of the text layer: GPT-2's bytes_to_unicode mapping and the
// pre-tokenizers of "gpt2" tokenizers (PCRE2).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tensorgrad::text::detail {

/// GPT-2's bytes_to_unicode: the UTF-8 text of byte b's character.
const std::array<std::string, 256>& byte_to_unicode();
/// The bytes in the order of their characters' code points (GPT-2's `bs`
/// list: the printable bytes 33-126, 161-172, 174-255, then the others).
const std::array<uint8_t, 256>& bytes_in_unicode_order();
/// The byte whose character starts `text` at `pos` (advancing `pos`), or -1
/// for a character that is none of the 256.
int unicode_to_byte(std::string_view text, size_t& pos);
/// Byte-encodes `text`: each byte replaced by its character.
std::string byte_encode(std::string_view text);

/// Whether `text` is valid UTF-8.
bool valid_utf8(std::string_view text);
/// Byte length of the UTF-8 sequence starting with `lead` (llama.cpp's
/// unicode_len_utf8: 1 for a stray continuation byte).
size_t utf8_len(uint8_t lead);

/// Whether `pre` names a supported pre-tokenizer.
bool known_pre(const std::string& pre);
/// The supported pre-tokenizers, for messages: "default", "llama-bpe".
const char* known_pres();
/// Splits valid UTF-8 `text` as llama.cpp's unicode_regex_split does for
/// pre-tokenizer `pre`, each regex splitting the pieces of the one before
/// into its matches and the text between them. Views into `text`.
std::vector<std::string_view> pre_tokenize(std::string_view text, const std::string& pre);

}  // namespace tensorgrad::text::detail
