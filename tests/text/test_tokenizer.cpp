// The text layer's tokenizers: agreement with llama.cpp's token ids and
// detokenized text (recorded in llama_cpp_ids.h, from llama.cpp through
// node-llama-cpp; regenerate with tests/llama_js/make_llama_cpp_ids.mjs), GGUF
// round trips, byte-level BPE training, and the errors of malformed files.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/io/gguf.h"
#include "tensorgrad/text/tokenizer.h"
#include "test_files.h"
#include "text/llama_cpp_ids.h"
#include "text/reference_vocabs.h"

namespace tg = tensorgrad;
namespace text = tensorgrad::text;
namespace ref = tensorgrad::text::reference;

namespace {

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// Each text's ids and detokenized texts against llama.cpp's.
void expect_llama_cpp(const text::Tokenizer& tok, const std::vector<ref::LlamaCppCase>& cases) {
  const auto& texts = ref::texts();
  ASSERT_EQ(cases.size(), texts.size()) << "llama_cpp_ids.h is stale: regenerate it (tests/llama_js/make_llama_cpp_ids.mjs)";
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("text " + std::to_string(i) + ": \"" + texts[i] + "\"");
    const auto ids = tok.encode(texts[i], /*add_special=*/false);
    EXPECT_EQ(ids, cases[i].ids) << "ours " << show(ids) << "\nllama.cpp " << show(cases[i].ids);
    EXPECT_EQ(tok.decode(cases[i].ids), cases[i].text);
    EXPECT_EQ(tok.decode(cases[i].ids, /*skip_special=*/true), cases[i].text_no_special);
  }
}

// A GGUF file holding only `tok`'s keys, parsed back.
text::Tokenizer round_trip(const text::Tokenizer& tok) {
  tg::io::GGUFWriter w;
  tok.write_gguf(w);
  return text::Tokenizer::from_gguf(tg::io::GGUFFile::parse(w.to_bytes()));
}

// A "gpt2" file's writer with the given merges and tokens, for the error tests.
tg::io::GGUFWriter gpt2_writer(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
                               const std::string& pre = "default") {
  tg::io::GGUFWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_string_array("tokenizer.ggml.merges", merges);
  return w;
}

template <typename F>
std::string format_error(F&& f) {
  try {
    f();
  } catch (const tg::FormatError& e) {
    return e.what();
  }
  return "no FormatError";
}

}  // namespace

TEST(TextTokenizer, SmallLlamaVocabularyTokenizesAsLlamaCpp) {
  expect_llama_cpp(ref::small_llama(), ref::llama_cpp_small_llama());
}

TEST(TextTokenizer, TrainedBpeTokenizesAsLlamaCpp) {
  expect_llama_cpp(ref::trained_bpe(), ref::llama_cpp_trained_bpe());
}

TEST(TextTokenizer, TrainedBpeWithTheDefaultPreTokenizerTokenizesAsLlamaCpp) {
  expect_llama_cpp(ref::trained_bpe_default(), ref::llama_cpp_trained_bpe_default());
}

TEST(TextTokenizer, ByteLevelVocabularyTokenizesAsLlamaCpp) {
  expect_llama_cpp(text::Tokenizer::byte_level(), ref::llama_cpp_byte_level());
}

TEST(TextTokenizer, GgufRoundTripKeepsEveryKeyAndTheTokenization) {
  for (const text::Tokenizer& tok : {ref::small_llama(), ref::trained_bpe(), text::Tokenizer::byte_level()}) {
    SCOPED_TRACE(tok.model() + "/" + tok.pre());
    const text::Tokenizer back = round_trip(tok);
    EXPECT_EQ(back.model(), tok.model());
    EXPECT_EQ(back.pre(), tok.pre());
    ASSERT_EQ(back.vocab_size(), tok.vocab_size());
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      ASSERT_EQ(back.token(id), tok.token(id));
      ASSERT_EQ(back.score(id), tok.score(id));
      ASSERT_EQ(back.token_type(id), tok.token_type(id));
    }
    EXPECT_EQ(back.merges(), tok.merges());
    EXPECT_EQ(back.bos_id(), tok.bos_id());
    EXPECT_EQ(back.eos_id(), tok.eos_id());
    EXPECT_EQ(back.unk_id(), tok.unk_id());
    EXPECT_EQ(back.add_bos(), tok.add_bos());
    EXPECT_EQ(back.add_eos(), tok.add_eos());
    EXPECT_EQ(back.add_space_prefix(), tok.add_space_prefix());
    for (const std::string& t : ref::texts()) EXPECT_EQ(back.encode(t), tok.encode(t));
  }
}

TEST(TextTokenizer, FromGgufPathReadsTheFileWritten) {
  test_support::TempDir dir("tg_text");
  const std::string path = dir / "vocab.gguf";
  ref::write_vocab_only(ref::small_llama(), path);
  const auto tok = text::Tokenizer::from_gguf(path);
  EXPECT_EQ(tok.model(), "llama");
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{1, 275, 294, 271, 269}));
}

TEST(TextTokenizer, AddSpecialPutsBosFirstAndEosLastAsTheFlagsSay) {
  const auto llama = ref::small_llama();
  EXPECT_EQ(llama.bos_id(), 1);
  EXPECT_EQ(llama.eos_id(), 2);
  EXPECT_EQ(llama.unk_id(), 0);
  EXPECT_EQ(llama.encode("Hello world"), (std::vector<int32_t>{1, 275, 294, 271, 269}));
  EXPECT_EQ(llama.encode("", true), (std::vector<int32_t>{1}));  // SentencePiece: "" -> [bos]
  EXPECT_TRUE(llama.encode("", false).empty());
  // llama.cpp's detokenize keeps the space after a bos it renders.
  EXPECT_EQ(llama.decode(std::vector<int32_t>{1, 275, 294, 271, 269}), "<s> Hello world");
  EXPECT_EQ(llama.decode(std::vector<int32_t>{1, 275, 294, 271, 269}, true), " Hello world");
  EXPECT_EQ(llama.decode(std::vector<int32_t>{275, 294, 271, 269}), "Hello world");

  text::BpeTrainerOptions options;
  options.add_eos = true;
  const auto bpe = text::BpeTokenizer::train(ref::training_text(), 300, options);
  const auto ids = bpe.encode("the dog");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), *bpe.bos_id());
  EXPECT_EQ(ids.back(), *bpe.eos_id());
  EXPECT_EQ(bpe.token(*bpe.bos_id()), "<|begin_of_text|>");
  EXPECT_EQ(bpe.token(*bpe.eos_id()), "<|end_of_text|>");
  EXPECT_EQ(bpe.decode(ids), "<|begin_of_text|>the dog<|end_of_text|>");
  EXPECT_EQ(bpe.decode(ids, true), "the dog");
}

TEST(TextTokenizer, SpecialTokenTextIsPlainText) {
  // parse_special = false: "<|begin_of_text|>" in the text is not the bos token.
  const auto bpe = ref::trained_bpe();
  const auto ids = bpe.encode("<|begin_of_text|>", false);
  EXPECT_GT(ids.size(), 1u);
  for (int32_t id : ids) EXPECT_NE(id, *bpe.bos_id());
  EXPECT_EQ(bpe.decode(ids), "<|begin_of_text|>");
}

TEST(TextTokenizer, ByteLevelTokenIdIsTheByte) {
  const auto tok = text::Tokenizer::byte_level();
  EXPECT_EQ(tok.model(), "gpt2");
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.token('A'), "A");
  EXPECT_EQ(tok.token(' '), "\xC4\xA0");  // GPT-2's U+0120 for the space
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 0);
  EXPECT_FALSE(tok.add_bos());
  std::string all;
  for (int b = 1; b < 256; ++b) all += static_cast<char>(b);
  const std::string text = "Caf\xC3\xA9  \t\n\xF0\x9F\x99\x82 it's 12345";
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[i], static_cast<uint8_t>(text[i]));
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TextTokenizer, TrainingIsByteLevelBpeWithTheBytesFirst) {
  const auto tok = ref::trained_bpe();
  ASSERT_EQ(tok.vocab_size(), 420);
  // The 256 bytes in GPT-2's bytes_to_unicode order: "!" (33) first, U+0100 (byte 0) at 188.
  EXPECT_EQ(tok.token(0), "!");
  EXPECT_EQ(tok.token(93), "~");
  EXPECT_EQ(tok.token(188), "\xC4\x80");
  EXPECT_EQ(tok.token(255), "\xC5\x83");  // byte 173 (soft hyphen), the last to be mapped
  EXPECT_EQ(tok.merges().size(), 420u - 256u - 2u);
  EXPECT_EQ(tok.token(418), "<|begin_of_text|>");
  EXPECT_EQ(tok.token_type(418), text::TokenType::Control);
  EXPECT_EQ(tok.token(419), "<|end_of_text|>");
  EXPECT_EQ(tok.pre(), "llama-bpe");
  // Every merge joins two tokens into the token that follows the bytes in order.
  for (size_t r = 0; r < tok.merges().size(); ++r) {
    const std::string& m = tok.merges()[r];
    const size_t space = m.find(' ', 1);
    ASSERT_NE(space, std::string::npos);
    EXPECT_EQ(tok.token(static_cast<int32_t>(256 + r)), m.substr(0, space) + m.substr(space + 1));
  }
  // The most frequent pair of the text merges first: " t" and "he" are
  // among the commonest; the first merge joins byte-level characters.
  EXPECT_TRUE(tok.merges()[0] == "\xC4\xA0 t" || tok.merges()[0] == "h e" || tok.merges()[0] == "e \xC4\xA0")
      << tok.merges()[0];
}

TEST(TextTokenizer, TrainingBreaksTiesBySmallerIds) {
  // "ab" and "cd" each seen twice: the pair of smaller ids, (a, b), goes first.
  text::BpeTrainerOptions options;
  options.special_tokens = {};
  options.bos_token = options.eos_token = "";
  options.add_bos = false;
  options.pre = "default";
  const auto tok = text::BpeTokenizer::train("cd ab cd ab", 258, options);
  ASSERT_EQ(tok.merges().size(), 2u);
  EXPECT_EQ(tok.merges()[0], "a b");
  EXPECT_EQ(tok.merges()[1], "c d");
  // min_frequency stops at pairs seen too rarely.
  options.min_frequency = 3;
  EXPECT_TRUE(text::BpeTokenizer::train("cd ab cd ab", 300, options).merges().empty());
}

TEST(TextTokenizer, TrainingRefusesBadOptions) {
  EXPECT_THROW(text::BpeTokenizer::train("abc", 257), tg::ValueError);  // below 256 + 2 special tokens
  text::BpeTrainerOptions options;
  options.pre = "gpt-4o";
  EXPECT_THROW(text::BpeTokenizer::train("abc", 300, options), tg::ValueError);
  options = {};
  options.bos_token = "<s>";
  EXPECT_THROW(text::BpeTokenizer::train("abc", 300, options), tg::ValueError);
  options = {};
  options.special_tokens = {"!", "<|end_of_text|>"};
  options.bos_token = "!";
  EXPECT_THROW(text::BpeTokenizer::train("abc", 300, options), tg::ValueError);  // "!" is a byte token
  EXPECT_THROW(text::BpeTokenizer::train("\xFF\xFE", 300), tg::ValueError);
}

TEST(TextTokenizer, TokenOutsideTheVocabularyIsAnIndexError) {
  const auto tok = ref::small_llama();
  EXPECT_THROW(tok.token(-1), tg::IndexError);
  EXPECT_THROW(tok.token(static_cast<int32_t>(tok.vocab_size())), tg::IndexError);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{5, 100000}), tg::IndexError);
}

TEST(TextTokenizer, InvalidUtf8IsAValueErrorForBytelevelBpe) {
  EXPECT_THROW(ref::trained_bpe().encode("ab\xC3"), tg::ValueError);
  // "llama" takes any bytes, as llama.cpp does: the stray byte is a byte token.
  EXPECT_EQ(ref::small_llama().encode("\xFF", false), (std::vector<int32_t>{289, 3 + 0xFF}));
}

TEST(TextTokenizer, UnknownModelOrPreIsAFormatErrorNamingTheSupportedOnes) {
  tg::io::GGUFWriter w;
  w.set_string("tokenizer.ggml.model", "bert");
  w.set_string_array("tokenizer.ggml.tokens", {"a"});
  std::string msg = format_error([&] { text::Tokenizer::from_gguf(tg::io::GGUFFile::parse(w.to_bytes())); });
  EXPECT_NE(msg.find("\"bert\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"llama\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"gpt2\""), std::string::npos) << msg;

  auto g = gpt2_writer({"a", "b", "ab"}, {"a b"}, "qwen2");
  msg = format_error([&] { text::Tokenizer::from_gguf(tg::io::GGUFFile::parse(g.to_bytes())); });
  EXPECT_NE(msg.find("tokenizer.ggml.pre"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"qwen2\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"llama-bpe\""), std::string::npos) << msg;

  tg::io::GGUFWriter none;
  none.set_string("general.architecture", "llama");
  msg = format_error([&] { text::Tokenizer::from_gguf(tg::io::GGUFFile::parse(none.to_bytes())); });
  EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
}

TEST(TextTokenizer, MalformedArraysAreFormatErrorsNamingTheKey) {
  auto parse = [](const tg::io::GGUFWriter& w) { text::Tokenizer::from_gguf(tg::io::GGUFFile::parse(w.to_bytes())); };
  {
    auto w = gpt2_writer({"a", "b", "ab"}, {"a b"});
    w.set_f32_array("tokenizer.ggml.scores", std::vector<float>{0.0f, 0.0f});
    const std::string msg = format_error([&] { parse(w); });
    EXPECT_NE(msg.find("tokenizer.ggml.scores"), std::string::npos) << msg;
  }
  {
    auto w = gpt2_writer({"a", "b", "ab"}, {"a b"});
    w.set_i32_array("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1, 1, 1});
    const std::string msg = format_error([&] { parse(w); });
    EXPECT_NE(msg.find("tokenizer.ggml.token_type"), std::string::npos) << msg;
  }
  {
    auto w = gpt2_writer({"a", "b", "ab"}, {"a c"});
    const std::string msg = format_error([&] { parse(w); });
    EXPECT_NE(msg.find("tokenizer.ggml.merges"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"c\""), std::string::npos) << msg;
  }
  {
    auto w = gpt2_writer({"a", "b", "ab"}, {"ab"});
    EXPECT_NE(format_error([&] { parse(w); }).find("tokenizer.ggml.merges"), std::string::npos);
  }
  {
    auto w = gpt2_writer({"a", "b", "ab"}, {"a b"});
    w.set_u32("tokenizer.ggml.eos_token_id", 3);
    const std::string msg = format_error([&] { parse(w); });
    EXPECT_NE(msg.find("tokenizer.ggml.eos_token_id"), std::string::npos) << msg;
  }
  {
    auto w = gpt2_writer({"a", "b", "a"}, {});
    EXPECT_NE(format_error([&] { parse(w); }).find("tokenizer.ggml.tokens"), std::string::npos);
  }
  {
    tg::io::GGUFWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string_array("tokenizer.ggml.tokens", {"a"});
    EXPECT_NE(format_error([&] { parse(w); }).find("tokenizer.ggml.merges"), std::string::npos);
  }
}

TEST(TextTokenizer, AbsentKeysTakeLlamaCppDefaults) {
  tg::io::GGUFWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a"});
  const auto tok = text::Tokenizer::from_gguf(tg::io::GGUFFile::parse(w.to_bytes()));
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_FALSE(tok.add_eos());
  EXPECT_TRUE(tok.add_space_prefix());
  EXPECT_EQ(tok.encode("a"), (std::vector<int32_t>{1, 3}));
  // A "llama" vocabulary without byte tokens cannot spell "b".
  EXPECT_THROW(tok.encode("b"), tg::ValueError);
}
