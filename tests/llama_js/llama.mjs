// Shared by run.mjs, generate.mjs and bench.mjs: llama.cpp (node-llama-cpp's
// prebuilt CPU libraries, tests/llama_js/package-lock.json) loaded without
// GPU, build or download, its logs on stderr so that stdout holds only JSON.
import { writeSync } from 'node:fs';
import { getLlama } from 'node-llama-cpp';

/// Prints `message` on stderr and exits with status 1.
export function fail(message) {
  process.stderr.write(`${message}\n`);
  process.exit(1);
}

const toStderr = (level, message) => process.stderr.write(`llama.cpp ${level}: ${message}\n`);

/// The model at `path`, with llama.cpp on the CPU. threads: 0 = all cores. llama.cpp's messages of
/// `logLevel` and above go to `logger` (default: stderr).
export async function loadModel(path, threads = 0, { logLevel = 'error', logger = toStderr } = {}) {
  const llama = await getLlama({
    gpu: false, build: 'never', skipDownload: true, progressLogs: false, maxThreads: threads, logLevel, logger,
  });
  return llama.loadModel({ modelPath: path, gpuLayers: 0 });
}

/// A one-sequence context. kvCache: ggml type of the key-value cache ("F32" or "F16"; llama.cpp's default is F16).
export async function createSequence(model, { contextSize, threads = 0, kvCache = 'F32', batchSize, performanceTracking = false } = {}) {
  const context = await model.createContext({
    contextSize, threads, sequences: 1, batchSize: batchSize ?? contextSize, flashAttention: false, performanceTracking,
    experimentalKvCacheKeyType: kvCache, experimentalKvCacheValueType: kvCache,
  });
  // A full context makes node-llama-cpp drop tokens from its start (a context shift), which would
  // silently change every later logit: refuse instead. It keeps one cell free, so contextSize - 1
  // tokens fit.
  const refuse = () => { throw new Error(`the context of ${contextSize} tokens is full (node-llama-cpp keeps one cell free)`); };
  return { context, sequence: context.getSequence({ contextShift: { strategy: refuse } }) };
}

export const GREEDY = { temperature: 0 };

/// Evaluates `prompt` (token ids) from the sequence's start. Returns, for each position asked in
/// `logitsAt` (a Set of indexes), llama.cpp's probabilities of the next token (Map id -> p), and
/// the greedy next token after the last position.
export async function evaluatePrompt(sequence, prompt, logitsAt = new Set()) {
  const items = prompt.map((t, i) => {
    const last = i === prompt.length - 1;
    if (!last && !logitsAt.has(i)) return t;
    return [t, { generateNext: { probabilities: logitsAt.has(i), token: last, options: GREEDY } }];
  });
  const out = await sequence.controlledEvaluate(items);
  return { probabilities: [...logitsAt].map((i) => out[i].next.probabilities), next: out[prompt.length - 1].next.token };
}

/// n greedy tokens after `prompt` (which ends in the token whose successor is `first`): llama.cpp's
/// greedy sampler picks each, end-of-generation tokens included (the count is always n).
export async function greedyAfter(sequence, first, n) {
  const out = [];
  let next = first;
  while (out.length < n) {
    out.push(next);
    if (out.length === n) break;
    const r = await sequence.controlledEvaluate([[next, { generateNext: { token: true, options: GREEDY } }]]);
    next = r[0].next.token;
  }
  return out;
}

/// Writes all of `data` (a string or Buffer) to stdout before returning: the
/// scripts exit right after, and node's stdout pipe is non-blocking, so an
/// asynchronous write (or one writeSync) can stop at the pipe's 64 KiB.
export function writeAllStdout(data) {
  const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data);
  let done = 0;
  while (done < bytes.length) {
    try {
      done += writeSync(1, bytes, done, bytes.length - done);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}
