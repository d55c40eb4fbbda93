// The translation page: `window.hfBahdanau.translate(text, {numBeams})` for other pages and the form of index.html.
// Everything it loads lies beside it: the model in model/, transformers.js (the tokenizer) and ONNX Runtime Web in
// runtime/; nothing comes from the network.
import { AutoTokenizer, env } from "./runtime/transformers.min.js";
import { loadModel, searchIds } from "./search.js";

env.allowRemoteModels = false; // never the Hub: the files beside the page
env.allowLocalModels = true;
env.useBrowserCache = false; // the browser caches what the static server sends as it caches any file
env.localModelPath = new URL("./", import.meta.url).pathname; // a path: transformers.js fetches no URL as local
env.backends.onnx.wasm.wasmPaths = new URL("./runtime/", import.meta.url).href;

// Beside this file, wherever the page that imports it lies (another page can embed it).
const folder = new URL("model", import.meta.url).href;

async function load() {
  const page = await (await fetch(`${folder}/page.json`)).json();
  const [tokenizer, model] = await Promise.all([
    AutoTokenizer.from_pretrained("model"), // under env.localModelPath
    loadModel(folder, page.quantization),
  ]);
  return { page, tokenizer, model };
}

const loading = load();

// The translation of `text` (greedy unless numBeams > 1), as the package's Translator gives it.
async function translate(text, { numBeams = 1 } = {}) {
  const { tokenizer, model } = await loading;
  if (!text.trim()) return "";
  const ids = await searchIds(model, tokenizer.encode(text), numBeams);
  return tokenizer.decode(ids, { skip_special_tokens: true });
}

window.hfBahdanau = { ready: loading.then(({ page }) => page), translate };

// ---- the form of index.html (a page that embeds app.js without it uses window.hfBahdanau alone) ----
const $ = (id) => document.getElementById(id);
if ($("form")) wireForm();

function wireForm() {
  loading.then(({ page }) => {
    $("title").textContent = `Translate ${page.source_language} → ${page.target_language}`;
    $("about").textContent = `${page.name}: a ${page.model_type} model, ONNX ${page.quantization}, in this browser.`;
    $("source").placeholder = `text (${page.source_language})`;
    $("beams").value = String(page.num_beams);
    $("translate").disabled = false;
    $("message").textContent = "";
  }, (error) => { $("message").textContent = `⚠️ The model did not load: ${error.message}`; });

  $("form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("source").value;
    $("message").textContent = text.trim() ? "" : "⚠️ Nothing to translate: type a sentence first.";
    $("translate").disabled = true;
    const start = performance.now();
    try {
      $("translation").value = await translate(text, { numBeams: Number($("beams").value) });
      if (text.trim()) $("message").textContent = `${((performance.now() - start) / 1000).toFixed(2)} s`;
    } catch (error) {
      $("message").textContent = `⚠️ ${error.message}`;
    } finally {
      $("translate").disabled = false;
    }
  });
}
