// The model of the page: the encoder and decoder of an ONNX export (described by onnx/decoding.json) run by
// ONNX Runtime Web, and the page's own greedy and beam search over them, as the package's Translator searches:
// a translation has at most max(8, 3 * source tokens) tokens, </s> included (the last is </s>), and no more than the
// position table; greedy takes each step's argmax of the logits, beam search is generate()'s
// (hf_bahdanau/decoding/beams.py), one source at a time. The encoder runs once a source; the decoder runs once a
// token on its cache (a Transformer's keys and values of the past, an RNN's state).
import * as ort from "./runtime/ort.wasm.bundle.min.mjs";

// the page's own copy of the WASM, never a CDN's (the bundle holds its JavaScript glue)
ort.env.wasm.wasmPaths = { wasm: new URL("./runtime/ort-wasm-simd-threaded.wasm", import.meta.url).href };
ort.env.wasm.numThreads = 1; // one WASM thread: a static server sends no cross-origin isolation headers
ort.env.wasm.proxy = false; // the page's thread runs the WASM: a worker would copy every step's tensors across

const SESSION_OPTIONS = {
  executionProviders: ["wasm"],
  graphOptimizationLevel: "all",
  executionMode: "sequential",
};

const int64 = (rows) => new ort.Tensor("int64", BigInt64Array.from(rows.flat(), BigInt), [rows.length, rows[0].length]);
const flags = { true: new ort.Tensor("bool", [true], [1]), false: new ort.Tensor("bool", [false], [1]) };

// The rows `rows` of `tensor` (batch first): (len(rows), ...); `tensor` itself where that is all of it, in order.
function takeRows(tensor, rows) {
  if (rows.length === tensor.dims[0] && rows.every((row, i) => row === i)) return tensor;
  const size = tensor.size / tensor.dims[0];
  const data = new tensor.data.constructor(rows.length * size);
  rows.forEach((row, i) => data.set(tensor.data.subarray(row * size, (row + 1) * size), i * size));
  return new ort.Tensor(tensor.type, data, [rows.length, ...tensor.dims.slice(1)]);
}

// The logits of row `row` at the last position of `logits` (rows, positions, vocab): a view, no copy.
function lastLogits(logits, row) {
  const [, positions, vocab] = logits.dims;
  const start = (row * positions + positions - 1) * vocab;
  return logits.data.subarray(start, start + vocab);
}

// The log-probabilities of `values` (a row of logits), in float32 as torch's log_softmax gives them.
function logSoftmax(values) {
  let max = -Infinity;
  for (let i = 0; i < values.length; i++) if (values[i] > max) max = values[i];
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += Math.exp(values[i] - max);
  const shift = max + Math.log(sum);
  const found = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) found[i] = values[i] - shift;
  return found;
}

// `work()`, its time on the page's performance timeline as "hfBahdanau <name>"
// (`performance.getEntriesByType("measure")`).
export async function measured(name, work) {
  const start = performance.now();
  const result = await work();
  performance.measure(`hfBahdanau ${name}`, { start, end: performance.now() });
  return result;
}

// The bytes of `url`.
const bytesOf = (url) => fetch(url).then((response) => {
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.arrayBuffer();
}).then((buffer) => new Uint8Array(buffer));

// The model of the ONNX export in `folder` (a URL ending in /) as page.json describes it: the paths of its `graphs`
// and of the tensors they share (`shared_weights`, fetched once for both). Both sessions start at once: the first
// starts the runtime (fetches and compiles its WASM), then both graphs are fetched together. `started()` is called
// once they have: the page's other work (the tokenizer) can run while the WASM downloads and compiles.
export async function loadModel(folder, { graphs, shared_weights: shared }, started = () => {}) {
  const description = fetch(new URL("onnx/decoding.json", folder)).then((response) => response.json());
  const options = { ...SESSION_OPTIONS };
  if (shared) options.externalData = [{ path: shared.split("/").pop(), data: await bytesOf(new URL(shared, folder)) }];
  const sessions = Promise.all(["encoder", "decoder"].map((part) =>
    measured(`${part} session`, () => ort.InferenceSession.create(new URL(graphs[part], folder).href, options))));
  started();
  const [encoder, decoder] = await sessions;
  return { description: await description, encoder, decoder };
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

// The decoder outputs a step needs: the logits and the state it feeds back; the source's own (cross-attention keys
// and values) only at the first step, after which they stay as they are.
function fetchesOf(description) {
  const later = Object.entries(description.state).filter(([, input]) => !description.per_source.includes(input));
  return {
    first: ["logits", ...Object.keys(description.state)],
    later: ["logits", ...later.map(([output]) => output)],
  };
}

// The token ids of the translation of `sourceIds` (</s> included), by beam search over `numBeams` beams (1: greedy).
export async function searchIds(model, sourceIds, numBeams = 1) {
  const { description, encoder, decoder } = model;
  const eos = description.eos_token_id;
  const lengthPenalty = description.length_penalty ?? 1.0;
  const limit = Math.max(8, 3 * sourceIds.length); // the most new tokens, </s> included
  const bound = Math.min(limit, description.max_position_embeddings ?? Infinity); // the decoder's position table
  const fetches = fetchesOf(description);
  const mask = int64([sourceIds.map(() => 1)]);
  const encoded = await encoder.run({ input_ids: int64([sourceIds]), attention_mask: mask });
  let { fixed, state } = firstFeeds(description, encoded, mask, numBeams);
  let beams = Array.from({ length: numBeams }, (_, i) => ({ ids: [], score: i === 0 ? 0 : -Infinity }));
  const finished = []; // {ids, score}: ended hypotheses, their scores divided by their length ** lengthPenalty
  for (let step = 1; step <= bound; step++) {
    const last = beams.map((beam) => [beam.ids.at(-1) ?? description.decoder_start_token_id]);
    const branch = description[step === 1 ? "first_step" : "later_steps"];
    const feeds = { ...fixed, ...state, input_ids: int64(last) };
    if (branch) feeds.use_cache_branch = flags[branch.use_cache_branch];
    const outputs = await decoder.run(feeds, step === 1 ? fetches.first : fetches.later);
    const candidates = [];
    beams.forEach(({ score }, beam) => {
      if (score === -Infinity) return;
      if (step === limit) { // the last token a translation may have: </s>, forced (it adds nothing to the score)
        candidates.push({ beam, token: eos, score });
        return;
      }
      const logits = lastLogits(outputs.logits, beam);
      if (numBeams === 1) { // greedy: the most likely token (its score ranks nothing)
        candidates.push({ beam, token: topK(logits, 1)[0], score });
        return;
      }
      const logProbs = logSoftmax(logits);
      for (const token of topK(logProbs, 2 * numBeams)) {
        candidates.push({ beam, token, score: score + logProbs[token] });
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
