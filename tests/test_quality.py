"""Quality estimates on tiny models: the evidence against hand computation and alike in torch and CTranslate2, the
labels, the estimator file, the `quality=True` option, and calibrate, translate --quality and evaluate end to end.

A random model's translations match no real reference, so the references here are its own translations with every
third word replaced: some words OK, some BAD, which is all an estimator needs to be fitted."""

from __future__ import annotations

import gc
import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TINY_CORPUS, make_model
from transformers import AutoTokenizer

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.batching import padded
from hf_bahdanau.decoding.calibration import calibrate, fit_estimator, labelled_samples
from hf_bahdanau.decoding.folder_data import read_tokenizer
from hf_bahdanau.decoding.quality.estimator import ESTIMATOR_FILE, QualityEstimator, require_estimator, word_labels
from hf_bahdanau.decoding.quality.features import (
    WORD_FEATURES,
    Evidence,
    prefix_texts,
    sentence_features,
    torch_evidence,
    word_features,
    word_groups,
)
from hf_bahdanau.decoding.search import search
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.errors import InputError
from hf_bahdanau.models.pipelines import pad_id, save_for_pipeline

GERMAN = TINY_CORPUS[0::2]
SOURCES = [f"{a} {b}" for a in GERMAN for b in GERMAN]  # 36 sources


def spoilt(text: str) -> str:
    """`text` with every third word replaced: a reference that some of its words match."""
    return " ".join("Zebra" if i % 3 == 2 else word for i, word in enumerate(text.split()))


def tiny_folder(tokenizer, folder: Path, model_type: str = "d2l_transformer") -> Path:
    """A tiny random model of `model_type` whose `</s>` logit is raised (translations of a few words), saved with
    `tokenizer` in `folder`, translating de->en."""
    model = make_model(model_type, width=32, vocab_size=len(tokenizer), source_language="de", target_language="en")
    with torch.no_grad():
        head = model.get_output_embeddings()
        head.weight[2] += 0.5 * head.weight.mean(0)
        head.weight[2] *= 3.0
    model.generation_config.num_beams = 2
    return save_for_pipeline(model, tokenizer, folder)


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_folder(tokenizer, tmp_path_factory.mktemp("quality") / "model")


@pytest.fixture(scope="module")
def references(folder) -> list[str]:
    return [spoilt(translation.text) for translation in Translator.from_folder(folder).translate(SOURCES)]


@pytest.fixture(scope="module")
def calibrated(folder, references, tmp_path_factory) -> Path:
    """A copy of `folder` with an estimator fitted on SOURCES."""
    copy = tmp_path_factory.mktemp("calibrated") / "model"
    shutil.copytree(folder, copy)
    calibrate(Translator.from_folder(copy), copy, SOURCES, references, {"data": "tiny"})
    return copy


@pytest.mark.parametrize("model_type", ["bahdanau", "d2l_transformer"])
def test_evidence_is_the_token_arithmetic_of_the_model_s_distributions(tokenizer, tmp_path, model_type):
    """Each token's log-probability is that of a forward pass by hand; their mean is the search's score; a word's
    mean and least log-probability and its piece count are its tokens'; its attention entropy, by hand."""
    translator = Translator.from_folder(tiny_folder(tokenizer, tmp_path / "model", model_type))
    texts = SOURCES[:6]
    translations = translator.translate(texts)
    evidence_found = translator.evidence(texts, translations)
    for text, translation, evidence in zip(texts, translations, evidence_found, strict=True):
        ids = translation.hypotheses[0].ids
        source = torch.tensor(translator.source_ids([text]))
        decoder = torch.tensor([[translator.config.decoder_start_token_id, *ids[:-1]]])
        with torch.no_grad():
            logits = translator.model(input_ids=source, decoder_input_ids=decoder).logits[0]
        for position, token in enumerate(ids):
            probabilities = [math.exp(value) for value in logits[position].tolist()]
            assert evidence.log_probs[position] == pytest.approx(math.log(probabilities[token] / sum(probabilities)),
                                                                 abs=1e-4)  # fmt: skip
        assert sum(evidence.log_probs) / len(ids) == pytest.approx(translation.score, abs=1e-4)
        assert evidence.word_texts == translation.text.split()
        assert all(sum(row) == pytest.approx(1.0, abs=1e-4) for row in evidence.attention)
        assert len(evidence.attention[0]) == source.shape[1]
        for group, row in zip(evidence.words, word_features([evidence]), strict=True):
            pieces = [evidence.log_probs[i] for i in group]
            spread = [-sum(p * math.log(p) for p in evidence.attention[i]) / math.log(source.shape[1]) for i in group]
            expected = [
                sum(pieces) / len(pieces),
                min(pieces),
                len(pieces),
                translation.score,
                sum(spread) / len(group),
            ]
            assert row == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("model_type", ["bahdanau", "d2l_transformer"])
def test_the_search_s_evidence_is_the_teacher_forced_pass_s(tokenizer, tmp_path, model_type, num_beams):
    """Every hypothesis of an n-best list (greedy: the one) carries the log-probabilities and attention that a
    teacher-forced pass over it gives, the sources padded in a batch."""
    translator = Translator.from_folder(tiny_folder(tokenizer, tmp_path / "model", model_type))
    rows = translator.source_ids(SOURCES[:8])
    input_ids, mask = padded(rows, pad_id(tokenizer), tokenizer.padding_side)
    settings = translator.settings(num_beams=num_beams, n_best=num_beams)
    found = search(translator.model, input_ids, mask, settings, trace=True)
    assert search(translator.model, input_ids, mask, settings).sequences.tolist() == found.sequences.tolist()
    for j, length in enumerate(found.lengths.tolist()):
        source = j // num_beams
        (forced,) = torch_evidence(translator.model, tokenizer, [rows[source]], [found.sequences[j, 1 : 1 + length]
                                                                                .tolist()])  # fmt: skip
        traced = found.traces[j, :length]  # (tokens, src_len + 1)
        assert traced[:, -1].tolist() == pytest.approx(forced.log_probs, abs=1e-4)
        for searched, row in zip(traced[:, :-1][:, mask[source].bool()].tolist(), forced.attention, strict=True):
            assert searched == pytest.approx(row, abs=1e-4)


def test_words_are_the_decoded_text_s_whitespace_words(tokenizer):
    ids = tokenizer("Two dogs are playing in the snow.", add_special_tokens=True)["input_ids"]
    groups, texts = word_groups(tokenizer, ids)
    assert texts == ["Two", "dogs", "are", "playing", "in", "the", "snow."]
    assert [i for group in groups for i in group] == list(range(len(ids) - 1))  # every token but `</s>`, in order
    for group, text in zip(groups, texts, strict=True):
        assert tokenizer.decode([ids[i] for i in group]).strip() == text
    gc.collect()
    assert not any(gc.is_tracked(group) for group in groups)  # nothing a full collection walks


@pytest.mark.parametrize("clean_up", [False, True])
def test_prefix_texts_are_what_decode_gives_for_each_prefix(tokenizer, tmp_path, clean_up):
    """By incremental decoding, or where the tokenizer cleans up spaces by a decode a prefix: either way each
    prefix's decode, special tokens (`</s>`, and `<unk>` and `<pad>` inside) skipped."""
    tokenizer.save_pretrained(tmp_path)  # the CTranslate2 engine's tokenizer, read as data
    tokenizers = [tokenizer, read_tokenizer(tmp_path)]
    if clean_up:
        tokenizers = [AutoTokenizer.from_pretrained(tmp_path, clean_up_tokenization_spaces=True)]
    texts = [*TINY_CORPUS[:20], "Zwei Hunde spielen im Schnee .", "A dog , a cat !"]
    rows = [tokenizer(text, add_special_tokens=True)["input_ids"] for text in texts]
    rows.append([*rows[0][:2], tokenizer.unk_token_id, tokenizer.pad_token_id, *rows[1]])
    for each in tokenizers:
        for ids in rows:
            expected = [each.decode(ids[: position + 1], skip_special_tokens=True) for position in range(len(ids))]
            assert prefix_texts(each, ids) == expected
    assert prefix_texts(tokenizer, []) == []


def test_a_word_is_ok_where_it_is_in_a_longest_common_subsequence_with_the_reference():
    assert word_labels("A dog runs fast .".split(), "A dog is running fast.") == [True, True, False, True, False]
    assert word_labels(["Two", "men,"], "two men") == [True, True]  # case and punctuation at the ends aside
    assert sum(word_labels(["dog", "dog"], "dog")) == 1  # a reference word matches once
    assert word_labels("a b c".split(), "c a b") == [True, True, False]  # in order: c was moved
    assert word_labels(["x"], "") == [False]


def test_features_are_the_same_in_torch_and_ctranslate2(folder):
    pytest.importorskip("ctranslate2")
    translators = {engine: Translator.from_folder(folder, engine=engine) for engine in ("torch", "ctranslate2")}
    texts = [*SOURCES[:8], ""]
    translations = translators["torch"].translate(texts)
    found = {engine: translator.evidence(texts, translations) for engine, translator in translators.items()}
    assert found["torch"][-1] is None and found["ctranslate2"][-1] is None  # a blank source: no evidence
    for ours, theirs in zip(found["torch"][:-1], found["ctranslate2"][:-1], strict=True):
        assert (theirs.words, theirs.word_texts) == (ours.words, ours.word_texts)
        assert theirs.log_probs == pytest.approx(ours.log_probs, abs=1e-3)
        for their_row, our_row in zip(theirs.attention, ours.attention, strict=True):
            assert their_row == pytest.approx(our_row, abs=1e-3)


def test_ctranslate2_s_search_attention_is_its_teacher_forced_attention(folder):
    pytest.importorskip("ctranslate2")
    engine = Translator.from_folder(folder, engine="ctranslate2").model
    found = engine.hypotheses(SOURCES[:8], attention=True, num_beams=3, num_return_sequences=3)
    hypotheses = [hypothesis for row in found for hypothesis in row]
    sources = [engine.tokenizer.convert_tokens_to_ids(engine.source_tokens(text)) for text in SOURCES[:8]]
    sources = [source for source in sources for _ in range(3)]
    forced = engine.evidence(sources, [hypothesis.ids for hypothesis in hypotheses])
    assert all(hypothesis.attention is not None for hypothesis in hypotheses)
    for hypothesis, evidence in zip(hypotheses, forced, strict=True):
        assert len(hypothesis.attention) == len(hypothesis.ids)
        for searched, row in zip(hypothesis.attention, evidence.attention, strict=True):
            assert searched == pytest.approx(row, abs=1e-4)


def test_ctranslate2_s_greedy_search_keeps_the_teacher_forced_log_probabilities(folder):
    pytest.importorskip("ctranslate2")
    engine = Translator.from_folder(folder, engine="ctranslate2").model
    found = [row[0] for row in engine.hypotheses(SOURCES[:8], attention=True, num_beams=1)]
    sources = [engine.tokenizer.convert_tokens_to_ids(engine.source_tokens(text)) for text in SOURCES[:8]]
    forced = engine.evidence(sources, [hypothesis.ids for hypothesis in found])
    for hypothesis, evidence in zip(found, forced, strict=True):
        assert hypothesis.log_probs == pytest.approx(evidence.log_probs, abs=1e-4)
        searched = engine.search_evidence(hypothesis)
        assert (searched.words, searched.word_texts) == (evidence.words, evidence.word_texts)
    # a beam search's scores, or a search held to a prefix, are not each token's log-probability: none kept
    beams = engine.hypotheses(SOURCES[:2], attention=True, num_beams=2)
    prefixes = [engine.tokenizer.convert_ids_to_tokens(hypothesis.ids[:1]) for hypothesis in found[:2]]
    prefixed = engine.hypotheses(SOURCES[:2], attention=True, num_beams=1, prefixes=prefixes)
    assert all(row[0].log_probs is None and engine.search_evidence(row[0]) is None for row in beams + prefixed)


def test_features_by_hand_and_a_batch_s_rows_are_each_translation_s_own():
    """A word of no token of its own (the first, where decode is not prefix-stable) gets its sentence's mean, no
    pieces and even attention; the rest by hand; a batch's rows are each translation's rows in turn."""
    odd = Evidence([-0.5, -1.0, -0.1], [[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]], [[], [1], [0, 2]], ["a", "b", "c"])
    plain = Evidence([-2.0, -0.2], [[0.1, 0.7, 0.2], [1.0, 0.0, 0.0]], [[0], [1]], ["x", "y"])
    mean, spread = -1.6 / 3, -(0.2 * math.log(0.2) + 0.8 * math.log(0.8) + 2 * 0.5 * math.log(0.5)) / 2 / math.log(2)
    assert word_features([odd]) == pytest.approx(np.array([
        [mean, mean, 0, mean, 1.0], [-1.0, -1.0, 1, mean, 0.0], [-0.3, -0.5, 2, mean, spread],
    ]))  # fmt: skip
    # least piece -1.0 is above log(0.2): no doubtful word; attention sums (1.7, 1.3): one of two source tokens twice
    assert sentence_features([odd], [2]) == pytest.approx(np.array([[mean, -1.0, 0.0, 0.0, 0.5, math.log(3 / 2)]]))
    # plain's first word is doubtful (-2.0); its attention sums (1.1, 0.7, 0.2): one of three never attended
    assert sentence_features([plain], [3])[0, 2:4] == pytest.approx([0.5, 1 / 3])
    assert word_features([odd, plain]) == pytest.approx(np.vstack([word_features([odd]), word_features([plain])]))
    assert sentence_features([plain, odd], [3, 2]) == pytest.approx(
        np.vstack([sentence_features([plain], [3]), sentence_features([odd], [2])])
    )


def test_estimates_of_a_batch_are_each_translation_s_own(calibrated):
    translator = Translator.from_folder(calibrated)
    texts = SOURCES[:6]
    evidence = [*translator.evidence(texts, translator.translate(texts)), Evidence([-0.5], [[1.0]], [], [])]
    lengths = [len(row) for row in translator.source_ids(texts)] + [3]
    together = translator.quality_estimator.estimates(evidence, lengths)
    for found, each, length in zip(together, evidence, lengths, strict=True):
        alone = translator.quality_estimator.estimate(each, length)
        assert found.score == pytest.approx(alone.score, abs=1e-9)
        assert found.bergamot.score == pytest.approx(alone.bergamot.score, abs=1e-9)
        assert [(word.word, word.ok) for word in found.words] == [(word.word, word.ok) for word in alone.words]
        assert found.probabilities == pytest.approx(alone.probabilities, abs=1e-9)
    assert together[-1].score == 0.0 and together[-1].words == []  # nothing translated: nothing vouched for


def test_the_estimator_file_round_trips(calibrated):
    estimator = QualityEstimator.from_folder(calibrated)
    assert estimator is not None and estimator.words.model.features == list(WORD_FEATURES)
    copy = calibrated.parent / "copy"
    copy.mkdir()
    estimator.save(copy)
    assert QualityEstimator.from_folder(copy) == estimator
    assert json.loads((copy / ESTIMATOR_FILE).read_text()) == json.loads((calibrated / ESTIMATOR_FILE).read_text())
    fitted = estimator.fitted
    assert fitted["sentences"] == len(SOURCES) and fitted["data"] == "tiny" and 0 < fitted["ok_words"] < 1
    assert set(fitted["figures"]) >= {"pearson", "bergamot_pearson", "mcc", "bergamot_mcc"}


def test_only_engines_that_give_evidence_estimate(calibrated):
    estimator = QualityEstimator.from_folder(calibrated)
    assert require_estimator(estimator, "ctranslate2") is estimator
    with pytest.raises(InputError, match="torch or ctranslate2 engine"):
        require_estimator(estimator, "onnxruntime")


def test_an_estimator_of_other_features_is_refused(calibrated, tmp_path):
    data = json.loads((calibrated / ESTIMATOR_FILE).read_text())
    data["words"]["model"]["features"][0] = "something_else"
    (tmp_path / ESTIMATOR_FILE).write_text(json.dumps(data))
    with pytest.raises(InputError, match="run calibrate"):
        QualityEstimator.from_folder(tmp_path)


def spoil_estimator(data: dict, how: str) -> dict | list:
    """The estimator file's `data` spoilt `how`."""
    if how == "another format":
        return {**data, "format": 99}
    if how == "a model missing":
        return {key: value for key, value in data.items() if key != "words"}
    if how == "weights of the wrong length":
        data["words"]["model"]["weights"] = data["words"]["model"]["weights"][:2]
        return data
    return [data]  # not an object


@pytest.mark.parametrize("how, message", [
    ("another format", "format 99, not this version's 1: run calibrate"),
    ("a model missing", "is not a whole quality estimator .*'words'.*: run calibrate"),
    ("weights of the wrong length", "a model's weights do not match its features: run calibrate"),
    ("a list", "does not hold a JSON object"),
])  # fmt: skip
def test_a_spoilt_estimator_file_is_refused_in_one_line_naming_it(calibrated, tmp_path, how, message):
    data = json.loads((calibrated / ESTIMATOR_FILE).read_text())
    (tmp_path / ESTIMATOR_FILE).write_text(json.dumps(spoil_estimator(data, how)))
    with pytest.raises(InputError, match=message) as refused:
        QualityEstimator.from_folder(tmp_path)
    assert str(tmp_path / ESTIMATOR_FILE) in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_scores_are_in_range_deterministic_and_one_per_word(calibrated, engine):
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    translator = Translator.from_folder(calibrated, engine=engine)
    first, again = (translator.translate([*SOURCES[:10], ""], quality=True) for _ in range(2))
    assert first == again
    assert first[-1].quality is None  # a blank source: nothing estimated
    for translation in first[:-1]:
        quality = translation.quality
        assert 0.0 <= quality.score <= 1.0 and 0.0 <= quality.bergamot.score <= 1.0
        assert [word.word for word in quality.words] == translation.text.split()
        assert all(0.0 <= word.probability <= 1.0 for word in quality.words)


@pytest.mark.parametrize("num_beams", [1, 2])
def test_torch_and_ctranslate2_estimate_alike(calibrated, num_beams):
    pytest.importorskip("ctranslate2")
    found = {engine: Translator.from_folder(calibrated, engine=engine).translate(SOURCES[:10], quality=True,
                                                                                  num_beams=num_beams)
             for engine in ("torch", "ctranslate2")}  # fmt: skip
    for ours, theirs in zip(found["torch"], found["ctranslate2"], strict=True):
        if ours.hypotheses[0].ids == theirs.hypotheses[0].ids:
            assert theirs.quality.score == pytest.approx(ours.quality.score, abs=1e-2)


def test_a_folder_without_an_estimator_translates_as_before(folder, capsys, caplog):
    translator = Translator.from_folder(folder)
    assert translator.quality_estimator is None and not (folder / ESTIMATOR_FILE).exists()
    assert all(translation.quality is None for translation in translator.translate(SOURCES[:3]))
    with pytest.raises(InputError, match="no quality estimator"):
        translator.translate(SOURCES[:3], quality=True)
    assert main(["translate", "--model", str(folder), *SOURCES[:3]]) == 0
    assert all("\t" not in line for line in capsys.readouterr().out.splitlines())
    assert main(["translate", "--model", str(folder), "--quality", SOURCES[0]]) == 1
    assert "no quality estimator" in caplog.text and "Traceback" not in caplog.text


@pytest.mark.slow
def test_train_fits_an_estimator_at_its_end_on_the_validation_split(tmp_path, caplog):
    from helpers import TINY_MODEL

    german, english = TINY_CORPUS[0::2], TINY_CORPUS[1::2]  # 36 pairs of two sentences each:
    pairs = [(f"{a} {b}", f"{c} {d}") for a, c in zip(german, english, strict=True)
             for b, d in zip(german, english, strict=True)]  # fmt: skip
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "val", "test"):
        (corpus / f"{split}.de").write_text("\n".join(source for source, _ in pairs) + "\n")
        (corpus / f"{split}.en").write_text("\n".join(target for _, target in pairs) + "\n")
    run = ["train", "--data", str(corpus), "--test_split", "test", "--src-lang", "de", "--tgt-lang", "en",
           "--vocab_size", "120", "--encoder_layers", "1", "--decoder_layers", "1", "--dropout", "0.0",
           "--per_device_train_batch_size", "12", "--learning_rate", "0.01", "--warmup_steps", "0",
           "--generation_num_beams", "2", "--eval_steps", "40", "--save_steps", "40", "--max_steps", "40",
           *TINY_MODEL["d2l_transformer"]]  # fmt: skip
    with caplog.at_level(logging.INFO):
        assert main([*run, "--output-dir", str(tmp_path / "model")]) == 0
    fitted = json.loads((tmp_path / "model" / ESTIMATOR_FILE).read_text())["fitted"]
    assert (fitted["split"], fitted["sentences"], fitted["num_beams"]) == ("validation", 36, 2)
    assert f"quality estimator fitted on 36 validation sentences: Pearson r {fitted['figures']['pearson']:.3f}" in (
        caplog.text
    )
    assert main([*run, "--max_steps", "2", "--output-dir", str(tmp_path / "plain"), "--no_quality_estimator"]) == 0
    assert (tmp_path / "plain" / "model.safetensors").is_file() and not (tmp_path / "plain" / ESTIMATOR_FILE).exists()


def test_calibrate_translate_and_evaluate_from_the_command_line(folder, references, tmp_path, capsys, caplog):
    """calibrate fits on the validation split of a corpus folder and refuses its train and test splits; translate
    --quality writes QUALITY<TAB>TRANSLATION<TAB>TAGS lines and JSON fields; evaluate reports the correlations."""
    model = tmp_path / "model"
    shutil.copytree(folder, model)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "val", "test"):
        (corpus / f"{split}.de").write_text("\n".join(SOURCES) + "\n")
        (corpus / f"{split}.en").write_text("\n".join(references) + "\n")
    data = ["--data", str(corpus), "--test-split", "test"]
    for split in ("test", "train"):  # the model learnt from one, and is judged on the other
        assert main(["calibrate", "--model", str(model), *data, "--split", split]) == 1
        assert f"not the {split} split" in caplog.text
    assert not (model / ESTIMATOR_FILE).exists()
    assert main(["calibrate", "--model", str(model), *data]) == 0
    printed = capsys.readouterr().out
    assert "Pearson r with sentence chrF" in printed and "word MCC" in printed and (model / ESTIMATOR_FILE).is_file()

    assert main(["translate", "--model", str(model), "--quality", *SOURCES[:4]]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [len(fields) for fields in lines] == [3] * 4
    for score, text, tags in lines:
        assert 0.0 <= float(score) <= 1.0
        assert len(tags.split()) == len(text.split()) and set(tags.split()) <= {"OK", "BAD"}

    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in SOURCES[:3]))
    with source.open() as stdin:
        import sys

        sys.stdin, saved = stdin, sys.stdin
        try:
            assert main(["translate", "--model", str(model), "--quality", "--input-format", "jsonl"]) == 0
        finally:
            sys.stdin = saved
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for record in records:
        assert [word["word"] for word in record["quality"]["words"]] == record["translation"].split()
        assert 0.0 <= record["quality"]["score"] <= 1.0 and "bergamot" in record["quality"]

    assert main(["evaluate", "--model", str(model), *data, "--split", "validation"]) == 0
    printed = capsys.readouterr().out
    assert "quality estimates: Pearson r with sentence chrF" in printed and "Bergamot's" in printed


def test_fitting_needs_words_of_both_kinds(folder, references):
    translator = Translator.from_folder(folder)
    samples = labelled_samples(translator, SOURCES, references)
    for sample in samples:
        sample.labels = [False] * len(sample.labels)
    with pytest.raises(ValueError, match="every word"):
        fit_estimator(samples, {})


def test_the_cost_benchmark_alternates_pairs_and_takes_the_median_difference(calibrated, tmp_path, capsys):
    from conftest import load_script

    benchmark = load_script("benchmark_quality_cost")
    calls: list[bool] = []

    def translate(texts: list[str], quality: bool) -> None:
        calls.append(quality)
        if quality:
            gc.collect()  # a full collection, in the rounds with estimates only

    plain, estimated, collections = benchmark.rounds(translate, ["a"], 3)
    assert calls == [False, True, True, False, False, True] and len(plain) == len(estimated) == 3
    assert collections["plain"][0] == 0 and collections["with_estimates"][0] == 3
    assert 0 < collections["with_estimates"][1] <= sum(estimated)
    assert not [callback for callback in gc.callbacks if callback.__name__ == "watch"]  # taken off after
    # differences 0.1, 0.3, 0.1: their median 0.1 over the median time without, 1.1
    assert benchmark.added([1.0, 1.2, 1.1], [1.1, 1.5, 1.2]) == pytest.approx(0.1 / 1.1)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        (corpus / f"{split}.de").write_text("\n".join(SOURCES[:6]) + "\n", encoding="utf-8")
        (corpus / f"{split}.en").write_text("\n".join(SOURCES[:6]) + "\n", encoding="utf-8")
    model = Path(shutil.copytree(calibrated, tmp_path / "model"))
    settings = {"data": str(corpus), "data_path": None, "src_lang": "de", "tgt_lang": "en",
                "test_split": "test_2016_flickr", "d2l_normalize": False}  # fmt: skip
    (model / "translation_data.json").write_text(json.dumps(settings), encoding="utf-8")
    benchmark.main(["--model", str(model), "--num-beams", "1", "--sentences", "4", "--rounds", "2", "--output",
                    str(tmp_path / "times.json")])  # fmt: skip
    times = json.loads((tmp_path / "times.json").read_text(encoding="utf-8"))
    assert len(times["plain"]) == len(times["with_estimates"]) == 2
    assert times["added"] == pytest.approx(benchmark.added(times["plain"], times["with_estimates"]))
    assert set(times["full_collections"]) == {"plain", "with_estimates"}
    out = capsys.readouterr().out
    assert out.startswith("| model | torch | greedy | 4 |") and "full garbage collections: plain " in out
