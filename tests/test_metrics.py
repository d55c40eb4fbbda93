"""Tests of hf_bahdanau.metrics: d2l's BLEU, the local sacreBLEU/chrF evaluate module, compute_metrics."""

from __future__ import annotations

import ast
import gzip
import math

import evaluate
import numpy as np
import pytest
import sacrebleu
from transformers import EvalPrediction

from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.metrics import (
    METRIC_MODULE,
    bleu,
    count_repeating,
    load_metric,
    make_compute_metrics,
    repeats_a_phrase,
)


def test_bleu_matches_d2l_printed_values():
    # d2l: "go . => va !, bleu 1.000" and "he's calm . => il est paresseux ., bleu 0.658" (k=2).
    assert bleu("va !", "va !", k=2) == 1.0
    assert f"{bleu('il est paresseux .', 'il est calme .', k=2):.3f}" == "0.658"
    # by hand: brevity penalty 1, unigram precision 3/4 (weight 1/2), bigram precision 1/3 (weight 1/4)
    assert bleu("il est paresseux .", "il est calme .", k=2) == pytest.approx(0.75**0.5 * (1 / 3) ** 0.25)


def test_bleu_brevity_penalty_and_clipping():
    assert bleu("il est", "il est calme .", k=2) == pytest.approx(math.exp(1 - 4 / 2))
    # "le" matches at most twice (clipped counts): unigram precision 2/4; no bigram matches
    assert bleu("le le le le", "le chat le chien", k=1) == pytest.approx(0.5**0.5)
    assert bleu("le le le le", "le chat le chien", k=2) == 0.0
    assert bleu("", "le chat", k=2) == 0.0


@pytest.fixture(scope="module")
def metric(tmp_path_factory):
    """The local module, copied into a temporary modules cache, never the user's home."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evaluate.config, "HF_MODULES_CACHE", tmp_path_factory.mktemp("modules"))
        patch.setenv("HF_MODULES_CACHE", str(evaluate.config.HF_MODULES_CACHE))
        yield load_metric(cache_dir=tmp_path_factory.mktemp("evaluate"))


@pytest.fixture(scope="module")
def references(multi30k_dir) -> list[str]:
    with gzip.open(multi30k_dir / "val.de.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f.read().splitlines()[:40]]


def _perturb(sentences: list[str]) -> list[str]:
    """Drop every third sentence's last word, swap the first two words of every other, keep the rest."""
    out = []
    for i, sentence in enumerate(sentences):
        words = sentence.split()
        if i % 3 == 0:
            words = words[:-1]
        elif i % 2 == 0:
            words[0], words[1] = words[1], words[0]
        out.append(" ".join(words))
    return out


def test_module_equals_sacrebleu(metric, references):
    predictions = _perturb(references)
    result = metric.compute(predictions=predictions, references=references)
    expected_bleu = sacrebleu.corpus_bleu(predictions, [references])
    expected_chrf = sacrebleu.corpus_chrf(predictions, [references])
    assert 0 < result["bleu"] < 100
    assert result["bleu"] == pytest.approx(expected_bleu.score)
    assert result["chrf"] == pytest.approx(expected_chrf.score)
    assert result["counts"] == expected_bleu.counts
    assert result["precisions"] == pytest.approx(expected_bleu.precisions)
    assert (result["bp"], result["sys_len"], result["ref_len"]) == (
        expected_bleu.bp,
        expected_bleu.sys_len,
        expected_bleu.ref_len,
    )
    assert result["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert result["chrf_signature"].startswith("nrefs:1|case:mixed")


def test_module_multiple_references(metric, references):
    predictions, second = _perturb(references[:20]), references[20:40]
    result = metric.compute(
        predictions=predictions, references=[[a, b] for a, b in zip(references[:20], second, strict=True)]
    )
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(predictions, [references[:20], second]).score)
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(predictions, [references[:20], second]).score)
    assert result["bleu_signature"].startswith("nrefs:2")
    with pytest.raises(ValueError, match="same number of references"):
        metric.compute(predictions=["a", "b"], references=[["a"], ["b", "c"]])


def test_module_is_standalone():
    tree = ast.parse(METRIC_MODULE.read_text("utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not any(name.startswith("hf_bahdanau") for name in imported)
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert len(classes) == 1


def test_compute_metrics_decodes_ids(metric, references):
    tokenizer = train_tokenizer(references, 300, min_freq=1)
    predictions = _perturb(references[:6])
    pred_ids = tokenizer(predictions)["input_ids"]
    label_ids = tokenizer(references[:6])["input_ids"]
    width = max(map(len, pred_ids + label_ids))
    # generate() pads predictions with pad; the collator pads labels with -100. (batch, width)
    start, pad = tokenizer.bos_token_id, tokenizer.pad_token_id
    assert (start, pad) == (1, 0)
    preds = np.array([[start] + ids + [pad] * (width - len(ids)) for ids in pred_ids])  # leading decoder start
    preds[0, -1] = -100
    labels = np.array([ids + [-100] * (width + 1 - len(ids)) for ids in label_ids])
    scores = make_compute_metrics(tokenizer, metric)(EvalPrediction(predictions=preds, label_ids=labels))
    by_hand = sacrebleu.corpus_bleu(predictions, [references[:6]])
    assert scores["bleu"] == pytest.approx(by_hand.score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(predictions, [references[:6]]).score)
    # the generated words, without the decoder start, </s> and padding
    assert scores["gen_len"] == pytest.approx(np.mean([len(ids) - 1 for ids in pred_ids]))


def test_repeating_phrases_are_the_mark_of_a_looping_decoder():
    looping = ["A man on a skateboard on a skateboard.", "Two dogs dogs run.", "In the air, in the air!"]
    fine = ["A dog runs after a dog.", "Two men are working.", "", "Bye."]
    assert [repeats_a_phrase(text) for text in looping + fine] == [True] * 3 + [False] * 4
    assert not repeats_a_phrase("a b c d e a b c d e") and repeats_a_phrase("a b c d e a b c d e", longest=5)
    assert count_repeating(looping + fine) == 3
    # three times in a row: a runaway loop, not a stutter
    runaway = ["on a skateboard on a skateboard on a skateboard", "tiny tiny tiny", "Hot, hot, HOT air."]
    assert [repeats_a_phrase(text, times=3) for text in runaway + looping] == [True] * 3 + [False] * 3
    assert count_repeating(runaway + looping + fine, times=3) == 3
    assert not repeats_a_phrase("a b a b a", times=3) and repeats_a_phrase("a b a b a b", times=3)
