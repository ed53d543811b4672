// The main job's ONNX export run by ONNX Runtime on the Fashion-MNIST test
// images: prints its test accuracy, which should be the one the main job
// printed (README, "Deploying with ONNX Runtime").
//   node tests/onnx_js/fashion_accuracy.mjs fashion.onnx [/usr/share/datasets/fashion-mnist]
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import * as ort from 'onnxruntime-node';

const [model, dir = '/usr/share/datasets/fashion-mnist'] = process.argv.slice(2);
const images = gunzipSync(readFileSync(`${dir}/t10k-images-idx3-ubyte.gz`)).subarray(16);
const labels = gunzipSync(readFileSync(`${dir}/t10k-labels-idx1-ubyte.gz`)).subarray(8);
const session = await ort.InferenceSession.create(model);
const input = session.inputNames[0];
const n = labels.length, batch = 1000;
// The MLP takes {rows, 784}, the CNNs {rows, 28, 28, 1} (NHWC): the file refuses the other.
const flat = await session
  .run({ [input]: new ort.Tensor('float32', new Float32Array(784), [1, 784]) })
  .then(() => true, () => false);
let correct = 0;
for (let start = 0; start < n; start += batch) {
  const rows = Math.min(batch, n - start);
  const x = new Float32Array(rows * 784);
  for (let i = 0; i < x.length; ++i) x[i] = images[start * 784 + i] / 255;
  const out = await session.run({ [input]: new ort.Tensor('float32', x, flat ? [rows, 784] : [rows, 28, 28, 1]) });
  const p = out[session.outputNames[0]].data;
  for (let r = 0; r < rows; ++r) {
    let best = 0;
    for (let c = 1; c < 10; ++c) if (p[r * 10 + c] > p[r * 10 + best]) best = c;
    correct += best === labels[start + r];
  }
}
console.log(`ONNX Runtime ${ort.env.versions.common}: test accuracy ${(100 * correct / n).toFixed(2)}% on ${n} images`);
