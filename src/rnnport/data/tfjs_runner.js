// Runs TensorFlow.js layers models with @tensorflow/tfjs (pure JavaScript, CPU backend), for
// `rnnport convert --verify`, rnnport's tests and its golden-file generator
// (rnnport.formats.tfjs starts it with Node.js; nothing here is rnnport's own arithmetic).
//
// One job, as JSON on standard input:
//   {"runs": [{"model": "/abs/path/model.json",   // its weight shards lie beside it
//              "topology": {...} | null,          // replaces modelTopology when given
//              "strict": true,                    // every weight matched to a variable
//              "rename": {"stored name": "new name"} | null,  // when given, only the weights
//                                                 // it names are passed on, renamed
//              "shape": [batch, time, features],
//              "input": "<base64: float32 little-endian values>"}, ...]}
// One JSON line on standard output:
//   {"version": "4.22.0", "results": [{"shape": [...], "output": "<base64 float32>"} |
//                                     {"error": "<what TF.js said>"}, ...]}
// or {"missing": "<why>"} when @tensorflow/tfjs cannot be found (searched from the working
// folder upwards, then in each folder of NODE_PATH). A model's first output is returned.
//
// Shards are read as the weights manifest lists them, group after group, and concatenated:
// what TF.js's own file loaders hand to tf.loadLayersModel, here through tf.io.fromMemory.
// With "rename", the weights it does not name are cut out of those bytes (each weight takes
// its shape's count of its stored dtype: quantization.dtype where quantized), and the rest
// passed on, still encoded as stored, under their new names.
'use strict';

const fs = require('fs');
const path = require('path');

function findTfjs() {
  const searched = [process.cwd(),
                    ...(process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean)];
  try {
    return require(require.resolve('@tensorflow/tfjs', {paths: searched}));
  } catch (error) {
    return null;
  }
}

function artifacts(run) {
  const modelJson = JSON.parse(fs.readFileSync(run.model, 'utf8'));
  const folder = path.dirname(run.model);
  const weightSpecs = [];
  const buffers = [];
  for (const group of modelJson.weightsManifest || []) {
    for (const shard of group.paths) {
      buffers.push(fs.readFileSync(path.join(folder, shard)));
    }
    weightSpecs.push(...group.weights);
  }
  let joined = Buffer.concat(buffers);
  let specs = weightSpecs;
  if (run.rename) {
    [specs, joined] = renamed(weightSpecs, joined, run.rename);
  }
  return {
    modelTopology: run.topology || modelJson.modelTopology,
    weightSpecs: specs,
    weightData: joined.buffer.slice(joined.byteOffset, joined.byteOffset + joined.length),
    format: modelJson.format,
    generatedBy: modelJson.generatedBy,
    convertedBy: modelJson.convertedBy,
  };
}

const BYTES = {float32: 4, int32: 4, bool: 1, complex64: 8, uint8: 1, uint16: 2, float16: 2};

function renamed(weightSpecs, data, rename) {
  const specs = [];
  const parts = [];
  let offset = 0;
  for (const spec of weightSpecs) {
    const stored = spec.quantization ? spec.quantization.dtype : spec.dtype;
    if (!(stored in BYTES)) {
      throw new Error(`weight ${spec.name}: cannot size values of dtype ${stored}`);
    }
    const size = spec.shape.reduce((a, b) => a * b, 1) * BYTES[stored];
    const name = rename[spec.name];
    if (name) {
      specs.push(Object.assign({}, spec, {name}));
      parts.push(data.subarray(offset, offset + size));
    }
    offset += size;
  }
  return [specs, Buffer.concat(parts)];
}

async function runOne(tf, run) {
  const model = await tf.loadLayersModel(tf.io.fromMemory(artifacts(run)),
                                         {strict: run.strict !== false});
  const bytes = Buffer.from(run.input, 'base64');
  const values = new Float32Array(bytes.buffer.slice(bytes.byteOffset,
                                                     bytes.byteOffset + bytes.length));
  const x = tf.tensor(values, run.shape, 'float32');
  let y = model.predict(x);
  if (Array.isArray(y)) {
    y = y[0];
  }
  const data = await y.data();
  return {shape: y.shape, output: Buffer.from(data.buffer).toString('base64')};
}

async function main() {
  const tf = findTfjs();
  if (tf === null) {
    process.stdout.write(JSON.stringify({missing: 'Cannot find module @tensorflow/tfjs'}) + '\n');
    return;
  }
  const job = JSON.parse(fs.readFileSync(0, 'utf8'));
  await tf.setBackend('cpu');
  const results = [];
  for (const run of job.runs) {
    try {
      results.push(await runOne(tf, run));
    } catch (error) {
      results.push({error: String((error && error.message) || error)});
    }
  }
  process.stdout.write(JSON.stringify({version: tf.version.tfjs, results}) + '\n');
}

main().catch((error) => {
  process.stdout.write(JSON.stringify({error: String((error && error.message) || error)}) + '\n');
  process.exit(1);
});
