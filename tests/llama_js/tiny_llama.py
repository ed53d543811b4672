#!/usr/bin/python3
"""Tiny LLaMA GGUF files written by hand, and their logits in numpy: a check of
the llama.cpp harness (run.mjs) that does not depend on tensorgrad.

    /usr/bin/python3 tests/llama_js/tiny_llama.py write OUT.gguf [--tied] [--kv-heads 2] [--seed 1] ...
    /usr/bin/python3 tests/llama_js/tiny_llama.py logits FILE.gguf 1 2 3    # numpy logits as JSON
    /usr/bin/python3 tests/llama_js/tiny_llama.py check FILE.gguf 1 2 3     # llama.cpp against numpy
    /usr/bin/python3 tests/llama_js/tiny_llama.py fixtures                  # tests/fixtures/llama/*

read_gguf/forward read any F32 llama GGUF with one tensor per name (a file
tensorgrad writes at F32, for instance): `check` is an independent
numpy referee for llama.cpp on it.

`fixtures` writes the files tests/io/test_llama_js.cpp reads (GQA with a tied
output, multi-head with its own output, both with a SentencePiece byte
vocabulary; GQA untied with a GPT-2 byte-level one) and
tests/fixtures/llama_reference.h with their logits and greedy continuations. Only numpy (Debian's python3-numpy) is needed.

llama.cpp's conventions, as this file writes them (checked by the test):
- GGUF stores a tensor's dims as ggml's ne, fastest-varying first: a numpy
  array of shape (rows, cols) in C order is written with dims [cols, rows].
  Every matrix is (out, in) in numpy, as torch.nn.Linear's weight, and
  y = W @ x: token_embd (n_vocab, n_embd), attn_q (n_head*hd, n_embd), attn_k
  and attn_v (n_head_kv*hd, n_embd), attn_output (n_embd, n_head*hd),
  ffn_gate and ffn_up (n_ff, n_embd), ffn_down (n_embd, n_ff), output
  (n_vocab, n_embd); norms (n_embd,). ggml: ne = [n_embd, n_vocab] etc.
- Rotary embedding for architecture "llama" is GGML_ROPE_TYPE_NORM: features
  (2i, 2i+1) of each head form a pair rotated by pos * base^(-2i/hd)
  (Hugging Face's rotate_half pairs (i, i + hd/2); convert_hf_to_gguf.py
  permutes the rows of Q and K to go from one to the other).
- Query head h reads key-value head h // (n_head / n_head_kv).
- No output.weight: the output projection is token_embd (tied).
"""
import argparse
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

GGUF_STRING, GGUF_ARRAY = 8, 9
SCALAR = {int: (4, "<I"), float: (6, "<f"), bool: (7, "<?")}  # uint32, float32, bool
ALIGN = 32


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key, value):
    out = _str(key)
    if isinstance(value, str):
        return out + struct.pack("<I", GGUF_STRING) + _str(value)
    if isinstance(value, tuple):  # (gguf element type, list)
        etype, items = value
        out += struct.pack("<IIQ", GGUF_ARRAY, etype, len(items))
        fmt = {GGUF_STRING: None, 5: "<i", 6: "<f"}[etype]
        return out + b"".join(_str(x) if fmt is None else struct.pack(fmt, x) for x in items)
    t, fmt = SCALAR[type(value)]
    return out + struct.pack("<I", t) + struct.pack(fmt, value)


def write_gguf(path, kvs, tensors):
    """GGUF v3: header, key-values, tensor infos, data aligned to 32 bytes. tensors: {name: float32 ndarray}."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(_kv(k, v) for k, v in kvs.items())
    data, infos = b"", b""
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        infos += _str(name) + struct.pack("<I", a.ndim) + b"".join(struct.pack("<Q", d) for d in a.shape[::-1])
        infos += struct.pack("<IQ", 0, len(data))  # GGML_TYPE_F32, offset in the data section
        data += a.tobytes() + b"\0" * (-a.nbytes % ALIGN)
    blob = head + infos
    blob += b"\0" * (-len(blob) % ALIGN)
    Path(path).write_bytes(blob + data)


def read_gguf(path):
    """The key-values and F32 tensors of a file write_gguf wrote (numpy shapes: reversed ne)."""
    b = Path(path).read_bytes()
    pos = 4

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, b, pos)
        pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("<Q")
        pos += n
        return b[pos - n:pos].decode()

    def value(t):
        if t == GGUF_STRING:
            return string()
        if t == GGUF_ARRAY:
            et, n = take("<IQ")
            return [value(et) for _ in range(n)]
        return take({0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
                     12: "<d"}[t])

    _, n_tensors, n_kv = take("<IQQ")
    kvs = {}
    for _ in range(n_kv):
        k = string()
        kvs[k] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        ne = [take("<Q") for _ in range(take("<I"))]
        ttype, off = take("<IQ")
        assert ttype == 0, f"{name}: only F32 is read here"
        infos.append((name, ne, off))
    start = pos + (-pos % kvs.get("general.alignment", ALIGN))
    tensors = {name: np.frombuffer(b, np.float32, int(np.prod(ne)), start + off).reshape(ne[::-1])
               for name, ne, off in infos}
    return kvs, tensors


def gpt2_byte_chars():
    """GPT-2's bytes_to_unicode: the character that stands for each byte in byte-level BPE vocabularies."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    others = [b for b in range(256) if b not in printable]
    table = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}
    return [table[b] for b in range(256)]


def byte_vocab(kind):
    """A byte vocabulary's tokenizer.ggml.* keys and the id of each byte.

    "llama" (SentencePiece): <unk> <s> </s>, then the byte tokens <0xNN> (id NN + 3). llama.cpp
    replaces a space by U+2581 before looking it up: with no such token it falls back to its three
    UTF-8 bytes (and detokenizes them as U+2581, not a space).
    "gpt2" (byte-level BPE with no merges): byte b is id b (GPT-2's character for it), then
    <|endoftext|> (id 256) as BOS and EOS: any text is its bytes, both ways."""
    if kind == "llama":
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
        types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE (llama.cpp's llama_token_type)
        return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": (GGUF_STRING, tokens),
                "tokenizer.ggml.scores": (6, [0.0] * len(tokens)), "tokenizer.ggml.token_type": (5, types),
                "tokenizer.ggml.unknown_token_id": 0, "tokenizer.ggml.bos_token_id": 1,
                "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.add_bos_token": False,
                "tokenizer.ggml.add_space_prefix": False}, lambda b: b + 3
    if kind == "gpt2":
        tokens = gpt2_byte_chars() + ["<|endoftext|>"]
        return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default",
                "tokenizer.ggml.tokens": (GGUF_STRING, tokens), "tokenizer.ggml.token_type": (5, [1] * 256 + [3]),
                "tokenizer.ggml.merges": (GGUF_STRING, []), "tokenizer.ggml.bos_token_id": 256,
                "tokenizer.ggml.eos_token_id": 256, "tokenizer.ggml.add_bos_token": False}, lambda b: b
    raise ValueError(f"tokenizer {kind!r}: llama or gpt2")


def make_model(seed, n_embd=16, n_layer=2, n_head=4, n_head_kv=2, n_ff=32, tied=True, n_ctx=64, tokenizer="llama"):
    vocab, _ = byte_vocab(tokenizer)
    n_vocab, hd = len(vocab["tokenizer.ggml.tokens"][1]), n_embd // n_head
    rng = np.random.default_rng(seed)

    def w(*shape, scale=None):
        return rng.normal(0, scale or shape[-1] ** -0.5, shape).astype(np.float32)

    t = {"token_embd.weight": w(n_vocab, n_embd, scale=0.3 if tied else 1.0)}  # tied: less of an echo
    for i in range(n_layer):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = (1 + 0.1 * rng.normal(size=n_embd)).astype(np.float32)
        t[p + "attn_q.weight"] = w(n_head * hd, n_embd)
        t[p + "attn_k.weight"] = w(n_head_kv * hd, n_embd)
        t[p + "attn_v.weight"] = w(n_head_kv * hd, n_embd)
        t[p + "attn_output.weight"] = w(n_embd, n_head * hd)
        t[p + "ffn_norm.weight"] = (1 + 0.1 * rng.normal(size=n_embd)).astype(np.float32)
        t[p + "ffn_gate.weight"] = w(n_ff, n_embd)
        t[p + "ffn_up.weight"] = w(n_ff, n_embd)
        t[p + "ffn_down.weight"] = w(n_embd, n_ff)
    t["output_norm.weight"] = (1 + 0.1 * rng.normal(size=n_embd)).astype(np.float32)
    if not tied:
        t["output.weight"] = w(n_vocab, n_embd)
    kvs = {
        "general.architecture": "llama",
        "general.name": f"tiny-llama-seed{seed}",
        "llama.context_length": n_ctx,
        "llama.embedding_length": n_embd,
        "llama.block_count": n_layer,
        "llama.feed_forward_length": n_ff,
        "llama.attention.head_count": n_head,
        "llama.attention.head_count_kv": n_head_kv,
        "llama.rope.dimension_count": hd,
        "llama.rope.freq_base": 10000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.vocab_size": n_vocab,
    } | vocab
    return kvs, t


def rms_norm(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_norm(x, base):
    """GGML_ROPE_TYPE_NORM on x (T, heads, hd): pairs (2i, 2i+1) rotated by pos * base^(-2i/hd)."""
    T, _, hd = x.shape
    theta = np.arange(T)[:, None] * base ** (-np.arange(0, hd, 2) / hd)  # (T, hd/2)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def forward(kvs, t, ids):
    """Logits (T, n_vocab) in float64 of the prompt ids, every position (causal)."""
    f = {k.split(".", 1)[1]: v for k, v in kvs.items() if k.startswith("llama.")}
    n_head, n_kv, eps, base = f["attention.head_count"], f["attention.head_count_kv"], \
        f["attention.layer_norm_rms_epsilon"], f["rope.freq_base"]
    x = t["token_embd.weight"][np.asarray(ids)].astype(np.float64)
    T, E = x.shape
    hd = E // n_head
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(f["block_count"]):
        g = lambda n: t[f"blk.{i}.{n}.weight"].astype(np.float64)  # noqa: E731
        h = rms_norm(x, g("attn_norm"), eps)
        q = rope_norm((h @ g("attn_q").T).reshape(T, n_head, hd), base)
        k = rope_norm((h @ g("attn_k").T).reshape(T, n_kv, hd), base)
        v = (h @ g("attn_v").T).reshape(T, n_kv, hd)
        kv_of = np.arange(n_head) // (n_head // n_kv)
        att = np.einsum("qhd,khd->hqk", q, k[:, kv_of]) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", att, v[:, kv_of]).reshape(T, n_head * hd)
        x = x + o @ g("attn_output").T
        h = rms_norm(x, g("ffn_norm"), eps)
        gate = h @ g("ffn_gate").T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ g("ffn_up").T)) @ g("ffn_down").T
    out = t.get("output.weight", t["token_embd.weight"]).astype(np.float64)
    return rms_norm(x, t["output_norm.weight"].astype(np.float64), eps) @ out.T


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def greedy(kvs, t, ids, n):
    ids = list(ids)
    for _ in range(n):
        ids.append(int(forward(kvs, t, ids)[-1].argmax()))
    return ids[-n:]


# The fixtures: (name, seed, tied, n_head_kv, tokenizer). The prompt is PROMPT_TEXT's bytes as byte tokens.
CASES = [("gqa_tied", 1, True, 2, "llama"),
         ("mha_untied", 15, False, 4, "llama"),  # seed 15: its greedy tokens pass eos (id 2) twice
         ("gqa_untied_gpt2", 4, False, 2, "gpt2")]
PROMPT_TEXT = "Hi, ll\u00e4ma!"
TEXT = "Hi,  ll\u00e4ma!\n\t\u2581 \U0001F999 x"  # tokenized: ASCII, UTF-8 of 2, 3 and 4 bytes, whitespace runs
GREEDY = 16


def cxx_floats(a):
    vals = [f"{float(v):.9g}f" for v in np.asarray(a, np.float32).ravel()]
    return "\n".join("    " + ", ".join(vals[i:i + 8]) + "," for i in range(0, len(vals), 8))


def cxx_string(text):
    """A C++ string literal's body for text's UTF-8 bytes (octal escapes: they end after three digits)."""
    return "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:03o}" for b in text.encode())


def fixtures(root):
    out_dir = root / "tests" / "fixtures" / "llama"
    out_dir.mkdir(parents=True, exist_ok=True)
    ints = lambda v: ", ".join(map(str, v))  # noqa: E731
    h = ["// GENERATED FILE - do not edit by hand.",
         "// Regenerate from the repository root with: /usr/bin/python3 tests/llama_js/tiny_llama.py fixtures",
         f"// (numpy {np.__version__}.) Tiny LLaMA GGUFs in tests/fixtures/llama/ and their float64 numpy",
         "// forward (tests/llama_js/tiny_llama.py): the logits at every prompt position (row-major,",
         "// prompt position by vocabulary) and the greedy continuation; and llama.cpp's tokens for a text.",
         "#pragma once", "", "#include <cstdint>", "", "namespace tensorgrad_fixtures::llama {", "",
         f"inline constexpr const char* prompt_text = \"{cxx_string(PROMPT_TEXT)}\";  // UTF-8; the prompt is its bytes",
         f"inline constexpr const char* text = \"{cxx_string(TEXT)}\";  // UTF-8",
         f"inline constexpr int64_t n_prompt = {len(PROMPT_TEXT.encode())}, n_greedy = {GREEDY};", ""]
    for name, seed, tied, n_kv, kind in CASES:
        kvs, t = make_model(seed, tied=tied, n_head_kv=n_kv, tokenizer=kind)
        write_gguf(out_dir / f"{name}.gguf", kvs, t)
        kvs, t = read_gguf(out_dir / f"{name}.gguf")  # what the file holds, float32
        _, byte_id = byte_vocab(kind)
        prompt = [byte_id(b) for b in PROMPT_TEXT.encode()]
        # llama.cpp's SentencePiece writes a space as U+2581 before falling back to bytes.
        text_tokens = [byte_id(b) for b in (TEXT.replace(" ", "\u2581") if kind == "llama" else TEXT).encode()]
        z = forward(kvs, t, prompt)
        g = greedy(kvs, t, prompt, GREEDY)
        h += [f"// ---- '{name}': seed {seed}, tied output {tied}, heads 4, key-value heads {n_kv}, tokenizer {kind}",
              f"inline constexpr const char* {name}_file = \"tests/fixtures/llama/{name}.gguf\";",
              f"inline constexpr int64_t {name}_n_vocab = {z.shape[1]};",
              f"inline constexpr int32_t {name}_bos = {kvs['tokenizer.ggml.bos_token_id']}, "
              f"{name}_eos = {kvs['tokenizer.ggml.eos_token_id']};",
              f"inline constexpr int32_t {name}_prompt[{len(prompt)}] = {{{ints(prompt)}}};",
              f"inline constexpr int32_t {name}_text_tokens[{len(text_tokens)}] = {{{ints(text_tokens)}}};",
              f"inline constexpr float {name}_logits[{z.size}] = {{", cxx_floats(z), "};",
              f"inline constexpr int32_t {name}_greedy[{GREEDY}] = {{{ints(g)}}};", ""]
    h += ["}  // namespace tensorgrad_fixtures::llama", ""]
    (root / "tests" / "fixtures" / "llama_reference.h").write_text("\n".join(h))


def check(path, ids, n_greedy):
    """Runs run.mjs (llama.cpp) on an F32 llama GGUF and compares with this file's forward."""
    here = Path(__file__).resolve().parent
    request = json.dumps({"prompt_tokens": ids, "logits": True, "greedy": n_greedy})
    r = subprocess.run(["node", str(here / "run.mjs"), str(path), "-"], input=request, capture_output=True,
                       text=True, check=False)
    if r.returncode:
        sys.exit(f"run.mjs failed:\n{r.stderr}")
    got = json.loads(r.stdout)
    kvs, t = read_gguf(path)
    want = log_softmax(forward(kvs, t, ids))
    have = np.array([[np.nan if v is None else v for v in row] for row in got["log_probs"]], dtype=float)
    # run.mjs's log-probabilities come from float32 probabilities: below e^-80 they are subnormal or
    # zero (null), so only their being that small is compared.
    big = want > -80
    err = np.where(big, np.abs(have - want) / (1 + np.abs(want)), 0.0)
    if np.any(~big & (have > -80)):
        err[~big & (have > -80)] = np.inf
    g = greedy(kvs, t, ids, n_greedy)
    print(json.dumps({"max_error": float(err.max()), "greedy_equal": got["greedy"] == g,
                      "llama_cpp_greedy": got["greedy"], "numpy_greedy": g}))
    return err.max() <= 1e-4 and got["greedy"] == g


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write a tiny random LLaMA GGUF (F32)")
    w.add_argument("out")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--tied", action="store_true", help="no output.weight: the output is token_embd")
    w.add_argument("--embd", type=int, default=16)
    w.add_argument("--layers", type=int, default=2)
    w.add_argument("--heads", type=int, default=4)
    w.add_argument("--kv-heads", type=int, default=2)
    w.add_argument("--ff", type=int, default=32)
    w.add_argument("--tokenizer", choices=["llama", "gpt2"], default="llama", help="byte vocabulary kind")
    lg = sub.add_parser("logits", help="numpy logits and log-softmax of an F32 llama GGUF, as JSON")
    lg.add_argument("file")
    lg.add_argument("ids", type=int, nargs="+")
    ck = sub.add_parser("check", help="llama.cpp (run.mjs) against numpy on an F32 llama GGUF; exit 1 if apart")
    ck.add_argument("file")
    ck.add_argument("ids", type=int, nargs="+")
    ck.add_argument("--greedy", type=int, default=8)
    sub.add_parser("fixtures", help="write tests/fixtures/llama/*.gguf and tests/fixtures/llama_reference.h")
    a = ap.parse_args()
    if a.cmd == "write":
        kvs, t = make_model(a.seed, n_embd=a.embd, n_layer=a.layers, n_head=a.heads, n_head_kv=a.kv_heads,
                            n_ff=a.ff, tied=a.tied, tokenizer=a.tokenizer)
        write_gguf(a.out, kvs, t)
    elif a.cmd == "logits":
        kvs, t = read_gguf(a.file)
        z = forward(kvs, t, a.ids)
        json.dump({"logits": z.tolist(), "log_probs": log_softmax(z).tolist()}, sys.stdout)
    elif a.cmd == "check":
        sys.exit(0 if check(a.file, a.ids, a.greedy) else 1)
    else:
        fixtures(Path(__file__).resolve().parents[2])


if __name__ == "__main__":
    main()
