// llama.cpp's speed on a GGUF model (node-llama-cpp, CPU), as JSON:
//   node tests/llama_js/bench.mjs MODEL.gguf [--threads T] [--prompt 128] [--tokens 128] [--runs 5] [--kv F16|F32]
// prompt processing: one batch of the first P - 1 prompt tokens (fixed pseudo-random ids) from an
// empty cache; generation: the last prompt token, then the greedy tokens, one decode each, N in all
// (sequence.evaluate, temperature 0, end-of-generation tokens included). Tokens per second are
// medians over the runs, after one warm-up run, two ways:
//   prompt_tokens_per_s, generation_tokens_per_s: wall clock around node-llama-cpp's calls, which
//     includes its JavaScript and thread hand-offs (about 0.5 ms a token on a 2-core machine);
//   llama_cpp_prompt_tokens_per_s, llama_cpp_generation_tokens_per_s: llama.cpp's own timers
//     (llama_perf_context: the decodes alone, as llama-cli and llama-bench report them).
// --kv: the key-value cache's type (default F16, llama.cpp's own default).
import { readFileSync } from 'node:fs';
import { fail, loadModel, createSequence, writeAllStdout } from './llama.mjs';

const args = process.argv.slice(2);
const opt = { threads: 0, prompt: 128, tokens: 128, runs: 5, kv: 'F16' };
const positional = [];
for (let i = 0; i < args.length; ++i) {
  const name = args[i].startsWith('--') ? args[i].slice(2) : null;
  if (name === null) positional.push(args[i]);
  else if (!(name in opt)) fail(`bench.mjs: unknown option ${args[i]} (--threads, --prompt, --tokens, --runs, --kv)`);
  else opt[name] = name === 'kv' ? args[++i] : Number(args[++i]);
}
if (positional.length !== 1) fail('usage: node bench.mjs MODEL.gguf [--threads T] [--prompt 128] [--tokens 128] [--runs 5] [--kv F16|F32]');
for (const k of ['threads', 'prompt', 'tokens', 'runs'])
  if (!Number.isInteger(opt[k]) || opt[k] < (k === 'threads' ? 0 : 1)) fail(`bench.mjs: --${k} must be an integer >= ${k === 'threads' ? 0 : 1}`);
if (!['F16', 'F32'].includes(opt.kv)) fail(`bench.mjs: --kv must be F16 or F32, not ${opt.kv}`);
// llama.cpp's own timings (llama_perf_context_print, at info level): the decodes of a batch of
// several tokens are its "prompt eval", those of one token its "eval".
const perf = { prompt: null, eval: null };
const logger = (level, message) => {
  const m = /(prompt eval|eval) time =\s*([0-9.]+) ms \/\s*([0-9]+)/.exec(message);
  if (m) perf[m[1] === 'eval' ? 'eval' : 'prompt'] = { ms: Number(m[2]), n: Number(m[3]) };
  else if (level === 'error' || level === 'warn') process.stderr.write(`llama.cpp ${level}: ${message}\n`);
};
let model;
try {
  model = await loadModel(positional[0], opt.threads, { logLevel: 'info', logger });
} catch (e) {
  fail(`bench.mjs: llama.cpp cannot load ${positional[0]}: ${e.message}`);
}
let nVocab = 0;
for (const _ of model.iterateAllTokens()) nVocab++;
const prompt = Array.from({ length: opt.prompt }, (_, i) => (i * 7919 + 13) % nVocab);
const contextSize = opt.prompt + opt.tokens + 1;
const { context, sequence } = await createSequence(model, { contextSize, threads: opt.threads, kvCache: opt.kv,
                                                           performanceTracking: true });
const seconds = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;
const pp = [], tg = [], ppOwn = [], tgOwn = [];
for (let run = 0; run <= opt.runs; ++run) {
  await sequence.clearHistory();
  let t0 = process.hrtime.bigint();
  await sequence.evaluateWithoutGeneratingNewTokens(prompt.slice(0, -1));
  const ppTime = seconds(t0);
  // The last prompt token's decode yields the first generated token: it counts as generation.
  t0 = process.hrtime.bigint();
  let n = 0;
  for await (const _ of sequence.evaluate(prompt.slice(-1), { temperature: 0, yieldEogToken: true })) {
    if (++n === opt.tokens) break;
  }
  const tgTime = seconds(t0);
  perf.prompt = perf.eval = null;
  await context.printTimings();  // and resets them
  if (!perf.prompt || !perf.eval || perf.prompt.n !== opt.prompt - 1 || perf.eval.n !== opt.tokens)
    fail(`bench.mjs: llama.cpp's timings were not read as expected: ${JSON.stringify(perf)}`);
  if (run > 0) {
    pp.push(ppTime); tg.push(tgTime);
    ppOwn.push(perf.prompt.ms / 1e3); tgOwn.push(perf.eval.ms / 1e3);
  }
}
const median = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const version = JSON.parse(readFileSync(new URL('./node_modules/node-llama-cpp/package.json', import.meta.url))).version;
writeAllStdout(JSON.stringify({
  model: positional[0], node_llama_cpp: version, llama_cpp: model.llama.llamaCppRelease.release,
  threads: context.currentThreads ?? opt.threads, kv_cache: opt.kv, prompt_tokens: opt.prompt,
  generated_tokens: opt.tokens, runs: opt.runs,
  prompt_tokens_per_s: (opt.prompt - 1) / median(pp), generation_tokens_per_s: opt.tokens / median(tg),
  llama_cpp_prompt_tokens_per_s: (opt.prompt - 1) / median(ppOwn),
  llama_cpp_generation_tokens_per_s: opt.tokens / median(tgOwn),
  prompt_s: pp, generation_s: tg, llama_cpp_prompt_s: ppOwn, llama_cpp_generation_s: tgOwn,
}) + '\n');
process.exit(0);
