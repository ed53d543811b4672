// Runs a GGUF model with llama.cpp (node-llama-cpp, CPU) and prints JSON, for
// the C++ tests (tests/support/llama_js.h):
//   node tests/llama_js/run.mjs MODEL.gguf [REQUEST.json]     (no file or "-": the request on stdin)
// Request (every field optional):
//   {"tokenize": ["text", ...],       texts to tokenize (llama.cpp's llama_tokenize: no BOS added, special
//    "special": false,                 token texts parsed as text unless this is true)
//    "prompt_tokens": [ids],           the prompt evaluated from position 0
//    "logits": true | "last",          log-probabilities at every prompt position, or at the last only
//    "greedy": N,                      N greedy tokens after the prompt (end-of-generation tokens included)
//    "threads": T, "context": C,       CPU threads (0: all) and context size (default and least: prompt + N)
//    "kv_cache": "F32"}                the key-value cache's type ("F32" default; llama.cpp's own is "F16")
// Output:
//   {"vocab": {"n_vocab", "bos", "eos", "add_bos"}, "tokens": [[ids], ...],
//    "log_probs": [[n_vocab numbers], ...]  one row per prompt position asked (all, or the last):
//                                           row i is log softmax of llama.cpp's logits after token i, i.e.
//                                           logits - logsumexp(logits), null where the probability is 0.
//                                           They come from float32 probabilities: below about -80 they
//                                           are subnormal (imprecise) or null; compare only above -80.
//                                           node-llama-cpp gives probabilities, not raw logits: compare
//                                           these with log_softmax of the logits being checked.
//    "greedy": [N ids]}
// Errors: a message on stderr and exit status 1.
import { readFileSync } from 'node:fs';
import { fail, loadModel, createSequence, evaluatePrompt, greedyAfter, writeAllStdout } from './llama.mjs';

const [modelPath, requestPath] = process.argv.slice(2);
if (!modelPath) fail('usage: node run.mjs MODEL.gguf [REQUEST.json | -]');
let request;
try {
  request = JSON.parse(readFileSync(requestPath && requestPath !== '-' ? requestPath : 0, 'utf8'));
} catch (e) {
  fail(`run.mjs: cannot read the request ${requestPath ?? '(stdin)'}: ${e.message}`);
}
const known = ['tokenize', 'special', 'prompt_tokens', 'logits', 'greedy', 'threads', 'context', 'kv_cache'];
for (const k of Object.keys(request))
  if (!known.includes(k)) fail(`run.mjs: unknown request field "${k}" (known: ${known.join(', ')})`);

let model;
try {
  model = await loadModel(modelPath, request.threads ?? 0);
} catch (e) {
  fail(`run.mjs: llama.cpp cannot load ${modelPath}: ${e.message}`);
}
const result = {};
const vocabSize = (() => { let n = 0; for (const _ of model.iterateAllTokens()) n++; return n; })();
result.vocab = { n_vocab: vocabSize, bos: model.tokens.bos, eos: model.tokens.eos,
                 add_bos: model.tokens.shouldPrependBosToken };
if (request.tokenize) result.tokens = request.tokenize.map((text) => Array.from(model.tokenize(text, !!request.special)));

const prompt = request.prompt_tokens ?? [];
const n = request.greedy ?? 0;
if ((request.logits || n > 0) && prompt.length === 0) fail('run.mjs: "logits" and "greedy" need "prompt_tokens"');
for (const t of prompt)
  if (!Number.isInteger(t) || t < 0 || t >= vocabSize) fail(`run.mjs: prompt token ${t} is not in [0, ${vocabSize})`);
if (prompt.length > 0) {
  // Evaluated: the prompt and all but the last greedy token; node-llama-cpp keeps one cell free.
  const needed = prompt.length + Math.max(n - 1, 0) + 1;
  const contextSize = request.context ?? needed;
  if (needed > contextSize)
    fail(`run.mjs: prompt ${prompt.length} + greedy ${n} tokens need a context of at least ${needed}, not ${contextSize}`);
  const { sequence } = await createSequence(model, { contextSize, threads: request.threads ?? 0,
                                                     kvCache: request.kv_cache ?? 'F32' });
  const at = new Set();
  if (request.logits === 'last') at.add(prompt.length - 1);
  else if (request.logits) prompt.forEach((_, i) => at.add(i));
  const { probabilities, next } = await evaluatePrompt(sequence, prompt, at);
  if (request.logits) {
    result.log_probs = probabilities.map((map) => {
      const row = new Array(vocabSize).fill(null);
      for (const [id, p] of map) row[id] = p > 0 ? Math.log(p) : null;
      return row;
    });
  }
  if (n > 0) result.greedy = await greedyAfter(sequence, next, n);
}
writeAllStdout(JSON.stringify(result));  // synchronous: exit() below would cut an asynchronous pipe write at 64 KiB
process.exit(0);
