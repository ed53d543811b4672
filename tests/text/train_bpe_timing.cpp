// Times BpeTokenizer::train (and encode) on a text file, one thread:
//   train_bpe_timing FILE [VOCAB_SIZE=4096] [PRE=llama-bpe]
// e.g. 4 MiB of English from the GCIDE dictionary (Debian's dict-gcide):
//   zcat /usr/share/dictd/gcide.dict.dz | iconv -f utf-8 -t utf-8 -c | head -c 4194304 \
//     | iconv -f utf-8 -t utf-8 -c > /tmp/en4m.txt
//   build-test/tests/train_bpe_timing /tmp/en4m.txt
// Not a test: the suite depends on no wall-clock time.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tensorgrad/text/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s FILE [VOCAB_SIZE=4096] [PRE=llama-bpe]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const long vocab = argc > 2 ? std::stol(argv[2]) : 4096;
  tensorgrad::text::BpeTrainerOptions options;
  if (argc > 3) options.pre = argv[3];
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto tok = tensorgrad::text::BpeTokenizer::train(text, vocab, options);
  const auto t1 = clock::now();
  const auto ids = tok.encode(text, false);
  const auto t2 = clock::now();
  std::printf("%zu bytes, pre %s: vocabulary %lld (%zu merges) trained in %.2f s; encoded in %.2f s to %zu tokens "
              "(%.2f bytes per token)\n",
              text.size(), options.pre.c_str(), static_cast<long long>(tok.vocab_size()), tok.merges().size(),
              std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
              ids.size(), static_cast<double>(text.size()) / static_cast<double>(ids.size()));
  return 0;
}
