// Reads a GGUF file with Hugging Face's reader (@huggingface/gguf, pinned in
// package.json) and prints what that reader sees as one JSON object on stdout:
//
//   {
//     "reader": "@huggingface/gguf 0.4.6",
//     "version": 3, "tensor_count": "5", "kv_count": "9",
//     "tensor_data_offset": "1024",
//     "metadata": [ { "key": ..., "type": <GGUFValueType id>, "sub_type": <id or null>,
//                     "value": ... }, ... ],            // file order
//     "tensors": [ { "name": ..., "shape": ["784", "500"],   // ne order, as the reader reports it
//                    "dtype": <GGMLQuantizationType id>, "dtype_name": "F32",
//                    "offset": "0",                      // relative to tensor_data_offset
//                    "head": [ ... ] }, ... ]            // first elements, decoded here (below)
//   }
//
// 64-bit integers (the reader's BigInts) are printed as decimal strings, so
// nothing is rounded through a double. `head` holds up to the first 8
// elements of F32, I32 and I64 tensors (the reader does not decode tensor
// data; they are read here with DataView at tensor_data_offset + offset,
// little-endian) and the raw 16-bit patterns of F16 and BF16 ones.
//
// Usage: node check.mjs FILE.gguf     (exit status 1 and a message on stderr
// when the reader refuses the file). Used by tests/io/test_gguf_third_party.cpp.
import { readFileSync, openSync, readSync, closeSync } from "node:fs";
import { gguf, GGMLQuantizationType } from "@huggingface/gguf";

const path = process.argv[2];
if (!path) {
  console.error("usage: node check.mjs FILE.gguf");
  process.exit(2);
}

const pkg = JSON.parse(readFileSync(new URL("./node_modules/@huggingface/gguf/package.json", import.meta.url)));

// BigInt -> decimal string, recursively (arrays of u64/i64 included).
function plain(value) {
  if (typeof value === "bigint") return value.toString();
  if (Array.isArray(value)) return value.map(plain);
  return value;
}

const HEAD = 8;
function readHead(fd, start, dtype, count) {
  const sizes = {
    [GGMLQuantizationType.F32]: 4, [GGMLQuantizationType.I32]: 4, [GGMLQuantizationType.I64]: 8,
    [GGMLQuantizationType.F16]: 2, [GGMLQuantizationType.BF16]: 2,
  };
  const size = sizes[dtype];
  if (size === undefined) return null;
  const n = Math.min(HEAD, count);
  const buffer = Buffer.alloc(n * size);
  const got = readSync(fd, buffer, 0, buffer.length, start);
  if (got !== buffer.length) throw new Error(`short read at ${start}: ${got} of ${buffer.length} bytes`);
  const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.length);
  const out = [];
  for (let i = 0; i < n; i++) {
    switch (dtype) {
      case GGMLQuantizationType.F32: out.push(view.getFloat32(i * 4, true)); break;
      case GGMLQuantizationType.I32: out.push(view.getInt32(i * 4, true)); break;
      case GGMLQuantizationType.I64: out.push(view.getBigInt64(i * 8, true).toString()); break;
      default: out.push(view.getUint16(i * 2, true)); break;  // F16, BF16: raw bits
    }
  }
  return out;
}

try {
  const { typedMetadata, tensorInfos, tensorDataOffset } = await gguf(path, {
    allowLocalFile: true,
    typedMetadata: true,
  });
  const header = new Set(["version", "tensor_count", "kv_count"]);
  const metadata = [];
  for (const [key, entry] of Object.entries(typedMetadata)) {
    if (header.has(key)) continue;
    metadata.push({ key, type: entry.type, sub_type: entry.subType ?? null, value: plain(entry.value) });
  }
  const fd = openSync(path, "r");
  const tensors = tensorInfos.map((t) => {
    const count = t.shape.reduce((a, b) => a * Number(b), 1);
    return {
      name: t.name,
      shape: t.shape.map((d) => d.toString()),
      dtype: t.dtype,
      dtype_name: GGMLQuantizationType[t.dtype] ?? null,
      offset: t.offset.toString(),
      head: readHead(fd, Number(tensorDataOffset + t.offset), t.dtype, count),
    };
  });
  closeSync(fd);
  process.stdout.write(JSON.stringify({
    reader: `${pkg.name} ${pkg.version}`,
    version: typedMetadata.version.value,
    tensor_count: plain(typedMetadata.tensor_count.value),
    kv_count: plain(typedMetadata.kv_count.value),
    tensor_data_offset: tensorDataOffset.toString(),
    metadata,
    tensors,
  }) + "\n");
} catch (err) {
  console.error(`check.mjs: @huggingface/gguf could not read ${path}: ${err?.stack ?? err}`);
  process.exit(1);
}
