"""The demo: the Gradio page in a real browser (Debian's chromium driven by Playwright), what the page
computes, and the Space that `publish --space` writes (never uploaded: `HfApi` patched)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from unittest.mock import patch

import huggingface_hub
import pytest
import torch
import yaml
from conftest import load_script
from helpers import MODEL_TYPES, tiny_translator
from huggingface_hub import HfApi, RepoUrl

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.attention_maps import attention_maps
from hf_bahdanau.decoding.glossary import term_used
from hf_bahdanau.decoding.sources import length_bound
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.models.pipelines import save_for_pipeline
from hf_bahdanau.serving import demo as demo_module

SENTENCE = "Zwei Hunde spielen im Schnee."
pytestmark = pytest.mark.filterwarnings(  # gradio's own use of pandas options that pandas 3 deprecates
    "ignore:'future.no_silent_downcasting' is deprecated", "ignore:The copy keyword is deprecated"
)


@pytest.fixture(scope="module", params=MODEL_TYPES)
def model(request, tokenizer):
    """A tiny random model of each type that searches 3 beams by default."""
    return tiny_translator(request.param, tokenizer, 3, source_language="de", target_language="en")


def test_sampling_gives_n_samples_each_within_its_sources_length_bound(model, tokenizer):
    translator = Translator(model, tokenizer)
    texts = ["Ein Junge.", "Eine Frau liest ein Buch im Park am Strand."]
    torch.manual_seed(0)
    found = translator.translate(texts, n_best=4, num_beams=1, do_sample=True)
    assert [len(translation.hypotheses) for translation in found] == [4, 4]
    assert all(hypothesis.score <= 0 for translation in found for hypothesis in translation.hypotheses)
    assert len({hypothesis.text for hypothesis in found[1].hypotheses}) > 1  # samples, not one translation 4 times
    eos = model.generation_config.eos_token_id
    for translation, row in zip(found, translator.source_ids(texts), strict=True):
        for hypothesis in translation.hypotheses:  # </s> by the bound of its own source
            assert hypothesis.ids[-1] == eos and len(hypothesis.ids) <= length_bound(len(row))


def test_attention_maps_of_a_given_translation_are_those_of_the_generated_one(model, tokenizer):
    translator = Translator(model, tokenizer)
    generated = translator.attention_maps(SENTENCE, num_beams=1, max_new_tokens=12)
    inputs = tokenizer(SENTENCE, return_tensors="pt")
    ids = model.generate(**inputs, num_beams=1, max_new_tokens=12, pad_token_id=tokenizer.pad_token_id)[0, 1:].tolist()
    given = attention_maps(model, tokenizer, SENTENCE, ids)
    assert given.translation == generated.translation and given.target_tokens == generated.target_tokens
    torch.testing.assert_close(given.cross, generated.cross)
    # each hypothesis of an n-best list carries its ids, which give the maps of that translation
    hypotheses = translator.translate([SENTENCE], n_best=3, num_beams=3)[0].hypotheses
    for hypothesis in hypotheses:
        assert hypothesis.ids[-1] == model.generation_config.eos_token_id or len(hypothesis.ids) >= 8
        maps = translator.attention_maps(SENTENCE, hypothesis)
        assert maps.translation == hypothesis.text and maps.cross.shape[2] == len(hypothesis.ids)


def run_translate_command(folder, capsys, *options: str) -> str:
    """What `hf-bahdanau translate` prints for SENTENCE."""
    capsys.readouterr()
    assert main(["translate", "--model", str(folder), *options, SENTENCE]) == 0
    return capsys.readouterr().out.rstrip("\n")


@pytest.mark.slow
def test_the_page_translates_as_the_translate_command_does(model, tokenizer, folder, capsys):
    translator = demo_module.load_demo_translator(str(folder))
    beam = demo_module.translate(translator, SENTENCE, "beam", 3)
    assert len(beam) == 3 and beam[0].text == run_translate_command(folder, capsys)
    n_best = run_translate_command(folder, capsys, "--n-best", "3").splitlines()  # INDEX SCORE TRANSLATION
    assert [(f"{hypothesis.score:.4f}", hypothesis.text) for hypothesis in beam] == [
        tuple(line.split("\t")[1:]) for line in n_best
    ]
    greedy = demo_module.translate(translator, SENTENCE, "greedy", 5)
    assert len(greedy) == 1 and greedy[0].text == run_translate_command(folder, capsys, "--num-beams", "1")
    torch.manual_seed(0)
    samples = demo_module.translate(translator, SENTENCE, "sampling", 4)
    assert len(samples) == 4 and [h.score for h in samples] == sorted((h.score for h in samples), reverse=True)
    image = demo_module.attention_image(translator.attention_maps(SENTENCE, beam[1]), SENTENCE)
    assert image.width > 100 and image.height > 100


@pytest.mark.slow
def test_the_pages_glossary_gives_what_translate_gives_with_the_same_terms(model, tokenizer, folder, capsys, tmp_path):
    translator = demo_module.load_demo_translator(str(folder))
    typed = "# terms\nHunde = hounds\n\nSchnee\tice\n"
    found = demo_module.translate(translator, SENTENCE, "beam", 3, typed)
    terms = tmp_path / "terms.tsv"
    terms.write_text("Hunde\thounds\nSchnee\tice\n", encoding="utf-8")
    assert found[0].text == run_translate_command(folder, capsys, "--glossary", str(terms))
    assert term_used("hounds", found[0].text) and term_used("ice", found[0].text)
    assert demo_module.glossary_of("  \n# nothing\n") is None
    with pytest.raises(ValueError, match="Glossary line 2: write it as 'source term = target term'"):
        demo_module.glossary_of("Hunde = hounds\nSchnee ice")
    with pytest.raises(ValueError, match="beam search"):
        demo_module.translate(translator, SENTENCE, "greedy", 3, typed)


def test_bad_input_gets_a_one_line_message(tokenizer):
    check = demo_module.check_text
    assert check("Ein Hund.", tokenizer, 64) is None
    assert check("   \n", tokenizer, 64) == "Nothing to translate: type a sentence first."
    assert check("a" * 1001, tokenizer, 10_000) == (
        "The text has 1,001 characters: the demo translates at most 1,000 at once."
    )
    tokens = len(tokenizer("Ein Mann fährt Fahrrad. " * 4)["input_ids"])
    assert check("Ein Mann fährt Fahrrad. " * 4, tokenizer, 8) == (
        f"The text is {tokens} tokens long: the model reads at most 8."
    )
    with pytest.raises(ValueError, match="decoding 'top-k': choose one of greedy, beam, sampling"):
        demo_module.decoding_options("top-k", 3)
    assert demo_module.decoding_options("greedy", 5) == ({"num_beams": 1, "do_sample": False}, 1)
    assert demo_module.decoding_options("sampling", 5) == ({"num_beams": 1, "do_sample": True}, 5)


def test_text_mostly_in_a_script_the_model_does_not_know_is_refused(model, tokenizer):
    # Chinese into a de-en model: 10 of its 11 tokens (</s> left out) are <unk>
    chinese = "你好世界，今天很好。"
    message = (
        "The text is mostly in letters the model does not know (10 of 11 tokens unknown): "
        f"{chinese!r} is not in the language it translates from."
    )
    assert demo_module.check_text(chinese, tokenizer, 64) == message
    with pytest.raises(ValueError) as refused:  # the page shows this message instead of a translation
        demo_module.translate(Translator(model, tokenizer), chinese, "greedy", 1)
    assert str(refused.value) == message
    assert demo_module.check_text("Zwei Hunde 你好", tokenizer, 64) is None  # 2 unknown of 8: a word or two is fine


@pytest.mark.slow  # builds the Gradio page
def test_the_demo_command_serves_on_127_0_0_1_and_says_what_is_wrong(folder, monkeypatch, caplog):
    launched = []
    monkeypatch.setattr(demo_module, "launch", lambda demo, **options: launched.append((demo, options)))
    assert main(["demo", "--model", str(folder), "--port", "7999"]) == 0
    ((demo, options),) = launched
    assert options == {"port": 7999, "share": False} and demo.analytics_enabled is False
    assert main(["demo", "--model", str(folder / "missing")]) == 1
    assert "is not a saved model folder" in caplog.text
    with pytest.raises(SystemExit):
        main(["demo", "--model", str(folder), "--share", "maybe"])
    monkeypatch.setitem(sys.modules, "gradio", None)  # not installed
    assert main(["demo", "--model", str(folder)]) == 1
    assert "the demo needs Gradio: pip install 'hf_bahdanau[demo]'" in caplog.text


# ---- in a browser -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transformer_folder(tokenizer, tmp_path_factory):
    model = tiny_translator("d2l_transformer", tokenizer, 3, source_language="de", target_language="en")
    return save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("tiny") / "transformer")


@pytest.mark.slow
def test_a_browser_translates_on_the_page_and_sees_the_attention(transformer_folder, tmp_path, capsys, monkeypatch):
    browser = load_script("demo_screenshot")
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("playwright is not installed (pip install -e '.[demo]'): the browser test cannot run")
    if not Path(browser.CHROMIUM).is_file():
        pytest.skip(f"no chromium at {browser.CHROMIUM} (apt-get install chromium): the browser test cannot run")
    expected = run_translate_command(transformer_folder, capsys)
    outside, refused = [], []  # what the browser, and this process (the server), asked for beyond 127.0.0.1
    connect = socket.socket.connect

    def local_only(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            refused.append(address)
            raise ConnectionRefusedError(f"the test refuses {address}")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)
    start = time.perf_counter()
    with browser.served(str(transformer_folder)) as url, browser.page_of(url, outside) as page:
        shown = browser.translate_on_page(page, SENTENCE)
        page.screenshot(path=tmp_path / "demo.png", full_page=True)
        if os.environ.get("HF_BAHDANAU_DEMO_SCREENSHOT"):
            page.screenshot(path=os.environ["HF_BAHDANAU_DEMO_SCREENSHOT"], full_page=True)
        layer_and_head = [page.locator(f"#{name}").is_visible() for name in ("layer", "head")]
        redrawn = [browser.choose(page, "head", "2"), browser.choose(page, "layer", "1")]  # a head, a layer
        empty = browser.translate_on_page(page, "")
    print(f"browser test: {time.perf_counter() - start:.1f} s")
    assert shown["translation"] == expected and shown["message"] == ""
    assert [row[0] for row in shown["rows"]] == ["1", "2", "3"] and shown["rows"][0][2] == expected
    assert all(float(row[1]) <= 0 for row in shown["rows"])
    assert min(shown["image_size"]) > 100  # the attention figure, drawn
    assert layer_and_head == [True, True]  # a Transformer: its layer and head can be chosen, each redraws
    assert len(set(redrawn)) == 2 and all("/gradio_api/file=" in src for src in redrawn)
    assert empty["translation"] == "" and empty["message"] == "⚠️ Nothing to translate: type a sentence first."
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    assert outside == [] and refused == []  # nothing but the demo's own server was asked for anything


# ---- a Space ----------------------------------------------------------------------------------------------

MODEL_REPO, SPACE = "someone/tiny-de-en", "someone/tiny-de-en-demo"


def test_publish_space_dry_run_shows_the_files_and_uploads_nothing(capsys, monkeypatch):
    monkeypatch.setattr(HfApi, "create_repo", lambda *args, **kwargs: pytest.fail("a dry run reached the Hub"))
    assert main(["publish", "--repo-id", MODEL_REPO, "--space", SPACE, "--dry-run"]) == 0
    out = capsys.readouterr().out
    app = out.split("==> app.py <==\n")[1].split("\n==> ")[0]
    assert f"build_demo({MODEL_REPO!r})" in app and "from hf_bahdanau.serving.demo import" in app
    compile(app, "app.py", "exec")
    readme = out.split("==> README.md <==\n")[1]
    header = yaml.safe_load(readme.split("---\n")[1])
    assert header["sdk"] == "gradio" and header["app_file"] == "app.py" and header["models"] == [MODEL_REPO]
    assert header["sdk_version"] == importlib.metadata.version("gradio")
    requirements = out.split("==> requirements.txt <==\n")[1].split("\n\n")[0].splitlines()
    assert {line.split(">")[0].split("<")[0] for line in requirements} >= {"torch", "transformers", "matplotlib"}
    assert f"dry run: would upload to the Space {SPACE}:" in out and "files of the package (hf_bahdanau/*.py)" in out
    assert main(["publish", "--repo-id", MODEL_REPO]) == 1  # neither --model nor --space


def test_the_space_is_written_by_publishing_and_demo_is_the_page_only():
    from hf_bahdanau.publishing.space import space_texts

    texts = space_texts(SPACE, MODEL_REPO, license="mit")
    assert sorted(texts) == ["README.md", "app.py", "requirements.txt"] and "license: mit" in texts["README.md"]
    assert "from hf_bahdanau.serving.demo import build_demo, launch" in texts["app.py"]  # the Space serves demo's page
    source = Path(demo_module.__file__).read_text()
    assert "upload_files" not in source and "from hf_bahdanau.publishing" not in source  # neither writes nor uploads
    assert not {"publish_space", "space_texts", "write_space", "Space"} & set(vars(demo_module))


@pytest.mark.slow
def test_publish_space_uploads_a_space_whose_app_loads_the_model_by_repo_id(
    transformer_folder, tmp_path, monkeypatch, capsys
):
    folder = transformer_folder
    uploaded = tmp_path / "space"

    def upload_folder(**kwargs):
        shutil.copytree(kwargs["folder_path"], uploaded)
        assert sorted(kwargs["allow_patterns"]) == sorted(
            path.relative_to(uploaded).as_posix() for path in uploaded.rglob("*") if path.is_file()
        )
        upload_folder.kwargs = kwargs

    monkeypatch.setenv("HF_TOKEN", "hf_TestTokenThatMustNeverLeak0123456789")
    with (
        patch.object(HfApi, "create_repo", return_value=RepoUrl(f"https://huggingface.co/spaces/{SPACE}")) as create,
        patch.object(HfApi, "upload_folder", side_effect=upload_folder),
    ):
        assert main(["publish", "--repo-id", MODEL_REPO, "--space", SPACE]) == 0
    create.assert_called_once_with(SPACE, private=False, exist_ok=True, repo_type="space", space_sdk="gradio")
    assert upload_folder.kwargs["repo_type"] == "space" and capsys.readouterr().out.strip().endswith(SPACE)
    assert {"app.py", "README.md", "requirements.txt"} <= {path.name for path in uploaded.iterdir()}
    assert (uploaded / "hf_bahdanau" / "serving" / "demo.py").read_text() == Path(demo_module.__file__).read_text()
    # the Space finds its own copy of the package first (found, not imported: importing it loads torch) ...
    command = [sys.executable, "-c", "import importlib.util; print(importlib.util.find_spec('hf_bahdanau').origin)"]
    env = {**os.environ, "PYTHONPATH": ""}
    found = subprocess.run(command, cwd=uploaded, capture_output=True, text=True, env=env, check=True)
    assert Path(found.stdout.strip()).resolve() == (uploaded / "hf_bahdanau" / "__init__.py").resolve()
    # ... and its app.py builds the page of the model downloaded by repo id (here: the Hub cache is `folder`)
    asked = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kwargs: asked.append(repo) or folder)
    namespace = {"__name__": "space_app"}
    exec(compile((uploaded / "app.py").read_text(), "app.py", "exec"), namespace)
    assert asked == [MODEL_REPO] and type(namespace["demo"]).__name__ == "Blocks"


@pytest.mark.slow  # a Gradio server
def test_the_demo_start_up_hint_names_the_commands_option_not_gradios(capsys, caplog):
    import gradio as gr

    with gr.Blocks() as page:
        gr.Markdown("a page")
    caplog.set_level(logging.INFO)
    demo_module.launch(page, block=False)
    try:
        printed = capsys.readouterr()
        assert "share=True" not in printed.out + printed.err + caplog.text
        assert "(a public link: --share true)" in caplog.text and "http://127.0.0.1:" in caplog.text
    finally:
        page.close()


def test_the_screenshot_script_never_replaces_a_file_unasked(tmp_path, monkeypatch, capsys):
    screenshot = load_script("demo_screenshot")
    existing = tmp_path / "demo.png"
    existing.write_bytes(b"tracked")
    monkeypatch.setattr(sys, "argv", ["demo_screenshot.py", "--model", "m"])
    with pytest.raises(SystemExit):  # no default: the tracked docs/images/demo.png is never the silent target
        screenshot.main()
    monkeypatch.setattr(sys, "argv", ["demo_screenshot.py", "--model", "m", "--output", str(existing)])
    with pytest.raises(SystemExit):
        screenshot.main()
    assert "exists: pass --overwrite to replace it" in capsys.readouterr().err
    assert existing.read_bytes() == b"tracked"
