"""`export --format web`: the static translation page of tiny models of both families (and both norms of the
Transformer) in headless Chromium (Debian's, driven by Playwright, as tests/test_demo.py drives the demo), served by a
static file server and nothing else; and the export's guards."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from conftest import load_script
from helpers import tiny_translator

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.errors import InputError
from hf_bahdanau.models.pipelines import save_for_pipeline

WEB = load_script("benchmark_web")  # the static file server and the page's translate, as the benchmark runs them
SENTENCES = ["Zwei Hunde spielen im Schnee.", "Ein Mann fährt Fahrrad.", "Eine Frau liest ein Buch im Park.", "Kinder"]
VARIANTS = {  # name -> (model type, config settings)
    "RNN": ("bahdanau", {}),
    "post-norm Transformer": ("d2l_transformer", {"norm_first": False}),
    "pre-norm Transformer": ("d2l_transformer", {"norm_first": True}),
}


def requirements() -> str | None:
    """Why the browser test cannot run here, or None."""
    from hf_bahdanau.decoding.export.web import runtime_folder

    browser = load_script("demo_screenshot")
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[demo]')"
    if not Path(browser.CHROMIUM).is_file():
        return f"no chromium at {browser.CHROMIUM} (apt-get install chromium)"
    if importlib.util.find_spec("onnx") is None or importlib.util.find_spec("onnxruntime") is None:
        return "onnx and onnxruntime are not installed (pip install -e '.[onnx]')"
    try:
        runtime_folder()
    except InputError as error:
        return str(error)
    return None


@pytest.fixture(scope="module", params=list(VARIANTS))
def model_folder(request, tokenizer, tmp_path_factory):
    """A tiny random model of the variant, saved."""
    why = requirements()
    if why:
        pytest.skip(f"the browser test cannot run: {why}")
    model_type, settings = VARIANTS[request.param]
    model = tiny_translator(model_type, tokenizer, 3, source_language="de", target_language="en", **settings)
    return save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("web") / "model")


def onnxruntime_translations(folder: Path) -> dict[int, list[str]]:
    """The onnxruntime engine's translations of SENTENCES by the float32 ONNX export of `folder`, greedy and with 3
    beams."""
    from hf_bahdanau.decoding.export.onnx import export_onnx

    translator = Translator.from_folder(export_onnx(folder, folder.with_name("onnx")), engine="onnxruntime")
    return {beams: [found.text for found in translator.translate(SENTENCES, num_beams=beams)] for beams in (1, 3)}


def browser_run(page_folder: Path, texts: list[str], num_beams: int = 1) -> tuple[list[str], list[str]]:
    """`window.hfBahdanau.translate` of each text in the page of `page_folder`, served by a static file server, and
    every request of the page that went elsewhere."""
    browser = load_script("demo_screenshot")
    outside = []
    with WEB.served(page_folder) as (url, _), browser.page_of(url, outside) as page:
        return WEB.translate_in_page(page, texts, num_beams), outside


@pytest.mark.slow
def test_the_page_translates_as_the_onnxruntime_engine_with_nothing_from_the_network(model_folder):
    from hf_bahdanau.decoding.export.web import export_web

    expected = onnxruntime_translations(model_folder)
    page_folder = export_web(model_folder, model_folder.with_name("page"), "float32")  # int8: kernels differ
    browser = load_script("demo_screenshot")
    outside = []
    with WEB.served(page_folder) as (url, _), browser.page_of(url, outside) as page:
        greedy = WEB.translate_in_page(page, SENTENCES)
        beams = WEB.translate_in_page(page, SENTENCES, num_beams=3)
        page.locator("#source").fill(SENTENCES[0])
        page.locator("#beams").select_option("1")  # the form searches the model's 3 beams by default
        page.locator("#translate").click()
        page.wait_for_function("() => document.querySelector('#translation').value")
        shown = page.locator("#translation").input_value()
        blank = WEB.translate_in_page(page, ["  "])
    assert greedy == expected[1]
    assert beams == expected[3]
    assert shown == expected[1][0]
    assert blank == [""]
    assert outside == []  # every file came from the folder


@pytest.mark.slow
def test_the_int8_page_carries_only_the_int8_graphs_and_searches_beams(model_folder):
    from hf_bahdanau.decoding.export.web import export_web

    page_folder = export_web(model_folder, model_folder.with_name("page-int8"))  # int8 by default
    graphs = sorted(path.name for path in (page_folder / "model" / "onnx").glob("*.onnx"))
    assert graphs and all(name.endswith("_quantized.onnx") for name in graphs)
    greedy, outside = browser_run(page_folder, SENTENCES[:2])
    beams, _ = browser_run(page_folder, SENTENCES[:2], num_beams=3)
    assert all(greedy) and all(beams) and outside == []
    # another page, elsewhere on the server, embeds app.js without the form and gets the same translations
    embedding = page_folder.parent / "embedding.html"
    embedding.write_text(f'<!doctype html><script type="module" src="{page_folder.name}/app.js"></script>')
    browser, errors = load_script("demo_screenshot"), []
    with WEB.served(page_folder.parent) as (url, _), browser.page_of(url, outside) as page:
        page.on("pageerror", lambda error: errors.append(error))
        page.goto(f"{url}{embedding.name}")
        assert WEB.translate_in_page(page, SENTENCES[:2]) == greedy
    assert errors == [] and outside == []


# transformers.js's own model class on the page's model; its `max_new_tokens`: the page's bound less the forced </s>
TRANSFORMERS_JS = """async (text) => {
    await window.hfBahdanau.ready;
    const transformers = await import("./runtime/transformers.min.js");
    const tokenizer = await transformers.AutoTokenizer.from_pretrained("model");
    const model = await transformers.AutoModelForSeq2SeqLM.from_pretrained("model", {dtype: "fp32", device: "wasm"});
    const ids = tokenizer.encode(text);
    const row = (values) => new transformers.Tensor("int64", BigInt64Array.from(values, BigInt), [1, values.length]);
    const found = await model.generate({input_ids: row(ids), attention_mask: row(ids.map(() => 1)),
                                        max_new_tokens: Math.max(8, 3 * ids.length) - 1, num_beams: 1,
                                        do_sample: false});
    const classes = ["MarianMTModel", "BlenderbotForConditionalGeneration"].filter(
        (name) => model instanceof transformers[name]);
    return [classes, tokenizer.decode(found.tolist()[0], {skip_special_tokens: true}),
            await window.hfBahdanau.translate(text)];
}"""


@pytest.mark.slow
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_transformers_js_reads_a_transformers_page_model_and_translates_as_the_page(tokenizer, tmp_path, norm_first):
    from hf_bahdanau.decoding.export.web import export_web, runtime_folder

    why = requirements()
    if why:
        pytest.skip(f"the browser test cannot run: {why}")
    model = tiny_translator("d2l_transformer", tokenizer, 3, norm_first=norm_first)
    page_folder = export_web(save_for_pipeline(model, tokenizer, tmp_path / "model"), tmp_path / "page", "float32")
    for name in ("ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.wasm"):  # the WASM its
        shutil.copy2(runtime_folder() / "onnxruntime-web" / "dist" / name, page_folder / "runtime" / name)  # ORT asks
    browser = load_script("demo_screenshot")
    with WEB.served(page_folder) as (url, _), browser.page_of(url, []) as page:
        page.wait_for_function("() => window.hfBahdanau")
        found = [page.evaluate(TRANSFORMERS_JS, text) for text in SENTENCES[:2]]
    architecture = "BlenderbotForConditionalGeneration" if norm_first else "MarianMTModel"
    assert [classes for classes, _, _ in found] == [[architecture]] * 2
    assert [theirs for _, theirs, _ in found] == [ours for _, _, ours in found]


def test_a_web_export_says_what_to_install_when_the_runtime_is_missing(tmp_path, caplog, monkeypatch):
    from hf_bahdanau.decoding.export.web import INSTALL_STEP, RUNTIME_ENV

    monkeypatch.setenv(RUNTIME_ENV, str(tmp_path / "node_modules"))
    argv = ["export", "--format", "web", "--model", str(tmp_path / "model"), "--output", str(tmp_path / "page")]
    assert main(argv) == 1
    (message,) = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert INSTALL_STEP in message and "\n" not in message
    assert not (tmp_path / "page").exists()
