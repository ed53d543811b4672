#pragma once
// Tokenizers stored as data in a GGUF file's tokenizer.ggml.* keys, the way
// llama.cpp stores and reads them (its llama-vocab.cpp), tokenizing exactly
// as llama.cpp does:
//
//   "llama"  SentencePiece BPE (llama.cpp's llm_tokenizer_spm): spaces become
//            U+2581, a leading U+2581 when tokenizer.ggml.add_space_prefix,
//            UTF-8 characters as the first symbols, adjacent pairs merged
//            highest tokenizer.ggml.scores first, characters outside the
//            vocabulary as their <0xNN> byte tokens.
//   "gpt2"   byte-level BPE (GPT-2's bytes_to_unicode mapping): the text is
//            split by the pre-tokenizer named by tokenizer.ggml.pre, then
//            each piece's adjacent pairs are merged lowest rank first, a
//            rank being a tokenizer.ggml.merges entry's position.
//
// Pre-tokenizers ("gpt2" only): "default" (llama.cpp's default, GPT-2's
// regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// after runs of punctuation and $+<=>^~| are split off, and numbers split
// into runs of at most three digits, as llama.cpp applies its four regexes)
// and "llama-bpe" (LLaMA 3's regex, with a word that is itself a token kept
// whole, llama.cpp's ignore_merges). Unicode classes come from PCRE2.
//
// Special tokens: encode() treats the text as plain text (llama.cpp's
// parse_special = false, node-llama-cpp's tokenize(text, false)): the text
// "<|begin_of_text|>" is tokenized as its characters. User-defined tokens
// (token type 4) are still matched first, as in llama.cpp.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensorgrad/io/gguf.h"

namespace tensorgrad::text {

/// llama.cpp's token types (tokenizer.ggml.token_type, llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0,    ///< LLAMA_TOKEN_TYPE_UNDEFINED
  Normal = 1,       ///< ordinary text
  Unknown = 2,      ///< the unknown token (`<unk>`)
  Control = 3,      ///< control tokens (`<s>`, `<|begin_of_text|>`): no text when decoded without special tokens
  UserDefined = 4,  ///< tokens matched in the text before tokenizing
  Unused = 5,       ///< LLAMA_TOKEN_TYPE_UNUSED
  Byte = 6,         ///< `<0xNN>` byte fallback tokens of "llama" vocabularies
};

/// A tokenizer read from or written to a GGUF file's tokenizer.ggml.* keys.
/// Immutable after construction; encode() and decode() may run on several
/// threads at once.
class Tokenizer {
 public:
  /// Reads the tokenizer.ggml.* keys of `file`. Absent optional keys take
  /// llama.cpp's defaults ("llama": bos 1, eos 2, unk 0, add_bos true,
  /// add_space_prefix true; "gpt2": bos and eos 11, add_bos only for
  /// "llama-bpe"). Throws FormatError naming the key for: a missing
  /// tokenizer.ggml.model or tokenizer.ggml.tokens; a model other than
  /// "llama" or "gpt2", or a pre other than "default" or "llama-bpe" (the
  /// message lists the supported ones); scores or token types whose length
  /// is not the vocabulary's; a token listed twice; a merge that is not two
  /// tokens of the vocabulary separated by one space; a special token id
  /// outside the vocabulary.
  static Tokenizer from_gguf(const io::GGUFFile& file);
  /// Opens the GGUF file at `path` and reads its tokenizer (IOError if it
  /// cannot be read, FormatError as above).
  static Tokenizer from_gguf(const std::string& path);

  /// A "gpt2" vocabulary of the 256 bytes with byte b at id b (each token
  /// is GPT-2's bytes_to_unicode character of its byte) and no merges: a
  /// token id IS the byte, so encode() returns the text's bytes and llama.cpp
  /// tokenizes a file written from it the same way. bos and eos are both id
  /// 0 (the NUL byte, which text does not contain; llama.cpp needs them to
  /// be tokens of the vocabulary), add_bos and add_eos false.
  static Tokenizer byte_level();

  /// Token ids of `text` (UTF-8), as llama.cpp's llama_tokenize(text,
  /// add_special, parse_special = false). With `add_special`, bos first when
  /// add_bos() and eos last when add_eos(). "gpt2" tokenizers throw
  /// ValueError for text that is not valid UTF-8; a "llama" vocabulary
  /// without the `<0xNN>` token a character needs throws ValueError.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const;

  /// The text of `ids`, as llama.cpp's llama_detokenize(ids, remove_special
  /// = false, unparse_special = !skip_special): control and unknown tokens
  /// give their text, or nothing with `skip_special`; "llama" turns U+2581
  /// back into spaces, `<0xNN>` tokens into their bytes, and drops the first
  /// token's leading space when add_space_prefix; "gpt2" maps the
  /// bytes_to_unicode characters back to bytes and then cleans spaces as
  /// llama.cpp does (clean_up_tokenization_spaces: " ." -> ".", " 's" ->
  /// "'s", ...). Throws IndexError for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  /// Writes every tokenizer.ggml.* key llama.cpp reads for this kind of
  /// tokenizer: model, pre ("gpt2"), tokens, scores, token_type, merges
  /// ("gpt2"), the bos/eos/unk/padding ids that are set, add_bos_token,
  /// add_eos_token and add_space_prefix ("llama").
  void write_gguf(io::GGUFWriter& writer) const;

  const std::string& model() const { return model_; }  ///< "llama" or "gpt2"
  const std::string& pre() const { return pre_; }      ///< "default", "llama-bpe"
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }  ///< number of tokens
  std::optional<int32_t> bos_id() const { return bos_; }  ///< beginning of sequence
  std::optional<int32_t> eos_id() const { return eos_; }  ///< end of sequence
  std::optional<int32_t> unk_id() const { return unk_; }  ///< unknown
  std::optional<int32_t> pad_id() const { return pad_; }  ///< padding
  bool add_bos() const { return add_bos_; }  ///< whether encode(text, true) starts with bos
  bool add_eos() const { return add_eos_; }  ///< whether encode(text, true) ends with eos
  bool add_space_prefix() const { return add_space_prefix_; }  ///< "llama": a space before the text
  /// The token's text as stored (U+2581 for spaces in "llama", GPT-2's
  /// byte characters in "gpt2"). IndexError outside [0, vocab_size()).
  const std::string& token(int32_t id) const;
  /// The token's score (tokenizer.ggml.scores; 0 where the file has none).
  float score(int32_t id) const;
  /// The token's type. IndexError outside [0, vocab_size()).
  TokenType token_type(int32_t id) const;
  /// The id of the token whose stored text is `text`, or nullopt.
  std::optional<int32_t> find(std::string_view text) const;
  /// The merges ("gpt2"), highest priority first, each "left right".
  const std::vector<std::string>& merges() const { return merges_; }

  /// A tokenizer's parts, the tokenizer.ggml.* keys' values, for from_parts.
  struct Parts {
    std::string model;                ///< "llama" or "gpt2"
    std::string pre = "default";      ///< "gpt2" only: "default" or "llama-bpe"
    std::vector<std::string> tokens;  ///< tokenizer.ggml.tokens
    std::vector<float> scores;        ///< tokenizer.ggml.scores (empty: all 0)
    std::vector<int32_t> types;       ///< tokenizer.ggml.token_type (empty: all Normal)
    std::vector<std::string> merges;  ///< tokenizer.ggml.merges ("gpt2")
    std::optional<int32_t> bos;       ///< tokenizer.ggml.bos_token_id
    std::optional<int32_t> eos;       ///< tokenizer.ggml.eos_token_id
    std::optional<int32_t> unk;       ///< tokenizer.ggml.unknown_token_id
    std::optional<int32_t> pad;       ///< tokenizer.ggml.padding_token_id
    bool add_bos = false;           ///< tokenizer.ggml.add_bos_token
    bool add_eos = false;           ///< tokenizer.ggml.add_eos_token
    bool add_space_prefix = true;   ///< tokenizer.ggml.add_space_prefix ("llama")
  };
  /// Builds a tokenizer from its parts, checked as from_gguf checks a file
  /// (FormatError naming the tokenizer.ggml key at fault). `scores` and
  /// `types` may be empty (0 and Normal for every token).
  static Tokenizer from_parts(Parts parts);

 private:
  Tokenizer() = default;
  void index();  // builds the lookup tables after the fields are set
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void encode_fragments(std::string_view text, std::vector<int32_t>& out) const;
  int32_t spm_byte_token(uint8_t byte) const;

  std::string model_, pre_;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::vector<std::string> merges_;
  std::optional<int32_t> bos_, eos_, unk_, pad_;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = true;
  bool clean_spaces_ = false, ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> rank
  std::vector<int32_t> user_defined_;  // ids matched in the text first, longest first
};

/// Options of BpeTokenizer::train.
struct BpeTrainerOptions {
  /// Control tokens appended to the vocabulary after the merges, in order.
  std::vector<std::string> special_tokens = {"<|begin_of_text|>", "<|end_of_text|>"};
  /// Which special token is bos, and which eos (empty: none; each must be
  /// one of special_tokens).
  std::string bos_token = "<|begin_of_text|>";
  std::string eos_token = "<|end_of_text|>";  ///< see bos_token
  bool add_bos = true;    ///< tokenizer.ggml.add_bos_token of the result
  bool add_eos = false;   ///< tokenizer.ggml.add_eos_token of the result
  /// Pairs seen fewer times than this are not merged (training stops there).
  int64_t min_frequency = 2;
  /// The pre-tokenizer: "llama-bpe" (LLaMA 3's) or "default".
  std::string pre = "llama-bpe";
};

/// Byte-level BPE training, as Hugging Face's tokenizers trains GPT-2's.
class BpeTokenizer {
 public:
  /// Trains a "gpt2" tokenizer on `text` (UTF-8): the 256 byte tokens first,
  /// in bytes_to_unicode order (id i is the i-th character of GPT-2's
  /// mapping, sorted by code point as Hugging Face sorts its alphabet); the
  /// text is split by options.pre's pre-tokenizer and the pieces counted;
  /// then the most frequent adjacent pair is merged, again and again, until
  /// the vocabulary, special tokens included, has `vocab_size` tokens or no
  /// pair is seen min_frequency times. Ties go to the pair of smaller ids
  /// (left id first, then right), Hugging Face's order. Pair counts are
  /// updated incrementally per merge. Throws ValueError for vocab_size below
  /// 256 + the special tokens, an unknown pre, a bos/eos token that is not a
  /// special token, a special token that is a byte token or listed twice,
  /// or text that is not valid UTF-8.
  static Tokenizer train(std::string_view text, int64_t vocab_size, const BpeTrainerOptions& options = {});
};

}  // namespace tensorgrad::text
