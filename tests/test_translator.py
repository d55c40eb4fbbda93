"""The Translator and `translate` as a translator's tool: scores, n-best lists, word alignments, length-sorted token
batches, odd input, attention figures, the long-source warning; `evaluate` writes what `translate` writes."""

from __future__ import annotations

import copy
import importlib
import io
import json
import math
import re
import shutil
import sys

import pytest
import torch
from helpers import MODEL_TYPES, TINY_CORPUS, tiny_train_argv, tiny_translator
from safetensors.torch import load_file, save_file

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.alignment import merge_words, pharaoh, word_ids
from hf_bahdanau.decoding.batching import in_input_order, token_batches
from hf_bahdanau.decoding.sources import length_bound
from hf_bahdanau.decoding.translator import Hypothesis, Translation, Translator
from hf_bahdanau.errors import InputError

SOURCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen.", "Eine Frau liest ein Buch im Park am Strand."]
PIECE = re.compile(r"^(\d+-\d+( \d+-\d+)*)?$")


@pytest.fixture(scope="module", params=MODEL_TYPES)
def model(request, tokenizer):
    """A tiny random model of each type whose own length limit (64 new tokens) is far above the source bound."""
    return tiny_translator(request.param, tokenizer, 3, max_new_tokens=64)


def teacher_forced_score(model, tokenizer, text: str, generated: list[int]) -> float:
    """The mean log-probability of `generated` (ending with </s> or cut) given `text`, by hand: one forward pass."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    decoder = torch.tensor([[model.config.decoder_start_token_id, *generated[:-1]]])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=decoder).logits[0]
    return logits.log_softmax(-1).gather(1, torch.tensor(generated)[:, None]).mean().item()


def generated_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("beams, n_best", [(1, 1), (3, 3)])
def test_scores_are_the_mean_token_log_probability_of_each_hypothesis(model, tokenizer, beams, n_best):
    translator = Translator(model, tokenizer)
    rows = translator.source_ids(SOURCES)
    results = [found.hypotheses for found in translator.translate(SOURCES, n_best=n_best, num_beams=beams,
                                                                   max_new_tokens=12)]  # fmt: skip
    assert [len(hypotheses) for hypotheses in results] == [n_best] * len(SOURCES)
    for text, hypotheses in zip(SOURCES, results, strict=True):  # padding in a batch changes nothing
        alone = translator.translate([text], n_best=n_best, num_beams=beams, max_new_tokens=12)[0].hypotheses
        assert [h.text for h in alone] == [h.text for h in hypotheses]
        assert [h.score for h in alone] == pytest.approx([h.score for h in hypotheses], abs=1e-4)
        assert all(h.score <= 0 for h in hypotheses)
    # by hand, over the exact generated tokens of the first source's hypotheses
    outputs = model.generate(input_ids=torch.tensor([rows[0]]), num_beams=beams, num_return_sequences=n_best,
                             max_new_tokens=12, pad_token_id=0)  # fmt: skip
    for sequence, hypothesis in zip(outputs, results[0], strict=True):
        tokens = sequence[1:].tolist()
        tokens = tokens[: tokens.index(2) + 1] if 2 in tokens else tokens
        assert tokenizer.decode(tokens, skip_special_tokens=True) == hypothesis.text
        assert hypothesis.score == pytest.approx(teacher_forced_score(model, tokenizer, SOURCES[0], tokens), abs=1e-4)


class FakeTokenizer:
    """The three things `word_ids` reads, for a hand-made case."""

    all_special_tokens = ["<pad>", "<s>", "</s>", "<unk>"]
    unk_token = "<unk>"

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    def get_vocab(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.tokens)}


def test_from_folder_loads_as_strictly_as_translate(folder, model, tokenizer, tmp_path):
    """`Translator.from_folder`, the loader of every front end, refuses in one line what `translate` refuses: a model
    type that is not the package's (its code would come from the folder), pickled weights only, a missing weight."""
    loaded = Translator.from_folder(folder).translate(SOURCES, max_new_tokens=6)
    assert [t.text for t in loaded] == [
        t.text for t in Translator(model, tokenizer).translate(SOURCES, max_new_tokens=6)
    ]
    foreign = shutil.copytree(folder, tmp_path / "foreign")
    config = json.loads((foreign / "config.json").read_text(encoding="utf-8"))
    (foreign / "config.json").write_text(json.dumps({**config, "model_type": "marian"}), encoding="utf-8")
    pickled = shutil.copytree(folder, tmp_path / "pickled")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    cut = shutil.copytree(folder, tmp_path / "cut")
    weights = load_file(cut / "model.safetensors")
    removed = sorted(name for name in weights if name.startswith("model.encoder."))[0]
    save_file({name: value for name, value in weights.items() if name != removed}, cut / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip
    refusals = {foreign: "model type 'marian' is not one of this package's", pickled: "holds only pytorch_model.bin",
                cut: rf"1 missing \({re.escape(removed)}\)"}  # fmt: skip
    for broken, message in refusals.items():
        with pytest.raises(InputError, match=message) as error:
            Translator.from_folder(broken)
        assert "\n" not in str(error.value)


def test_word_alignment_merges_subwords_into_whitespace_words():
    assert word_ids(FakeTokenizer(["▁A", "Hun", "s", "</s>"]), [1, 2, 3]) == [0, 0, None]  # no mark: one word
    source = FakeTokenizer(["▁Ein", "▁Fahr", "rad", ".", "</s>"])  # words: Ein | Fahrrad.
    target = FakeTokenizer(["▁A", "▁bi", "ke", "</s>"])  # words: A | bike
    assert word_ids(source, range(5)) == [0, 1, 1, 1, None]
    assert word_ids(target, range(4)) == [0, 1, 1, None]
    assert word_ids(FakeTokenizer(["▁", "-", "▁", "<unk>", "</s>"]), range(5)) == [0, 0, 1, 1, None]  # "- 😀"
    assert word_ids(FakeTokenizer(["go", ".", "<eos>"]), range(3)) == [0, 1, 2]  # a word vocabulary: token = word
    attention = torch.tensor(  # (target tokens, source tokens): rows sum to 1
        [
            [0.90, 0.05, 0.03, 0.01, 0.01],  # A -> Ein
            [0.40, 0.10, 0.45, 0.04, 0.01],  # bi -> Fahrrad (0.59 over its pieces)
            [0.45, 0.30, 0.20, 0.04, 0.01],  # ke: its best piece is Ein, but Fahrrad holds 0.54
            [0.20, 0.20, 0.20, 0.20, 0.20],  # </s>: no word
        ]
    )
    words = merge_words(attention, word_ids(target, range(4)), word_ids(source, range(5)))
    assert words.shape == (2, 2)
    assert words[1].tolist() == pytest.approx([(0.40 + 0.45) / 2, (0.59 + 0.54) / 2])
    assert pharaoh(words) == "0-0 1-1"
    assert pharaoh(attention[:3, :4]) == "0-0 0-2 2-1"  # token level, by contrast: ke -> Ein
    assert pharaoh(torch.zeros(0, 2)) == ""


def test_alignments_end_to_end_are_pharaoh_pairs_within_the_words(model, tokenizer):
    results = Translator(model, tokenizer).translate([*SOURCES, ""], n_best=2, alignments=True, num_beams=2,
                                                     max_new_tokens=10)  # fmt: skip
    assert results[-1] == Translation([Hypothesis("", None, "")] * 2)
    for text, translation in zip(SOURCES, results[:-1], strict=True):
        for hypothesis in translation.hypotheses:
            assert PIECE.match(hypothesis.alignment), hypothesis.alignment
            pairs = [tuple(map(int, pair.split("-"))) for pair in hypothesis.alignment.split()]
            # one link per translation word, to a word of the source
            assert sorted(target for _, target in pairs) == list(range(len(hypothesis.text.split())))
            assert all(source < len(text.split()) for source, _ in pairs)


@pytest.mark.slow
def test_translate_n_best_scores_and_alignments_from_the_command_line(folder, monkeypatch, capsys, caplog):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ein Mann fährt Fahrrad.\n\nZwei Hunde spielen.\n"))
    assert main(["translate", "--model", str(folder), "--n-best", "2", "--num-beams", "2", "--alignments"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # an empty source: n empty, unscored hypotheses, as many lines as any other source
    assert [line.split("\t")[0] for line in lines] == ["0", "0", "1", "1", "2", "2"]
    assert lines[2] == lines[3] == "1\t\t\t"
    for line in lines[:2] + lines[4:]:
        index, score, text, alignment = line.split("\t")
        assert float(score) <= 0 and PIECE.match(alignment)
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ein Mann fährt Fahrrad.\n\nZwei Hunde spielen.\n"))
    assert main(["translate", "--model", str(folder), "--scores"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[1] == "\t"  # an empty source is not scored (JSON lines say null)
    assert all(re.match(r"^-?\d+\.\d{4}\t", line) for line in lines[::2])
    assert main(["translate", "--model", str(folder), "--n-best", "4", "--num-beams", "3", "x"]) == 1
    assert "--n-best 4 is more than the 3 beams searched" in caplog.text


def test_token_batches_sort_by_length_and_hold_the_token_budget():
    lengths = [3, 10, 4, 9, 2, 30, 0, 5]
    batches = token_batches(lengths, batch_tokens=20)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert batches[0] == [5]  # longer than the budget: alone
    for batch in batches:
        assert [lengths[i] for i in batch] == sorted((lengths[i] for i in batch), reverse=True)
        assert len(batch) == 1 or len(batch) * lengths[batch[0]] <= 20
    assert [len(batch) for batch in token_batches(lengths, max_sentences=3)] == [3, 3, 2]


def test_results_come_in_input_order_as_soon_as_they_can_be():
    lengths = [1, 5, 2, 6, 3]
    calls = []

    def translate(indices):
        calls.append(indices)
        return [[Hypothesis(f"t{i}")] for i in indices]

    chunks = list(in_input_order(translate, lengths, batch_tokens=12))
    assert calls == [[3, 1], [4, 2, 0]]  # longest first
    assert [[row[0].text for row in chunk] for chunk in chunks] == [["t0", "t1", "t2", "t3", "t4"]]
    chunks = list(in_input_order(translate, [6, 5, 1, 1], batch_tokens=12))  # the first batch is the prefix
    assert [[row[0].text for row in chunk] for chunk in chunks] == [["t0", "t1"], ["t2", "t3"]]


@pytest.mark.slow
def test_a_file_translates_the_same_sorted_by_length_as_in_input_order(folder, model, tokenizer, monkeypatch, capsys):
    lines = [TINY_CORPUS[i % len(TINY_CORPUS)] for i in range(0, 40, 3)] + ["", "Ein Hund."]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in lines)))
    assert main(["translate", "--model", str(folder), "--num-beams", "1", "--batch-tokens", "40"]) == 0
    sorted_output = capsys.readouterr().out.splitlines()
    translator = Translator(model, tokenizer)
    one_by_one = [translator.translate([line], num_beams=1)[0].text for line in lines]
    assert sorted_output == one_by_one


ODD = ["", "   ", "-", "...", "!?", "😀😀", "12345 678", "https://example.com/a?b=1&c=2", "- - -", "Ein Hund."]


@pytest.mark.slow
def test_odd_input_never_loops_and_empty_lines_stay_empty(folder, model, tokenizer, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in ODD)))
    assert main(["translate", "--model", str(folder)]) == 0
    output = capsys.readouterr().out.split("\n")[:-1]
    assert len(output) == len(ODD)
    assert output[:2] == ["", ""]
    for source, translation in zip(ODD, output, strict=True):
        tokens = len(tokenizer(translation, add_special_tokens=False)["input_ids"])
        source_tokens = len(tokenizer(source)["input_ids"]) if source.strip() else 0
        assert tokens <= length_bound(source_tokens), (source, translation)  # the model's own limit is 64
    # a user's --max-new-tokens is the limit instead
    monkeypatch.setattr(sys, "stdin", io.StringIO("-\n"))
    assert main(["translate", "--model", str(folder), "--max-new-tokens", "30", "--num-beams", "1"]) == 0
    unbounded = capsys.readouterr().out.strip()
    generated = model.generate(**tokenizer(["-"], return_tensors="pt"), num_beams=1, max_new_tokens=30)
    assert unbounded == tokenizer.decode(generated[0], skip_special_tokens=True)


def test_the_bound_cuts_each_row_at_its_own_source_length(model, tokenizer):
    translator = Translator(model, tokenizer)
    rows = translator.source_ids(["-", SOURCES[2] * 3])  # 3 and ~50 tokens in one batch
    assert len(rows[1]) > 20
    short, long = translator.translate(["-", SOURCES[2] * 3], n_best=2, num_beams=2)
    for hypothesis in short.hypotheses:
        assert len(tokenizer(hypothesis.text, add_special_tokens=False)["input_ids"]) <= length_bound(len(rows[0]))


def test_a_source_is_cut_as_the_shipped_pipeline_cuts_it(model, tokenizer, caplog):
    """The Translator cuts sources itself (no torch needed for CTranslate2), as the pipeline a folder ships does."""
    from transformers import pipeline

    from hf_bahdanau.models.pipelines import TASK

    short = copy.deepcopy(tokenizer)
    short.model_max_length = 6
    pipe = pipeline(TASK, model=model, tokenizer=short)
    texts = [SOURCES[0], SOURCES[2] * 3, "-", " "]
    rows = Translator(model, short).source_ids(texts)
    assert [len(row) for row in rows] == [6, 6, 3, 0] and rows[0][-1] == rows[1][-1] == short.eos_token_id
    inputs = [pipe.preprocess(text) for text in texts]
    assert rows == [ids["input_ids"][0][ids["attention_mask"][0].bool()].tolist() for ids in inputs]
    assert caplog.text.count("truncated to the model's limit of 6 tokens") == 4  # each, once by each


def test_pharaoh_words_count_as_whitespace_words(tokenizer):
    text = "Ein Mann, fährt Fahrrad."
    ids = tokenizer(text)["input_ids"]
    words = [word for word in word_ids(tokenizer, ids) if word is not None]
    assert max(words) + 1 == len(text.split())


@pytest.mark.slow
def test_heatmap_is_one_readable_figure_of_words(folder, model, tokenizer, tmp_path, monkeypatch, caplog):
    from PIL import Image

    module = importlib.import_module("hf_bahdanau.decoding.attention_maps")

    caplog.set_level("INFO")
    path = tmp_path / "figures" / "attention.png"
    text = "Eine Frau liest ein Buch im Park."
    assert main(["translate", "--model", str(folder), text, "--heatmap", str(path), "--max-new-tokens", "8"]) == 0
    assert [p.name for p in path.parent.iterdir()] == ["attention.png"]  # one file, said once
    assert caplog.text.count(f"wrote {path}") == 1 and "heatmap written" not in caplog.text
    width, height = Image.open(path).size
    assert width < 1600 and height < 1600, (width, height)  # the 8-panel grid was 3336 x 1697 px

    calls = []
    monkeypatch.setattr(module, "show_heatmaps", lambda weights, **kwargs: calls.append((weights, kwargs)))
    maps = Translator(model, tokenizer).attention_maps(text, num_beams=1, max_new_tokens=6)
    module.plot_word_attention(maps, text, tmp_path / "a.png")
    weights, kwargs = calls[-1]
    assert kwargs["xticklabels"] == text.split()  # words, no "-" or "▁" pieces
    assert kwargs["yticklabels"] == maps.translation.split()
    expected = merge_words(maps.cross[-1].mean(0), maps.target_word_ids, maps.source_word_ids)
    assert torch.allclose(weights, expected) and weights.shape == (len(maps.translation.split()), len(text.split()))
    layers, heads = maps.cross.shape[:2]
    module.plot_word_attention(maps, text, tmp_path / "a.png", layer=1, head=heads)
    assert torch.allclose(calls[-1][0], merge_words(maps.cross[0, -1], maps.target_word_ids, maps.source_word_ids))
    with pytest.raises(ValueError, match=f"--heatmap-layer 9: the model's cross-attention has {layers} layers"):
        module.plot_word_attention(maps, text, tmp_path / "a.png", layer=9)


@pytest.mark.slow
def test_heatmap_all_draws_the_grids_and_self_attention(folder, model, tmp_path, caplog):
    path = tmp_path / "attention.png"
    assert main(["translate", "--model", str(folder), "Ein Hund.", "--heatmap", str(path), "--heatmap-all"]) == 0
    expected = {"attention.png"} | (set() if model.config.model_type == "bahdanau" else
                                    {"attention-encoder.png", "attention-decoder.png"})  # fmt: skip
    assert {p.name for p in tmp_path.iterdir()} == expected
    assert main(["translate", "--model", str(folder), "x", "--heatmap-all"]) == 1
    assert "need --heatmap FILE.png" in caplog.text


@pytest.mark.slow
def test_translate_warns_once_of_sources_longer_than_training_saw(
    folder, tokenizer, tmp_path, monkeypatch, capsys, caplog
):
    import json
    import shutil

    trained = shutil.copytree(folder, tmp_path / "model")
    lines = ["Ein Hund.", "Eine Frau liest ein Buch im Park.", "Zwei Hunde spielen im Schnee."]
    lengths = [len(tokenizer(line)["input_ids"]) for line in lines]  # </s> included
    assert lengths[0] < lengths[2] < lengths[1]
    (trained / "translation_data.json").write_text(json.dumps({"max_source_length": lengths[0]}))
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in lines)))
    assert main(["translate", "--model", str(trained), "--num-beams", "1"]) == 0
    warnings = [r.getMessage() for r in caplog.records if "longest source the model saw" in r.getMessage()]
    assert warnings == [
        f"2 source(s) longer than the {lengths[0]} tokens of the longest source the model saw in training (up to "
        f"{lengths[1]} tokens): their translations may be cut short or go wrong"
    ]
    assert len(capsys.readouterr().out.splitlines()) == 3
    caplog.clear()
    assert main(["translate", "--model", str(folder), "Eine Frau liest ein Buch im Park."]) == 0  # nothing recorded
    assert "longest source" not in caplog.text


@pytest.mark.slow
def test_train_reports_to_tensorboard_and_records_its_longest_source(tatoeba_tsv, tmp_path):
    pytest.importorskip("tensorboard")
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    output = tmp_path / "model"
    assert main(tiny_train_argv(tatoeba_tsv, output, "--max_source_length", "24", "--report_to", "tensorboard")) == 0
    assert json.loads((output / "translation_data.json").read_text())["max_source_length"] == 24
    (events,) = output.glob("runs/*/events.out.tfevents.*")
    accumulator = EventAccumulator(str(events.parent))
    accumulator.Reload()
    scalars = accumulator.Tags()["scalars"]
    assert [event.step for event in accumulator.Scalars("train/loss")] == [2, 4, 6]
    assert all(math.isfinite(event.value) and event.value > 0 for event in accumulator.Scalars("train/loss"))
    assert "eval/bleu" in scalars and [event.step for event in accumulator.Scalars("eval/bleu")] == [6]


@pytest.mark.slow
# each translation bounded by its source's length (the default), then by --max-new-tokens (a random model runs to each)
@pytest.mark.parametrize(
    "options", [["--num-beams", "1"], ["--num-beams", "2", "--length-penalty", "0.5", "--max-new-tokens", "12"]]
)
def test_evaluate_writes_what_translate_writes(folder, multi30k_dir, tmp_path, monkeypatch, capsys, options):
    import gzip

    hypotheses = tmp_path / "hypotheses.txt"
    evaluate = ["evaluate", "--model", str(folder), "--data", str(multi30k_dir), "--src-lang", "de", "--tgt-lang",
                "en", "--max-samples", "16", "--batch-size", "8", "--output", str(hypotheses), *options]  # fmt: skip
    assert main(evaluate) == 0
    with gzip.open(multi30k_dir / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as file:
        sources = [next(file).rstrip("\n") for _ in range(16)]
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{line}\n" for line in sources)))
    assert main(["translate", "--model", str(folder), "--batch-size", "8", *options]) == 0
    assert hypotheses.read_text(encoding="utf-8").splitlines() == capsys.readouterr().out.splitlines()
