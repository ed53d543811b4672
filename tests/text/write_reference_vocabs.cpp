// Writes the reference tokenizers (reference_vocabs.h) as vocab-only GGUF
// files, and the texts as JSON, into a folder, for
// tests/llama_js/make_llama_cpp_ids.mjs:
//   write_reference_vocabs DIR  ->  DIR/<name>.gguf per tokenizer, DIR/names.json, DIR/texts.json
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "text/reference_vocabs.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  namespace ref = tensorgrad::text::reference;
  const std::string dir = argv[1];
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [name, tokenizer] : ref::all_tokenizers()) {
    ref::write_vocab_only(tokenizer, dir + "/" + name + ".gguf");
    names.push_back(name);
  }
  std::ofstream(dir + "/names.json") << names.dump() << "\n";
  nlohmann::json texts = ref::texts();
  std::ofstream(dir + "/texts.json") << texts.dump() << "\n";
  return 0;
}
