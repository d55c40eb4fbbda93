// The translation page: `window.hfBahdanau.translate(text, {numBeams})` for other pages and the form of index.html.
// Everything it loads lies beside it: the model in model/, tokenizers.js (transformers.js's tokenizer) and ONNX Runtime
// Web in runtime/; nothing comes from the network. Loading fetches everything at once; the steps it takes are on the
// page's performance timeline (`performance.getEntriesByType("measure")`, names starting with "hfBahdanau").
import { Tokenizer } from "./runtime/tokenizers.min.mjs";
import { loadModel, measured, searchIds } from "./search.js";

// Beside this file, wherever the page that imports it lies (another page can embed it).
const folder = new URL("model/", import.meta.url);
const json = (name) => fetch(new URL(name, folder)).then((response) => response.json());

async function load() {
  const page = json("page.json");
  let started;
  const sessionsStarted = new Promise((resolve) => { started = resolve; });
  const model = page.then((settings) => loadModel(folder, settings, started));
  const tokenizer = measured("tokenizer", async () => {
    const [tokenizerJson, tokenizerConfig] = await Promise.all([json("tokenizer.json"), json("tokenizer_config.json")]);
    await Promise.race([sessionsStarted, model]); // made while the runtime's WASM downloads and compiles
    return new Tokenizer(tokenizerJson, tokenizerConfig);
  });
  const loaded = { page: await page, tokenizer: await tokenizer, model: await model };
  performance.mark("hfBahdanau ready");
  return loaded;
}

const loading = load();

// The translation of `text` (greedy unless numBeams > 1), as the package's Translator gives it.
async function translate(text, { numBeams = 1 } = {}) {
  const { tokenizer, model } = await loading;
  if (!text.trim()) return "";
  const ids = await searchIds(model, tokenizer.encode(text).ids, numBeams);
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
