// Runs an ONNX file with ONNX Runtime (onnxruntime-node) on the inputs of a
// JSON file ({name: {type: "float32" | "int32", dims: [...], data: [...]}})
// and prints every output as JSON ({name: {dims, data}}), for
// tests/io/test_onnx_export.cpp.
import { readFileSync } from 'node:fs';
import * as ort from 'onnxruntime-node';

const [model, inputsPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(inputsPath, 'utf8'));
const session = await ort.InferenceSession.create(model);
const feeds = {};
for (const [name, t] of Object.entries(spec)) {
  const data = t.type === 'int32' ? Int32Array.from(t.data) : Float32Array.from(t.data);
  feeds[name] = new ort.Tensor(t.type, data, t.dims);
}
const out = await session.run(feeds);
const result = {};
for (const name of session.outputNames) result[name] = { dims: out[name].dims, data: Array.from(out[name].data) };
process.stdout.write(JSON.stringify(result));
