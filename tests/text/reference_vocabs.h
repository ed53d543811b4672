#pragma once
// The tokenizers whose llama.cpp token ids tests/text/llama_cpp_ids.h
// holds, and the texts tokenized: a small hand-made "llama" (SentencePiece)
// vocabulary with scores and the 256 byte tokens, two "gpt2" (byte-level
// BPE) vocabularies trained by BpeTokenizer::train on a fixed text (pre
// "llama-bpe" and "default"), and Tokenizer::byte_level(). Shared by the tests and by tests/text/write_reference_vocabs.cpp,
// which writes them as vocab-only GGUF files for llama.cpp
// (tests/llama_js/make_llama_cpp_ids.mjs).
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/io/gguf.h"
#include "tensorgrad/text/tokenizer.h"

namespace tensorgrad::text::reference {

/// <unk>, <s>, </s>, the 256 <0xNN> byte tokens, then characters and
/// merges with scores (higher merges first), SentencePiece's layout, and
/// one user-defined token, <|user|>.
inline Tokenizer small_llama() {
  Tokenizer::Parts p;
  p.model = "llama";
  p.tokens = {"<unk>", "<s>", "</s>"};
  p.scores = {0.0f, 0.0f, 0.0f};
  p.types = {2, 3, 3};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    p.tokens.push_back(buf);
    p.scores.push_back(0.0f);
    p.types.push_back(6);
  }
  // Pieces with their scores: merges that make a word score higher than
  // the characters they join, as SentencePiece's BPE scores do.
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\u2581the", -1.0f},  {"\u2581t", -2.0f},   {"he", -3.0f},     {"in", -4.0f},   {"\u2581a", -5.0f},
      {"er", -6.0f},         {"\u2581w", -7.0f},   {"or", -8.0f},     {"\u2581wor", -9.0f}, {"ld", -10.0f},
      {"\u2581world", -11.0f}, {"ll", -12.0f},     {"llo", -13.0f},   {"\u2581h", -14.0f}, {"\u2581he", -15.0f},
      {"\u2581hello", -16.0f}, {"\u2581H", -17.0f}, {"\u2581Hello", -18.0f}, {"\u2581\u2581", -19.0f},
      {"\u2581in", -20.0f},  {"ing", -21.0f},     {"\u2581c", -22.0f}, {"af", -23.0f},  {"caf", -24.0f},
      {"\u2581caf\u00e9", -25.0f}, {"\u00e9", -26.0f}, {"\u4e16\u754c", -27.0f}, {"\u2581\u4e16", -28.0f},
      {"'s", -29.0f},        {"\u2581d", -30.0f},
  };
  for (const auto& [text, score] : pieces) {
    p.tokens.push_back(text);
    p.scores.push_back(score);
    p.types.push_back(1);
  }
  const std::string chars = "\u2581abcdefghijklmnopqrstuvwxyzHTW.,'!?0123456789";
  // The characters (UTF-8, one token each), scored below every merge.
  float score = -100.0f;
  for (size_t i = 0; i < chars.size();) {
    size_t n = (static_cast<unsigned char>(chars[i]) >= 0xE0) ? 3 : 1;
    p.tokens.push_back(chars.substr(i, n));
    p.scores.push_back(score);
    p.types.push_back(1);
    score -= 1.0f;
    i += n;
  }
  for (const char* c : {"\u4e16", "\u754c", "\u00e0"}) {
    p.tokens.push_back(c);
    p.scores.push_back(score);
    p.types.push_back(1);
    score -= 1.0f;
  }
  // A user-defined token: matched in the text before tokenizing, as llama.cpp does.
  p.tokens.push_back("<|user|>");
  p.scores.push_back(0.0f);
  p.types.push_back(4);
  p.bos = 1;
  p.eos = 2;
  p.unk = 0;
  p.add_bos = true;
  p.add_eos = false;
  p.add_space_prefix = true;
  return Tokenizer::from_parts(std::move(p));
}

/// The fixed English text trained on.
inline std::string training_text() {
  std::string t;
  const char* paragraphs[] = {
      "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs into the woods. ",
      "It's a small world: they're here, we'll go there, and I've seen the rest. Don't worry about the weather! ",
      "In 2024 the town counted 12,345 people; in 1999 it had 9,876. Prices rose by 3.5% to $100.25 each. ",
      "Reading and writing, training and testing: a tokenizer learns the pieces that come again and again. ",
      "Caf\u00e9s in Paris serve cr\u00e8me br\u00fbl\u00e9e; na\u00efve visitors order th\u00e9 and g\u00e2teau. ",
      "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3082\u5c11\u3057\u3042\u308a\u307e\u3059\u3002 Emoji too: \U0001F642 \U0001F44D.\n",
      "    Indented lines,\ttabs\tand\nnew lines\n\nseparate the words of the world.\n",
  };
  for (int round = 0; round < 8; ++round) {
    for (const char* p : paragraphs) t += p;
  }
  return t;
}

/// The trained "gpt2" vocabulary: 256 bytes, merges, then
/// <|begin_of_text|> (bos) and <|end_of_text|> (eos).
inline Tokenizer trained_bpe() { return BpeTokenizer::train(training_text(), 420); }

/// The same training with the "default" pre-tokenizer (GPT-2's regex as
/// llama.cpp runs it), bos and eos, add_bos false.
inline Tokenizer trained_bpe_default() {
  BpeTrainerOptions options;
  options.pre = "default";
  options.add_bos = false;
  return BpeTokenizer::train(training_text(), 400, options);
}

/// The reference tokenizers by the names the files and ids go by.
inline std::vector<std::pair<std::string, Tokenizer>> all_tokenizers() {
  std::vector<std::pair<std::string, Tokenizer>> all;
  all.emplace_back("small_llama", small_llama());
  all.emplace_back("trained_bpe", trained_bpe());
  all.emplace_back("trained_bpe_default", trained_bpe_default());
  all.emplace_back("byte_level", Tokenizer::byte_level());
  return all;
}

/// The texts whose llama.cpp ids are recorded: ASCII, accents, CJK, emoji,
/// runs of spaces, tabs and newlines, leading and trailing spaces,
/// contractions, numbers, punctuation and a special token's text.
inline const std::vector<std::string>& texts() {
  static const std::vector<std::string> all = {
      "Hello world",
      "the world in the hello",
      "caf\u00e9 d\u00e9j\u00e0 vu",
      "\u4e16\u754c \u65e5\u672c\u8a9e",
      "emoji \U0001F642 and \U0001F44D\U0001F3FD!",
      "double  space",
      "tab\there",
      "new\nline\n\nend",
      "  leading spaces",
      "trailing spaces  ",
      " ",
      "\t\n \r\n",
      "it's don't we'll they're I've",
      "12345 3.14 $100+200=300",
      "<|begin_of_text|> and <s>",
      "a|b~c^d `x` [y] {z}",
      "The quick brown fox jumps over the lazy dog.",
      "Caf\u00e9s in Paris serve cr\u00e8me br\u00fbl\u00e9e",
      "\u00dcn\u00efc\u00f6d\u00e9 \u00c0\u00c9\u00ce \u00f1 \u00df",
      "   three spaces then words   and   gaps",
      "x 's ' y . z , w ?",
      "say <|user|> hi<|user|><|user|> the end",
  };
  return all;
}

/// Writes `tokenizer` as a vocab-only GGUF file llama.cpp loads
/// (general.architecture "llama" and the llama.* hyperparameters it reads).
inline void write_vocab_only(const Tokenizer& tokenizer, const std::string& path) {
  io::GGUFWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "tensorgrad tokenizer test");
  w.set_u32("llama.context_length", 256);
  w.set_u32("llama.embedding_length", 64);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.feed_forward_length", 128);
  w.set_u32("llama.attention.head_count", 4);
  w.set_u32("llama.attention.head_count_kv", 4);
  w.set_u32("llama.rope.dimension_count", 16);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(tokenizer.vocab_size()));
  tokenizer.write_gguf(w);
  w.write(path);
}

}  // namespace tensorgrad::text::reference
