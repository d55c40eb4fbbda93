// The model of the page: the encoder and decoder of an ONNX export (described by onnx/decoding.json) run by
// ONNX Runtime Web, and the page's own greedy and beam search over them, as the package's Translator searches:
// a translation has at most max(8, 3 * source tokens) tokens, </s> included (the last is </s>), and no more than the
// position table; beam search is generate()'s (hf_bahdanau/decoding/beams.py), one source at a time.
import * as ort from "./runtime/ort.wasm.bundle.min.mjs";

// the page's own copy of the WASM, never a CDN's (the bundle holds its JavaScript glue)
ort.env.wasm.wasmPaths = { wasm: new URL("./runtime/ort-wasm-simd-threaded.wasm", import.meta.url).href };
ort.env.wasm.numThreads = 1; // one WASM thread: a static server sends no cross-origin isolation headers

const int64 = (rows) => new ort.Tensor("int64", BigInt64Array.from(rows.flat(), BigInt), [rows.length, rows[0].length]);

// The rows `rows` of `tensor` (batch first): (len(rows), ...).
function takeRows(tensor, rows) {
  const size = tensor.size / tensor.dims[0];
  const data = new tensor.data.constructor(rows.length * size);
  rows.forEach((row, i) => data.set(tensor.data.subarray(row * size, (row + 1) * size), i * size));
  return new ort.Tensor(tensor.type, data, [rows.length, ...tensor.dims.slice(1)]);
}

// Each row's log-probabilities over the vocabulary at the last position of `logits` (rows, positions, vocab).
function logSoftmaxRows(logits) {
  const [rows, positions, vocab] = logits.dims;
  return Array.from({ length: rows }, (_, row) => {
    const start = (row * positions + positions - 1) * vocab;
    const values = logits.data.subarray(start, start + vocab);
    let max = -Infinity;
    for (const value of values) max = Math.max(max, value);
    let sum = 0;
    for (const value of values) sum += Math.exp(value - max);
    const shift = max + Math.log(sum);
    return Float32Array.from(values, (value) => value - shift);
  });
}

export async function loadModel(folder, quantization) {
  const description = await (await fetch(`${folder}/onnx/decoding.json`)).json();
  const file = (graph) => `${folder}/onnx/${quantization === "int8" ? graph.int8_file : graph.file}`;
  const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
  const [encoder, decoder] = await Promise.all(
    [description.encoder, description.decoder].map((graph) => ort.InferenceSession.create(file(graph), options)),
  );
  return { description, encoder, decoder };
}

// The decoder's feeds at the first step, `beams` rows: what it reads of the encoder's outputs (those of one source,
// `fixed`) and its first state (`state`: an RNN's initial hidden state, a Transformer's empty past).
function firstFeeds(description, encoded, mask, beams) {
  const rows = new Array(beams).fill(0);
  const fixed = { encoder_attention_mask: takeRows(mask, rows) };
  const state = {};
  for (const [output, input] of Object.entries(description.from_encoder)) {
    (description.per_source.includes(input) ? fixed : state)[input] = takeRows(encoded[output], rows);
  }
  const shape = description.first_step?.empty_past_shape.map((size) => (size === "batch_size" ? beams : size));
  for (const name of description.decoder.inputs) {
    if (name.startsWith("past_key_values.")) state[name] = new ort.Tensor("float32", new Float32Array(0), shape);
  }
  return { fixed, state };
}

// The token ids of the translation of `sourceIds` (</s> included), by beam search over `numBeams` beams (1: greedy).
export async function searchIds(model, sourceIds, numBeams = 1) {
  const { description, encoder, decoder } = model;
  const eos = description.eos_token_id;
  const lengthPenalty = description.length_penalty ?? 1.0;
  const limit = Math.max(8, 3 * sourceIds.length); // the most new tokens, </s> included
  const bound = Math.min(limit, description.max_position_embeddings ?? Infinity); // the decoder's position table
  const mask = int64([sourceIds.map(() => 1)]);
  const encoded = await encoder.run({ input_ids: int64([sourceIds]), attention_mask: mask });
  let { fixed, state } = firstFeeds(description, encoded, mask, numBeams);
  let beams = Array.from({ length: numBeams }, (_, i) => ({ ids: [], score: i === 0 ? 0 : -Infinity }));
  const finished = []; // {ids, score}: ended hypotheses, their scores divided by their length ** lengthPenalty
  for (let step = 1; step <= bound; step++) {
    const last = beams.map((beam) => [beam.ids.at(-1) ?? description.decoder_start_token_id]);
    const branch = description[step === 1 ? "first_step" : "later_steps"];
    const feeds = { ...fixed, ...state, input_ids: int64(last) };
    if (branch) feeds.use_cache_branch = new ort.Tensor("bool", [branch.use_cache_branch], [1]);
    const outputs = await decoder.run(feeds);
    const candidates = [];
    logSoftmaxRows(outputs.logits).forEach((logProbs, beam) => {
      if (beams[beam].score === -Infinity) return;
      if (step === limit) { // the last token a translation may have: </s>, forced (it adds nothing to the score)
        candidates.push({ beam, token: eos, score: beams[beam].score });
        return;
      }
      for (const token of topK(logProbs, numBeams === 1 ? 1 : 2 * numBeams)) { // greedy: the most likely token
        candidates.push({ beam, token, score: beams[beam].score + logProbs[token] });
      }
    });
    candidates.sort((a, b) => b.score - a.score);
    const next = [];
    for (const [rank, candidate] of candidates.entries()) {
      const ids = [...beams[candidate.beam].ids, candidate.token];
      if (candidate.token === eos || step === bound) { // at the table's end, every candidate ends as it is
        if (rank < numBeams) finished.push({ ids, score: candidate.score / ids.length ** lengthPenalty });
      } else if (next.length < numBeams) {
        next.push({ ids, score: candidate.score, beam: candidate.beam });
      }
    }
    finished.sort((a, b) => b.score - a.score).splice(numBeams);
    const settled = finished.length === numBeams &&
      (next.length === 0 || next[0].score / step ** lengthPenalty <= finished.at(-1).score);
    if (settled || step === bound || next.length === 0) break;
    const origins = next.map((candidate) => candidate.beam);
    state = {};
    for (const [output, input] of Object.entries(description.state)) {
      if (!description.per_source.includes(input)) state[input] = takeRows(outputs[output], origins);
      else if (step === 1) fixed[input] = outputs[output]; // the source's own (cross-attention keys): made once, kept
    }
    beams = next;
  }
  return finished[0]?.ids ?? beams[0].ids;
}

// The `k` indices of the largest `values`, largest first (the first of equal values first, as torch's argmax).
function topK(values, k) {
  const best = [];
  for (let index = 0; index < values.length; index++) {
    if (best.length === k && values[index] <= values[best[k - 1]]) continue;
    let at = best.length;
    while (at > 0 && values[index] > values[best[at - 1]]) at--;
    best.splice(at, 0, index);
    if (best.length > k) best.pop();
  }
  return best;
}
