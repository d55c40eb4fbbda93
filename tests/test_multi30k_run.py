"""One tiny de-en run on Multi30k found by its name, as a new user makes it: hypotheses files named by test file and
decoding, a saved model's type deciding which options apply, and the model card's test file and example sentence.
In-process through `main([...])` (~15 s)."""

import ast
import gzip
import json
import re

import pytest

from hf_bahdanau.cli import main
from hf_bahdanau.publishing.card import make_card

pytestmark = pytest.mark.slow  # every test reads the run that the module trains
LINES = {"train": 300, "val": 16, "test_2016_flickr": 16}  # of each Multi30k file, de and en


@pytest.fixture(scope="module")
def run(tmp_path_factory, multi30k_dir):
    """A tiny RNN trained de->en on a 300-pair copy of Multi30k found by its name, `multi30k` (beams 2)."""
    data = tmp_path_factory.mktemp("data")
    (data / "multi30k").mkdir()
    for stem, count in LINES.items():
        for lang in ("de", "en"):
            with gzip.open(multi30k_dir / f"{stem}.{lang}.gz", "rt", encoding="utf-8") as file:
                lines = [next(file) for _ in range(count)]
            (data / "multi30k" / f"{stem}.{lang}").write_text("".join(lines), encoding="utf-8")
    folder = tmp_path_factory.mktemp("run") / "model"
    argv = ["train", "--data", "multi30k", "--src-lang", "de", "--tgt-lang", "en", "--output-dir", str(folder),
            "--vocab_size", "300", "--embedding_size", "16", "--hidden_size", "16", "--per_device_train_batch_size",
            "32", "--max_steps", "4", "--logging_steps", "2", "--eval_steps", "4", "--save_steps", "4",
            "--max_eval_samples", "8", "--generation_num_beams", "2", "--generation_max_length", "8"]  # fmt: skip
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_BAHDANAU_DATA_DIR", str(data))
        assert main(argv) == 0
    return folder


def test_evaluate_names_the_hypotheses_by_test_file_and_decoding(run, capsys):
    evaluate = ["evaluate", "--model", str(run), "--max-samples", "4", "--max-new-tokens", "8"]
    assert main(evaluate) == 0  # the model's decoding: beam search, 2 beams
    beam = run / "hypotheses.test_2016_flickr.de-en.beam2.txt"
    assert f"hypotheses in {beam}" in capsys.readouterr().out
    written = beam.read_bytes()
    assert main([*evaluate, "--num-beams", "1"]) == 0
    greedy = run / "hypotheses.test_2016_flickr.de-en.greedy.txt"
    assert f"hypotheses in {greedy}" in capsys.readouterr().out
    assert beam.read_bytes() == written and len(greedy.read_text(encoding="utf-8").splitlines()) == 4  # both kept
    results = json.loads((run / "eval_results.json").read_text(encoding="utf-8"))["results"]
    assert {(result["split"], result["num_beams"]) for result in results} >= {("test_2016_flickr", 2),
                                                                              ("test_2016_flickr", 1)}  # fmt: skip


def test_a_saved_models_type_decides_which_options_apply(run, tmp_path, caplog):
    output = tmp_path / "further"
    argv = ["train", "--data", str(tmp_path / "no-corpus"), "--src-lang", "de", "--tgt-lang", "en", "--output-dir",
            str(output), "--model_name_or_path", str(run), "--model_type", "transformer",
            "--d_model", "32"]  # fmt: skip
    assert main(argv) == 1
    refused = "--d_model is an option of transformer models, not of the saved bahdanau model: leave it out"
    assert caplog.records[-1].getMessage() == refused
    assert not output.exists() and not list(tmp_path.rglob("*.lock"))


def test_the_card_names_the_test_file_and_writes_the_example_in_its_own_letters(run):
    assert main(["evaluate", "--model", str(run), "--max-samples", "2", "--max-new-tokens", "8"]) == 0
    text = make_card(run, "someone/tiny-de-en").text
    assert "- **Data:** multi30k (test split: `test_2016_flickr`)" in text
    assert re.search(r"^\| multi30k \| test_2016_flickr \| 2 \| 2 \|", text, re.MULTILINE), text
    assert 'sentences = ["Ein Mann fährt mit dem Fahrrad die Straße entlang."]' in text
    assert "\\u00" not in text
    snippet = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    ast.parse(snippet)  # the usage snippet is Python as written
