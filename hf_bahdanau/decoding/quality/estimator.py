"""Quality estimates: how good a translation is likely to be, per sentence and per word, from the model's own view of
it (`quality_features`), with no reference.

A `QualityEstimator` holds two small models fitted by `calibration` on the model's translations of held-out data:
ours (a logistic regression per word on `WORD_FEATURES`, the probability that a word is OK, and a linear regression
per sentence on `SENTENCE_FEATURES` and the mean of its words' probabilities, which predicts the sentence's chrF / 100)
and Bergamot's (browsermt/quality-estimation: a logistic regression on its four word features, the sentence score the
mean of its words'), the baseline every figure is compared with. Both are saved in the model folder as
`quality_estimator.json` (`ESTIMATOR_FILE`): feature names, means, scales, weights, the word threshold, and how and
on what data they were fitted, with their figures.

Labels (`word_labels`, `sentence_chrf`): a word of a translation is OK when it is in a longest common subsequence
of the translation's and the reference's words (the most words matched in order), compared lower-cased with the
punctuation at their ends stripped; else BAD. A sentence's label is its sentence chrF (sacreBLEU's).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from hf_bahdanau.errors import InputError, as_input_error
from hf_bahdanau.json_files import read_json

from .features import BERGAMOT_FEATURES, SENTENCE_FEATURES, WORD_FEATURES, Evidence
from .features import sentence_features as sentence_rows
from .features import word_features as word_rows

ESTIMATOR_FILE = "quality_estimator.json"
T = TypeVar("T")
FORMAT = 1


@dataclass
class WordQuality:
    """One word of a translation: its text, the probability that it is OK, and the verdict (`ok`: probability at or
    above the estimator's threshold)."""

    word: str
    probability: float
    ok: bool


@dataclass
class QualityEstimate:
    """The estimate of one translation: `score` in [0, 1] (ours: its predicted chrF / 100; Bergamot's: the mean of
    its word probabilities); of each word of its text (whitespace-separated) its `texts`, the `probabilities` that
    it is OK and the verdicts `ok`, one `WordQuality` a word as `words`; `bergamot`: Bergamot's estimate of the same
    translation, the baseline. The words are kept as three lists, not an object each: cheap to keep by the thousand."""

    score: float
    texts: list[str] = field(default_factory=list)
    probabilities: list[float] = field(default_factory=list)
    ok: list[bool] = field(default_factory=list)
    bergamot: QualityEstimate | None = None

    @property
    def words(self) -> list[WordQuality]:
        """The words in order, each its text, probability and verdict."""
        return [WordQuality(*word) for word in zip(self.texts, self.probabilities, self.ok, strict=True)]

    def as_dict(self) -> dict[str, Any]:
        """The estimate as JSON (rounded): `{"score", "words": [{"word", "probability", "ok"}], "bergamot": score}`."""
        words = [{"word": text, "probability": round(probability, 4), "ok": ok}
                 for text, probability, ok in zip(self.texts, self.probabilities, self.ok, strict=True)]  # fmt: skip
        found: dict[str, Any] = {"score": round(self.score, 4), "words": words}
        if self.bergamot is not None:
            found["bergamot"] = round(self.bergamot.score, 4)
        return found


@dataclass
class Linear:
    """A linear model on standardized features: `bias + weights . (x - mean) / scale`; `logistic`: through the
    sigmoid (a probability)."""

    features: list[str]
    mean: list[float]
    scale: list[float]
    weights: list[float]
    bias: float
    logistic: bool

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """`(n,)` of `rows` `(n, features)`."""
        z = self.bias + ((rows - np.array(self.mean)) / np.array(self.scale)) @ np.array(self.weights)
        return 1.0 / (1.0 + np.exp(-z)) if self.logistic else z

    @classmethod
    def fit(cls, features: Sequence[str], rows: np.ndarray, targets: np.ndarray, logistic: bool) -> Linear:
        """Least squares (`logistic=False`) or a logistic regression (L2 0.01, Newton's method) of `targets` on
        `rows` `(n, features)`, the features standardized first."""
        mean, scale = rows.mean(0), rows.std(0)
        scale[scale < 1e-9] = 1.0
        x = np.hstack([np.ones((len(rows), 1)), (rows - mean) / scale])  # (n, 1 + features)
        ridge = 0.01 * np.eye(x.shape[1])
        ridge[0, 0] = 0.0
        if logistic:
            w = np.zeros(x.shape[1])
            for _ in range(50):
                p = 1.0 / (1.0 + np.exp(-x @ w))
                gradient = x.T @ (p - targets) + ridge @ w * len(x) / 100
                hessian = (x * (p * (1 - p))[:, None]).T @ x + ridge * len(x) / 100
                step = np.linalg.solve(hessian, gradient)
                w -= step
                if np.abs(step).max() < 1e-8:
                    break
        else:
            w = np.linalg.solve(x.T @ x + ridge * len(x) / 100, x.T @ targets)
        return cls(list(features), mean.tolist(), scale.tolist(), w[1:].tolist(), float(w[0]), logistic)


@dataclass
class WordModel:
    """Words' probability of being OK (`model`), and the `threshold` at or above which a word is OK."""

    model: Linear
    threshold: float


@dataclass
class QualityEstimator:
    """Ours (`words`, `sentences`) and Bergamot's (`bergamot`) estimators, with `fitted`: how, on what data and with
    what figures they were made (`calibration`)."""

    words: WordModel
    sentences: Linear
    bergamot: WordModel
    fitted: dict[str, Any] = field(default_factory=dict)

    def estimate(self, evidence: Evidence, source_tokens: int) -> QualityEstimate:
        """The estimate of one translation from its `evidence` (`source_tokens`: its source's length, `</s>`
        included)."""
        return self.estimates([evidence], [source_tokens])[0]

    def estimates(self, evidence: Sequence[Evidence], source_tokens: Sequence[int]) -> list[QualityEstimate]:
        """`estimate` of each translation, all their words through each word model at once."""
        words = word_rows(evidence)  # (all words, WORD_FEATURES)
        ends = np.cumsum([len(found.words) for found in evidence])[:-1]
        ok = np.split(self.words.model(words), ends)  # each translation's (words,)
        baseline = np.split(self.bergamot.model(words[:, : len(BERGAMOT_FEATURES)]), ends)
        spoken = [k for k, found in enumerate(evidence) if found.words]  # nothing translated: nothing to vouch for
        rows = sentence_rows([evidence[k] for k in spoken], [source_tokens[k] for k in spoken])
        sentences = np.column_stack([rows, [ok[k].mean() for k in spoken]])  # (spoken, SENTENCE_FEATURES + 1)
        scores = np.clip(self.sentences(sentences), 0.0, 1.0).tolist() if spoken else []
        found = [QualityEstimate(0.0, bergamot=QualityEstimate(0.0)) for _ in evidence]
        for k, score in zip(spoken, scores, strict=True):
            texts = list(evidence[k].word_texts)
            bergamot = QualityEstimate(float(baseline[k].mean()), texts, *_verdicts(baseline[k], self.bergamot))
            found[k] = QualityEstimate(score, texts, *_verdicts(ok[k], self.words), bergamot)
        return found

    def attach(
        self, translations: list[T], evidence: Sequence[Evidence | None], source_tokens: Sequence[int]
    ) -> list[T]:
        """`translations` (the Translator's) each with the estimate of its best hypothesis as `quality`, from its
        `evidence` (None: left as it is) and its source's length."""
        given = [k for k, found in enumerate(evidence) if found is not None]
        made = self.estimates([evidence[k] for k in given], [source_tokens[k] for k in given])
        found = list(translations)
        for k, estimate in zip(given, made, strict=True):
            found[k] = replace(found[k], quality=estimate)
        return found

    def save(self, folder: str | os.PathLike) -> Path:
        """Write `quality_estimator.json` into `folder`; returns its path."""
        path = Path(folder) / ESTIMATOR_FILE
        path.write_text(json.dumps({"format": FORMAT, **asdict(self)}, indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> QualityEstimator:
        """The estimator of a `quality_estimator.json` (a one-line InputError for one this package cannot read)."""
        with as_input_error(OSError, ValueError):
            data = read_json(path)
            if data.get("format") != FORMAT:
                raise ValueError(f"{path}: format {data.get('format')!r}, not this version's {FORMAT}: run calibrate")
            try:
                estimator = cls(_word_model(data["words"]), Linear(**data["sentences"]),
                                _word_model(data["bergamot"]), data.get("fitted", {}))  # fmt: skip
            except (KeyError, TypeError, ValueError) as error:
                raise ValueError(f"{path} is not a whole quality estimator ({error!r}): run calibrate") from error
            linears = (estimator.words.model, estimator.sentences, estimator.bergamot.model)
            names = [linear.features for linear in linears]
            if names != [list(WORD_FEATURES), [*SENTENCE_FEATURES, "mean_ok"], list(BERGAMOT_FEATURES)]:
                raise ValueError(f"{path} was fitted on other features than this package computes: run calibrate")
            if any(not len(lin.features) == len(lin.mean) == len(lin.scale) == len(lin.weights) for lin in linears):
                raise ValueError(f"{path}: a model's weights do not match its features: run calibrate")
            return estimator

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> QualityEstimator | None:
        """The estimator saved in the model folder `folder`, or None where it has none."""
        path = Path(folder) / ESTIMATOR_FILE
        return cls.from_file(path) if path.is_file() else None


def _verdicts(probabilities: np.ndarray, model: WordModel) -> tuple[list[float], list[bool]]:
    """Words' `probabilities` `(words,)` of being OK, and whether each is (at or above `model`'s threshold)."""
    return probabilities.tolist(), (probabilities >= model.threshold).tolist()


def _word_model(data: dict[str, Any]) -> WordModel:
    return WordModel(Linear(**data["model"]), float(data["threshold"]))


def joined_estimate(estimates: Sequence[QualityEstimate | None]) -> QualityEstimate | None:
    """The estimate of sentences translated as one text (a document): its words the sentences' in order, its score
    the mean of their scores weighted by their words (None where no sentence has an estimate)."""
    found = [estimate for estimate in estimates if estimate is not None]
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    weights = [max(len(estimate.texts), 1) for estimate in found]

    def mean(scores: list[float]) -> float:
        return sum(score * weight for score, weight in zip(scores, weights, strict=True)) / sum(weights)

    def joined(parts: Sequence[QualityEstimate], bergamot: QualityEstimate | None = None) -> QualityEstimate:
        texts = [text for part in parts for text in part.texts]
        probabilities = [probability for part in parts for probability in part.probabilities]
        ok = [verdict for part in parts for verdict in part.ok]
        return QualityEstimate(mean([part.score for part in parts]), texts, probabilities, ok, bergamot)

    bergamot = [estimate.bergamot for estimate in found if estimate.bergamot is not None]
    return joined(found, joined(bergamot) if len(bergamot) == len(found) else None)


def require_estimator(estimator: QualityEstimator | None, engine: str) -> QualityEstimator:
    """`estimator` for a Translator's `engine`, or a one-line InputError: none (how to make one), or an engine that
    gives no evidence (ONNX Runtime)."""
    if engine not in ("torch", "ctranslate2"):
        raise InputError(f"quality estimates need the torch or ctranslate2 engine, not {engine}")
    if estimator is None:
        raise InputError(f"the model has no quality estimator ({ESTIMATOR_FILE}): make one with hf-bahdanau calibrate")
    return estimator


# ---- labels and figures ----------------------------------------------------------------------------------------


def _plain(word: str) -> str:
    return word.strip(".,;:!?\"'()[]«»„“”‘’-").lower()


def word_labels(words: Sequence[str], reference: str) -> list[bool]:
    """Whether each word of a translation is OK: in a longest common subsequence of the translation's and the
    reference's words (the most words matched in order: an edit alignment of insertions and deletions, TER without
    its shifts), words compared lower-cased with the punctuation at their ends stripped."""
    hypothesis, target = [_plain(word) for word in words], [_plain(word) for word in reference.split()]
    rows, columns = len(hypothesis), len(target)
    common = np.zeros((rows + 1, columns + 1), dtype=np.int64)  # common[i, j]: LCS of the first i and j words
    for i in range(1, rows + 1):
        for j in range(1, columns + 1):
            if hypothesis[i - 1] == target[j - 1]:
                common[i, j] = common[i - 1, j - 1] + 1
            else:
                common[i, j] = max(common[i - 1, j], common[i, j - 1])
    ok = [False] * rows
    i, j = rows, columns
    while i > 0 and j > 0:
        if hypothesis[i - 1] == target[j - 1]:
            ok[i - 1] = True
            i, j = i - 1, j - 1
        elif common[i - 1, j] >= common[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return ok


def sentence_chrf(hypothesis: str, reference: str) -> float:
    """sacreBLEU's sentence chrF of `hypothesis` against `reference` (0 to 100)."""
    from sacrebleu import sentence_chrf as chrf

    return float(chrf(hypothesis, [reference]).score)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r of `x` and `y` (0 where either is constant)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.std() == 0 or y.std() == 0:
        return 0.0
    return float(np.corrcoef(x, y)[0, 1])


def mcc(predicted: Sequence[bool], actual: Sequence[bool]) -> float:
    """Matthews' correlation coefficient of OK/BAD verdicts (0 where a margin is empty)."""
    p, a = np.asarray(predicted, dtype=bool), np.asarray(actual, dtype=bool)
    tp, tn = float((p & a).sum()), float((~p & ~a).sum())
    fp, fn = float((p & ~a).sum()), float((~p & a).sum())
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if denominator == 0 else (tp * tn - fp * fn) / denominator


__all__ = [
    "ESTIMATOR_FILE", "Linear", "QualityEstimate", "QualityEstimator", "WordModel", "WordQuality", "joined_estimate",
    "mcc", "pearson",
    "require_estimator", "sentence_chrf", "word_labels",
]  # fmt: skip
