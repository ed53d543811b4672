// Greedy continuation of a prompt by llama.cpp (node-llama-cpp, CPU):
//   node tests/llama_js/generate.mjs MODEL.gguf "prompt" [--tokens N] [--threads T] [--no-bos]
// prints the prompt and the N generated tokens (default 64) as text, then a newline. The prompt gets the BOS token
// when the file asks for one (tokenizer.ggml.add_bos_token). Generation never stops early: an
// end-of-generation token counts as one of the N and prints as nothing. The output is the tokens'
// bytes as the file's vocabulary spells them (tokenizer.ggml.model "llama": <0xNN> byte tokens are
// that byte, U+2581 a space; "gpt2": GPT-2's byte-to-character table reversed; control tokens
// nothing), written as they are, valid UTF-8 or not; for other vocabularies, llama.cpp's
// detokenization.
import { fail, loadModel, createSequence, evaluatePrompt, greedyAfter, writeAllStdout } from './llama.mjs';

// GPT-2's table (bytes_to_unicode): printable bytes stand for themselves, the others for 256 + i.
function gpt2ByteDecoder() {
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const decoder = new Map();
  let extra = 0;
  for (let b = 0; b < 256; ++b) decoder.set(String.fromCodePoint(printable(b) ? b : 256 + extra++), b);
  return decoder;
}

function tokenBytes(model, ids) {
  const g = model.fileInfo.metadata.tokenizer?.ggml ?? {};
  const CONTROL = 3, BYTE = 6;
  if (!['llama', 'gpt2'].includes(g.model) || !g.tokens) return Buffer.from(model.detokenize(ids, false));
  const decoder = g.model === 'gpt2' ? gpt2ByteDecoder() : null;
  return Buffer.concat(ids.map((id) => {
    const type = g.token_type?.[id], text = g.tokens[id];
    if (type === CONTROL) return Buffer.alloc(0);
    if (g.model === 'llama') {
      const byte = /^<0x([0-9A-Fa-f]{2})>$/.exec(text);
      return type === BYTE && byte ? Buffer.from([parseInt(byte[1], 16)]) : Buffer.from(text.replaceAll('\u2581', ' '));
    }
    return Buffer.from([...text].map((c) => decoder.get(c) ?? 0x3f));
  }));
}

const args = process.argv.slice(2);
const positional = [];
let tokens = 64, threads = 0, bos = true;
for (let i = 0; i < args.length; ++i) {
  if (args[i] === '--tokens') tokens = Number(args[++i]);
  else if (args[i] === '--threads') threads = Number(args[++i]);
  else if (args[i] === '--no-bos') bos = false;
  else if (args[i].startsWith('--')) fail(`generate.mjs: unknown option ${args[i]} (--tokens N, --threads T, --no-bos)`);
  else positional.push(args[i]);
}
if (positional.length !== 2) fail('usage: node generate.mjs MODEL.gguf "prompt" [--tokens N] [--threads T] [--no-bos]');
if (!Number.isInteger(tokens) || tokens < 1) fail(`generate.mjs: --tokens must be a positive integer, not ${tokens}`);
const [modelPath, text] = positional;
let model;
try {
  model = await loadModel(modelPath, threads);
} catch (e) {
  fail(`generate.mjs: llama.cpp cannot load ${modelPath}: ${e.message}`);
}
const prompt = Array.from(model.tokenize(text, false));
if (bos && model.tokens.shouldPrependBosToken && model.tokens.bos !== null) prompt.unshift(model.tokens.bos);
if (prompt.length === 0) fail('generate.mjs: the prompt has no tokens (give some text, or a file that adds BOS)');
// tensorgrad's nn::CausalLM::generate, step for step: the window is the model's context C
// (llama.context_length); when a chosen token does not fit, the window starts again from the last C / 2
// tokens of the text, that token included; a prompt longer than C starts from its last C / 2 tokens.
const C = model.trainContextSize, half = Math.max(C >> 1, 1);
// One cell more than the window: node-llama-cpp keeps one free.
const { sequence } = await createSequence(model, { contextSize: C + 1, threads });
let position = 0;
async function feed(window) {
  await sequence.clearHistory();
  position = window.length;
  return (await evaluatePrompt(sequence, window)).next;
}
const all = [...prompt], out = [];
let next = await feed(prompt.length <= C ? prompt : prompt.slice(-half));
for (let i = 0; i < tokens; ++i) {
  out.push(next), all.push(next);
  if (i + 1 === tokens) break;
  if (position === C) {
    next = await feed(all.slice(-half));
  } else {
    next = (await greedyAfter(sequence, next, 2))[1];
    position += 1;
  }
}
// The prompt as given, then the continuation, as tensorgrad's main job prints its sample.
writeAllStdout(Buffer.concat([Buffer.from(text), tokenBytes(model, out), Buffer.from('\n')]));
process.exit(0);
