"""CTranslate2 export of d2l's Transformer: the same tokens and scores as our generate(), the `--engine ctranslate2`
command line, the translator class, `export` and `publish --with-ctranslate2`."""

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from datasets import DatasetDict
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from hf_bahdanau import cli
from hf_bahdanau.cli import main
from hf_bahdanau.data import corpora as data
from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.decoding.engines.ctranslate2 import CTranslate2Translator
from hf_bahdanau.decoding.export import ctranslate2 as export
from hf_bahdanau.decoding.export.ctranslate2 import EXPORT_INFO, export_ctranslate2
from hf_bahdanau.decoding.loading import load_translation_model
from hf_bahdanau.models.pipelines import save_for_pipeline
from hf_bahdanau.registry import get_model_type

ctranslate2 = pytest.importorskip("ctranslate2")

# Four architectures the spec must express: post-/pre-norm, tied/untied, with/without biases and embedding scale.
CONFIGS = {
    "post-norm": dict(),
    "pre-norm, tied, biases, unscaled": dict(
        norm_first=True, tie_word_embeddings=True, attention_bias=True, scale_embedding=False
    ),
    "post-norm, all tied, biases, unscaled, gelu": dict(
        tie_word_embeddings=True,
        tie_encoder_decoder_embeddings=True,
        attention_bias=True,
        scale_embedding=False,
        activation_function="gelu",
    ),
    "pre-norm, spare vocabulary rows": dict(norm_first=True, extra_rows=3),
}
MAX_NEW = 30


@pytest.fixture(scope="module")
def corpus(tatoeba_tsv):
    """The first 400 pairs of each Tatoeba split: all that the tests read."""
    return data.load_parallel_corpus(str(tatoeba_tsv), "en", "fr", max_pairs=400)


@pytest.fixture(scope="module")
def sources(corpus) -> list[str]:
    return [pair["en"] for pair in corpus["test"]["translation"][:64]]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_tokenizer(DatasetDict(train=corpus["train"]), vocab_size=300)


def random_transformer(tokenizer, folder: Path, seed: int = 0, extra_rows: int = 0, **overrides):
    """A random 2+3-layer Transformer saved with `tokenizer`; every weight (norms and biases too) perturbed, so that
    a missed mapping shows. A short position table (40) checks the table's cap."""
    config_class, model_class = get_model_type("d2l_transformer")
    config = config_class(vocab_size=len(tokenizer) + extra_rows, d_model=32, ffn_dim=64, attention_heads=4,
                          encoder_layers=2, decoder_layers=3, dropout=0.0, init_std=0.5, max_position_embeddings=40,
                          **overrides)  # fmt: skip
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_tokens" not in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    save_for_pipeline(model, tokenizer, folder)
    return model


def ct2_ids(export_dir: Path, tokens: list[str]) -> list[int]:
    """Token strings of a CTranslate2 hypothesis as ids of the exported vocabulary."""
    vocabulary = json.loads((export_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
    index = {token: i for i, token in enumerate(vocabulary)}
    return [index[token] for token in tokens]


def generated_tokens(sequences: torch.Tensor, eos: int) -> list[list[int]]:
    """Each row of `generate()` output without the start token, up to and including the first `</s>`."""
    rows = []
    for row in sequences[:, 1:].tolist():
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows


@pytest.mark.slow  # a CTranslate2 export of each architecture, 64 sentences each
@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_gives_our_tokens_and_scores(name, tokenizer, sources, tmp_path):
    model = random_transformer(tokenizer, tmp_path / "model", **CONFIGS[name])
    exported = export_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    translator = CTranslate2Translator(exported)
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    out = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW, output_scores=True,
                         return_dict_in_generate=True)  # fmt: skip
    ours = generated_tokens(out.sequences, eos=2)
    log_probs = torch.stack(out.scores, 1).log_softmax(-1)  # (batch, steps, vocab)
    source_tokens = [translator.source_tokens(text) for text in sources]
    assert all(tokens[-1] == "</s>" for tokens in source_tokens)  # our tokenizer's, not added by CTranslate2
    results = translator.translator.translate_batch(source_tokens, beam_size=1, max_decoding_length=MAX_NEW,
                                                    return_scores=True)  # fmt: skip
    for i, (row, result) in enumerate(zip(ours, results, strict=True)):
        assert ct2_ids(exported, result.hypotheses[0]) == [t for t in row if t != 2], sources[i]
        # CTranslate2 scores a hypothesis by its mean token log-probability (length penalty 1), </s> included. Its
        # greedy search sums them its own way: up to 1.5e-4 apart over 30 tokens that stop at the length limit
        # (score_batch below, our weights' log-probabilities, agrees to 3e-6)
        mean = float(log_probs[i, torch.arange(len(row)), row].mean())
        assert result.scores[0] == pytest.approx(mean, abs=3e-4)
    assert len({tuple(row) for row in ours}) >= 3  # the sources matter: not one output for every input
    # Every token's log-probability, teacher-forced on our output: the whole distribution of every step
    targets = [tokenizer.convert_ids_to_tokens([t for t in row if t != 2]) for row in ours]
    for i, scored in enumerate(translator.translator.score_batch(source_tokens, targets)):
        row = ours[i]
        expected = log_probs[i, torch.arange(len(row)), row]
        assert torch.tensor(scored.log_probs[: len(row)]) == pytest.approx(expected, abs=1e-4)


@pytest.mark.slow  # a CTranslate2 export, 64 sentences in 5 beams
def test_beam_search_agrees_and_the_translator_answers_as_the_pipeline(tokenizer, sources, tmp_path):
    model = random_transformer(tokenizer, tmp_path / "model", seed=1, **CONFIGS["pre-norm, tied, biases, unscaled"])
    translator = CTranslate2Translator.from_model(tmp_path / "model")  # exported into the folder on first use
    assert (tmp_path / "model" / "ctranslate2-float32" / EXPORT_INFO).is_file()
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    generated = model.generate(**batch, num_beams=5, do_sample=False, max_new_tokens=MAX_NEW)
    ours = tokenizer.batch_decode(generated, skip_special_tokens=True)
    theirs = [row["translation_text"] for row in translator(sources, num_beams=5, max_new_tokens=MAX_NEW)]
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) >= 62  # beam search's ties and stops may differ

    assert translator("Go.", num_beams=1) == [
        {"translation_text": translator(["Go."], num_beams=1)[0]["translation_text"]}
    ]
    rows = translator(["Go.", "", "  "], num_beams=1)
    assert [set(row) for row in rows] == [{"translation_text"}] * 3 and rows[1:] == [{"translation_text": ""}] * 2
    nbest = translator(["Go.", ""], num_beams=3, num_return_sequences=2)
    assert [len(row) for row in nbest] == [2, 2] and nbest[1] == [{"translation_text": ""}] * 2
    with pytest.raises(ValueError, match="does not take do_sample"):
        translator("Go.", do_sample=True)


@pytest.fixture(scope="module")
def trained(trained_folder, tmp_path_factory) -> Path:
    """This module's copy of the session's tiny Transformer trained by `hf-bahdanau train` for 60 steps (conftest's
    `trained_folder`): the export cache and evaluations go into it."""
    return trained_folder("d2l_transformer", tmp_path_factory.mktemp("run") / "model")


@pytest.mark.slow
def test_translate_with_ctranslate2_prints_what_torch_prints(trained, corpus, tmp_path, capsys):
    texts = [pair["en"] for pair in corpus["test"]["translation"][:24]]
    for beams in ("1", "3"):
        printed = {}
        for engine in ("torch", "ctranslate2"):
            options = ["--num-beams", beams, "--max-new-tokens", "20", "--batch-size", "8", "--threads", "1"]
            assert main(["translate", "--model", str(trained), *texts, *options, "--engine", engine]) == 0
            printed[engine] = capsys.readouterr().out.splitlines()
        assert len(printed["torch"]) == 24 and len(set(printed["torch"])) > 3
        same = sum(a == b for a, b in zip(printed["torch"], printed["ctranslate2"], strict=True))
        # fp32: greedy the same lines; beam search the same but where its stopping rule differs (1 of 24 here)
        assert same == 24 if beams == "1" else same >= 22, (beams, printed)
    cache = trained / "ctranslate2-float32"
    stamp = (cache / "model.bin").stat().st_mtime_ns
    args = [*texts[:8], "--num-beams", "1", "--engine", "ctranslate2"]
    assert main(["translate", "--model", str(trained), *args]) == 0
    before = capsys.readouterr().out
    assert (cache / "model.bin").stat().st_mtime_ns == stamp  # the cached export is reused

    changed = tmp_path / "changed"  # the model with its cached export, then new weights: exported again
    shutil.copytree(trained, changed, ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = load_file(changed / "model.safetensors")
    save_file({name: value * 1.5 for name, value in weights.items()}, changed / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip
    after = {}
    for engine in ("torch", "ctranslate2"):
        args = [*texts[:8], "--num-beams", "1", "--engine", engine]
        assert main(["translate", "--model", str(changed), *args]) == 0
        after[engine] = capsys.readouterr().out
    # each sentence bounded by its own source's length on both engines (a loop runs to that bound)
    assert after["ctranslate2"] == after["torch"] != before


@pytest.mark.slow
def test_evaluate_with_ctranslate2_prints_the_same_scores(trained, tatoeba_tsv, tmp_path, capsys):
    common = ["evaluate", "--model", str(trained), "--data", str(tatoeba_tsv), "--max-samples", "40",
              "--num-beams", "1"]  # fmt: skip
    assert main([*common, "--output", str(tmp_path / "torch.txt")]) == 0
    torch_out = capsys.readouterr().out.splitlines()
    stored = (trained / "eval_results.json").read_bytes()
    assert main([*common, "--output", str(tmp_path / "ct2.txt"), "--engine", "ctranslate2"]) == 0
    ct2_out = capsys.readouterr().out.splitlines()
    assert ct2_out[:5] == torch_out[:5] and torch_out[0].startswith("BLEU = ")  # BLEU, BLEU lc, chrF, length, repeats
    assert (tmp_path / "ct2.txt").read_text() == (tmp_path / "torch.txt").read_text()
    assert (trained / "eval_results.json").read_bytes() == stored  # the card reports torch's own scores


@pytest.mark.slow
def test_export_command_int8_and_an_exported_folder(trained, tmp_path, capsys, caplog):
    fp32, int8 = tmp_path / "fp32", tmp_path / "int8"
    assert main(["export", "--model", str(trained), "--format", "ctranslate2", "--output", str(fp32)]) == 0
    assert main(["export", "--model", str(trained), "--output", str(int8), "--quantization", "int8"]) == 0
    assert capsys.readouterr().out.splitlines() == [str(fp32), str(int8)]
    assert {"model.bin", "config.json", "shared_vocabulary.json", "tokenizer.json", EXPORT_INFO} <= {
        path.name for path in int8.iterdir()
    }
    # 1-byte weights (0.55x here: the float position tables, 1024 x 32, weigh much in a model this small)
    assert (int8 / "model.bin").stat().st_size < 0.6 * (fp32 / "model.bin").stat().st_size
    texts = ["Go.", "I lost.", "He's calm.", "I'm home."]
    assert main(["translate", "--model", str(int8), *texts, "--engine", "ctranslate2"]) == 0
    assert main(["translate", "--model", str(fp32), *texts, "--engine", "ctranslate2", "--quantize", "int8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and all(lines)  # an int8 export; a float32 export computing in int8
    assert main(["export", "--model", str(trained), "--output", str(fp32)]) == 1  # not empty: no overwrite
    assert main(["export", "--model", str(trained), "--output", str(fp32), "--overwrite"]) == 0
    assert main(["export", "--model", str(trained), "--output", str(trained.parent), "--overwrite"]) == 1
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert "holds an earlier export" in errors[0] and "would replace the model folder" in errors[1]
    assert (trained / "model.safetensors").is_file()


@pytest.mark.slow
def test_the_card_snippet_translates_with_plain_ctranslate2(trained, tmp_path):
    """What the published card shows (ctranslate2 and transformers only) gives the translator's output."""
    folder = str(export_ctranslate2(trained, tmp_path / "ct2"))
    translator = ctranslate2.Translator(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = ["Go.", "He's calm."]
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(text).input_ids) for text in texts]
    results = translator.translate_batch(sources, beam_size=5)
    plain = [
        tokenizer.decode(tokenizer.convert_tokens_to_ids(r.hypotheses[0]), skip_special_tokens=True) for r in results
    ]
    assert [row["translation_text"] for row in CTranslate2Translator(folder)(texts, num_beams=5)] == plain


@pytest.mark.slow
def test_publish_dry_run_lists_the_ctranslate2_folder(trained, capsys):
    assert main(["publish", "--model", str(trained), "--repo-id", "me/quick", "--dry-run", "--with-ctranslate2"]) == 0
    printed = capsys.readouterr().out
    listed = {line.strip() for line in printed.splitlines() if line.startswith("  ")}
    assert {"ctranslate2/model.bin", "ctranslate2/config.json", "ctranslate2/shared_vocabulary.json",
            "ctranslate2/tokenizer.json", f"ctranslate2/{EXPORT_INFO}", "model.safetensors"} <= listed  # fmt: skip
    assert 'allow_patterns="ctranslate2/*"' in printed and "ctranslate2.Translator(folder" in printed  # the card
    assert not (trained / "ctranslate2").exists()  # a dry run writes nothing
    assert main(["publish", "--model", str(trained), "--repo-id", "me/quick", "--dry-run"]) == 0
    assert "ctranslate2" not in capsys.readouterr().out


def test_the_rnn_is_refused_and_a_missing_ctranslate2_says_how_to_install(tokenizer, tmp_path, monkeypatch, caplog):
    config_class, model_class = get_model_type("bahdanau")
    rnn = model_class(config_class(vocab_size=len(tokenizer), embedding_size=16, hidden_size=16)).eval()
    save_for_pipeline(rnn, tokenizer, tmp_path / "rnn")
    assert main(["export", "--model", str(tmp_path / "rnn"), "--output", str(tmp_path / "out")]) == 1
    assert main(["translate", "--model", str(tmp_path / "rnn"), "Go.", "--engine", "ctranslate2"]) == 1
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert len(errors) == 2 and all("CTranslate2 has no RNN decoder" in error for error in errors)
    assert not (tmp_path / "out").exists() and not (tmp_path / "rnn" / "ctranslate2-float32").exists()

    caplog.clear()
    monkeypatch.setattr(export, "ctranslate2", None)  # as without the extra installed
    assert main(["export", "--model", str(tmp_path / "rnn"), "--output", str(tmp_path / "out")]) == 1
    assert main(["translate", "--model", str(tmp_path / "rnn"), "Go.", "--engine", "ctranslate2"]) == 1
    assert (
        main(["publish", "--model", str(tmp_path / "rnn"), "--repo-id", "me/x", "--dry-run", "--with-ctranslate2"]) == 1
    )
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert errors == ["CTranslate2 is not installed: pip install hf_bahdanau[ctranslate2]"] * 3


def test_the_command_line_offers_the_exports_quantizations():
    parser = cli.build_parser()._subparsers._group_actions[0].choices["export"]
    (quantization,) = (action for action in parser._actions if action.dest == "quantization")
    assert tuple(quantization.choices) == export.QUANTIZATIONS


@pytest.mark.slow
def test_heatmap_needs_the_torch_engine(trained, tmp_path, caplog):
    caplog.set_level(logging.ERROR)
    args = [
        "translate",
        "--model",
        str(trained),
        "Go.",
        "--heatmap",
        str(tmp_path / "a.png"),
        "--engine",
        "ctranslate2",
    ]
    assert main(args) == 1
    assert "--heatmap need --engine torch" in caplog.text and not (tmp_path / "a.png").exists()


@pytest.mark.slow
def test_the_benchmark_script_runs_every_engine_and_ours_decodes_as_torch(tmp_path, run_script):
    output = tmp_path / "ct2.md"
    log = run_script("benchmark_ctranslate2", "--quick", "--threads", "1", "2", "--output", str(output))
    assert "ours, CTranslate2 fp32: 4 of 4 sentences with torch fp32's greedy tokens" in log
    # the same output layer on both sides: Marian's loader drops a row of the one more it is given
    assert "ours in CTranslate2: 50 tokens" in log and "MarianMT in CTranslate2: 50 tokens" in log
    lines = output.read_text().splitlines()
    assert lines[0] == "| measure | implementation | 1 thread | 2 threads |"  # one column per thread count
    rows = [line.split("|")[1:-1] for line in lines[2:]]
    names = {name.strip() for measure, name, *_ in rows if measure.strip() != "ratio"}
    assert names == {f"{model}, {engine}" for model, engine in [("ours", "torch fp32"), ("ours", "torch int8"),
                     ("ours", "CTranslate2 fp32"), ("ours", "CTranslate2 int8"), ("MarianMT", "CTranslate2 fp32"),
                     ("MarianMT", "CTranslate2 int8")]}  # fmt: skip
    assert len(rows) == 12 + 10 and all(
        float(value.strip().rstrip("x").replace(",", "")) > 0 for _, _, *values in rows for value in values
    )


@pytest.mark.slow
def test_the_benchmark_script_measures_exactness_on_a_trained_model(trained, tmp_path, run_script):
    output = tmp_path / "exactness.md"
    before = sorted(path.name for path in trained.iterdir())
    run_script("benchmark_ctranslate2", "--exactness", str(trained), "--max-samples", "24", "--beams", "3", "--output",
               str(output))  # fmt: skip
    assert sorted(path.name for path in trained.iterdir()) == before  # exported elsewhere, nothing recorded
    lines = [line for line in output.read_text().splitlines() if line.startswith(("| greedy", "| beam"))]
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line.split("|")[3:-1] for line in lines}
    assert list(rows) == [(decoding, engine) for decoding in ("greedy", "beam 3")
                          for engine in ("torch fp32", "CTranslate2 fp32", "CTranslate2 int8")]  # fmt: skip
    same, bleu, change = (cell.strip() for cell in rows["greedy", "CTranslate2 fp32"])
    assert same == "24 / 24" and change == "+0.00" and float(bleu) == float(rows["greedy", "torch fp32"][1])

    # The search-or-weights check: lines of the same output score the same under our model and in CTranslate2
    import benchmark_ctranslate2  # (scripts/ is on sys.path: `run_script`)

    model, tokenizer = load_translation_model(str(trained))
    translator = CTranslate2Translator(export_ctranslate2(trained, tmp_path / "ct2"), threads=1)
    texts = benchmark_ctranslate2.test_corpus(trained, 6)[0]
    why = benchmark_ctranslate2.explain_differences(model, tokenizer, translator, texts, list(range(6)), 1)
    assert why.startswith("6 lines differ; under our model CTranslate2's hypothesis scores higher in 0 ")
    assert "lower in 0 (" in why and "the same in 6;" in why
    assert float(why.rsplit("at most ", 1)[1].split()[0]) < 1e-3  # CTranslate2's log-probabilities are ours
    assert why.endswith(" apart")
    other = (["?"] * 6, ["?"] * 6)  # batch outputs the lone decodes do not give back: said
    why = benchmark_ctranslate2.explain_differences(model, tokenizer, translator, texts, [0, 1], 1, other)
    assert why.endswith(" apart (2 decoded alone otherwise than in their batch)")
