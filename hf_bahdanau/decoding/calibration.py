"""Calibration: fit a model's quality estimators (`quality`) on its own translations of held-out data, and measure
how well an estimator's scores follow the translations' quality (`figures`).

    translator = Translator.from_folder("runs/quick-de-en")
    samples = labelled_samples(translator, sources, references, num_beams=5)   # the validation split, never a test set
    estimator = fit_estimator(samples, {"data": "multi30k", "split": "validation"})
    estimator.save("runs/quick-de-en")

Both estimators are fitted on the same samples: ours (word logistic regression, sentence least squares) and
Bergamot's (logistic regression on its four word features); each word threshold is the one with the best MCC on them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .quality.estimator import (
    Linear,
    QualityEstimate,
    QualityEstimator,
    WordModel,
    mcc,
    pearson,
    sentence_chrf,
    word_labels,
)
from .quality.features import BERGAMOT_FEATURES, SENTENCE_FEATURES, WORD_FEATURES, Evidence
from .quality.features import sentence_features as sentence_rows
from .quality.features import word_features as word_rows

if TYPE_CHECKING:
    from .translator import Translation, Translator


FEWEST = 20  # translations an estimator is fitted on, at the least


@dataclass
class Sample:
    """One translation with what the estimators learn from: its evidence, its source's length, its word labels
    (OK: True) and its sentence chrF against the reference."""

    evidence: Evidence
    source_tokens: int
    labels: list[bool]
    chrf: float


def labelled_samples(
    translator: Any, sources: Sequence[str], references: Sequence[str], **options: Any
) -> list[Sample]:
    """Translate `sources` (`Translator.translate`'s `options`) and label each translation against its reference;
    blank sources and empty translations are left out."""
    translations = translator.translate(sources, **options)
    evidence = translator.evidence(sources, translations)
    lengths = [len(ids) for ids in translator.source_ids(sources)]
    samples = []
    for found, length, translation, reference in zip(evidence, lengths, translations, references, strict=True):
        if found is not None and found.words:
            chrf = sentence_chrf(translation.text, reference)
            samples.append(Sample(found, length, word_labels(found.word_texts, reference), chrf))
    return samples


def _best_threshold(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """The threshold (a probability at or above which a word is OK) with the best MCC on `labels`."""
    candidates = np.unique(np.quantile(probabilities, np.linspace(0.02, 0.98, 97)))
    return float(max(candidates, key=lambda threshold: mcc(probabilities >= threshold, labels)))


def _word_model(features: Sequence[str], rows: np.ndarray, labels: np.ndarray) -> WordModel:
    model = Linear.fit(features, rows, labels.astype(float), logistic=True)
    return WordModel(model, _best_threshold(model(rows), labels))


def fit_estimator(samples: Sequence[Sample], data: dict[str, Any]) -> QualityEstimator:
    """Ours and Bergamot's estimators fitted on `samples`; `data` (what they are: corpus, split, decoding) is
    recorded in the estimator with its figures on them."""
    if len(samples) < FEWEST:
        raise ValueError(f"{len(samples)} translations are too few to fit a quality estimator: at least {FEWEST}")
    evidence = [sample.evidence for sample in samples]
    words = word_rows(evidence)  # (words, WORD_FEATURES)
    labels = np.array([label for sample in samples for label in sample.labels])  # (words,)
    if labels.all() or not labels.any():
        raise ValueError(f"every word of the {len(samples)} translations is {'OK' if labels.all() else 'BAD'}: "
                         "nothing to tell apart, no quality estimator fitted")  # fmt: skip
    ours = _word_model(WORD_FEATURES, words, labels)
    bergamot = _word_model(BERGAMOT_FEATURES, words[:, : len(BERGAMOT_FEATURES)], labels)
    ends = np.cumsum([len(each.words) for each in evidence])[:-1]
    mean_ok = [each.mean() for each in np.split(ours.model(words), ends)]
    sentence = np.column_stack([sentence_rows(evidence, [sample.source_tokens for sample in samples]), mean_ok])
    chrf = np.array([sample.chrf / 100 for sample in samples])
    sentences = Linear.fit([*SENTENCE_FEATURES, "mean_ok"], sentence, chrf, logistic=False)
    fitted = {"method": "word: logistic regression (L2 0.01, Newton), threshold of best MCC; sentence: least squares "
              "on the sentence features and the mean word probability, predicting chrF / 100; Bergamot's: logistic "
              "regression on its four word features, the sentence score the mean of its words'",
              "labels": "word OK when in a longest common subsequence with the reference's words; sentence chrF",
              "sentences": len(samples), "words": len(labels), "ok_words": round(float(labels.mean()), 4),
              **data}  # fmt: skip
    estimator = QualityEstimator(ours, sentences, bergamot, fitted)
    estimator.fitted["figures"] = figures(estimator, samples)
    return estimator


def calibrate(
    translator: Translator,
    folder: str | os.PathLike,
    sources: Sequence[str],
    references: Sequence[str],
    data: dict[str, Any],
    **options: Any,
) -> QualityEstimator:
    """Translate `sources` (held-out data: never a test set) with `translator` (`Translator.translate`'s
    `options`), fit both estimators on the translations against `references`, and save them in `folder` (the
    model's); `data` says what the pairs are (corpus, split), recorded with the decoding and figures."""
    samples = labelled_samples(translator, sources, references, **options)
    decoding = {
        "engine": translator.engine,
        "num_beams": options.get("num_beams") or translator.generation_config.num_beams,
    }
    estimator = fit_estimator(samples, {**data, **decoding})
    estimator.save(folder)
    return estimator


def figures(estimator: QualityEstimator, samples: Sequence[Sample]) -> dict[str, float]:
    """How well the estimator follows `samples`' quality (`scored`)."""
    estimates = estimator.estimates([each.evidence for each in samples], [each.source_tokens for each in samples])
    return scored(estimates, [sample.chrf for sample in samples], [sample.labels for sample in samples])


def scored(
    estimates: Sequence[QualityEstimate], chrf: Sequence[float], labels: Sequence[list[bool]]
) -> dict[str, float]:
    """Pearson r of the sentence scores of `estimates` with sentence `chrf`, and MCC of their word verdicts with the
    word `labels` (one list a sentence), ours and Bergamot's."""
    flat = [label for sentence in labels for label in sentence]
    baseline = [estimate.bergamot for estimate in estimates]
    return {
        "pearson": round(pearson([estimate.score for estimate in estimates], chrf), 4),
        "bergamot_pearson": round(pearson([estimate.score for estimate in baseline], chrf), 4),
        "mcc": round(mcc([ok for estimate in estimates for ok in estimate.ok], flat), 4),
        "bergamot_mcc": round(mcc([ok for estimate in baseline for ok in estimate.ok], flat), 4),
        "sentences": len(estimates),
        "words": len(flat),
    }


def estimate_figures(translations: Sequence[Translation], references: Sequence[str]) -> dict[str, float]:
    """`scored` of `translations` made with `quality=True` against their `references` (those without an estimate,
    blank sources, left out)."""
    pairs = [(translation, reference) for translation, reference in zip(translations, references, strict=True)
             if translation.quality is not None and translation.quality.texts]  # fmt: skip
    estimates = [translation.quality for translation, _ in pairs]
    chrf = [sentence_chrf(translation.text, reference) for translation, reference in pairs]
    labels = [word_labels(translation.quality.texts, reference) for translation, reference in pairs]
    return scored(estimates, chrf, labels)


__all__ = [
    "FEWEST",
    "Sample",
    "calibrate",
    "estimate_figures",
    "figures",
    "fit_estimator",
    "labelled_samples",
    "scored",
]
