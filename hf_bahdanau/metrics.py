"""Translation metrics: d2l's sentence BLEU, and corpus sacreBLEU/chrF for `Seq2SeqTrainer`.

`load_metric` loads the `evaluate` module `metric_module/sacrebleu_chrf.py` shipped with this package;
`evaluate` copies it into its modules cache, `$HF_MODULES_CACHE` (default `~/.cache/huggingface/modules`).
"""

from __future__ import annotations

import collections
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import evaluate
import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest
from transformers import EvalPrediction, PreTrainedTokenizerBase

METRIC_MODULE = Path(__file__).resolve().parent / "metric_module" / "sacrebleu_chrf.py"


def bleu(pred_seq: str, label_seq: str, k: int) -> float:
    """d2l's BLEU of one prediction: brevity penalty times n-gram precisions weighted by 0.5 ** n, n = 1..k.

    Tokens are whitespace-separated words. An empty prediction scores 0.
    """
    pred_tokens, label_tokens = pred_seq.split(), label_seq.split()
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    if len_pred == 0:
        return 0.0
    score = math.exp(min(0.0, 1 - len_label / len_pred))
    for n in range(1, min(k, len_pred) + 1):
        label_ngrams = collections.Counter(tuple(label_tokens[i : i + n]) for i in range(len_label - n + 1))
        num_matches = 0
        for i in range(len_pred - n + 1):
            ngram = tuple(pred_tokens[i : i + n])
            if label_ngrams[ngram] > 0:
                num_matches += 1
                label_ngrams[ngram] -= 1
        score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


def repeats_a_phrase(text: str, longest: int = 4, times: int = 2) -> bool:
    """Whether a phrase of 1 to `longest` words comes `times` times in a row, ignoring case and punctuation: twice
    ("on a skateboard on a skateboard") is a stutter, three times or more the mark of a decoder caught in a loop."""
    words = re.findall(r"\w+", text.lower())
    return any(
        all(words[start : start + n] == words[start + k * n : start + (k + 1) * n] for k in range(1, times))
        for n in range(1, longest + 1)
        for start in range(len(words) - times * n + 1)
    )


def count_repeating(texts: Iterable[str], times: int = 2) -> int:
    """How many of `texts` repeat a phrase `times` times in a row (`repeats_a_phrase`)."""
    return sum(repeats_a_phrase(text, times=times) for text in texts)


BOOTSTRAP_SAMPLES = 1000  # sacreBLEU's default for --paired-bs
SIGNIFICANCE_LEVEL = 0.05


@dataclass(frozen=True)
class PairedComparison:
    """One metric of a paired bootstrap test: each system's score, its bootstrap mean and 95% confidence half-width,
    and the p-value of the difference (`baseline` is the first system)."""

    metric: str  # "BLEU", "chrF2"
    signature: str  # the metric's sacreBLEU signature with the test's: "nrefs:1|bs:1000|seed:12345|..."
    baseline: tuple[float, float, float]  # (score, bootstrap mean, 95% CI half-width)
    other: tuple[float, float, float]
    p_value: float
    identical: bool  # both systems translated every sentence the same

    @property
    def significant(self) -> bool:
        return self.p_value < SIGNIFICANCE_LEVEL


def paired_bootstrap(
    baseline: Sequence[str], other: Sequence[str], references: Sequence[str], n_samples: int = BOOTSTRAP_SAMPLES
) -> list[PairedComparison]:
    """sacreBLEU's paired bootstrap resampling test (Koehn 2004; `sacrebleu -i BASELINE OTHER --paired-bs`) of BLEU and
    chrF, `n_samples` resamples with sacreBLEU's seed (`$SACREBLEU_SEED`, 12345 unless set).

    Identical systems get p = 1: sacreBLEU counts resampled differences strictly above the observed one, so for two
    identical systems (every difference 0) it reports 1 / (n_samples + 1), as if they differed significantly.
    """
    if not len(baseline) == len(other) == len(references):
        raise ValueError(
            f"paired test needs one translation per reference: {len(baseline)} and {len(other)} translations, "
            f"{len(references)} references"
        )
    if not references:
        raise ValueError("paired test needs at least one sentence")
    test = PairedTest(
        [("baseline", list(baseline)), ("other", list(other))],
        {"BLEU": BLEU(), "chrF": CHRF()},
        [list(references)],
        test_type="bs",
        n_samples=n_samples,
    )
    signatures, scores = test()
    identical = list(baseline) == list(other)
    return [
        PairedComparison(
            metric=name,
            signature=str(signatures[name]),
            baseline=(float(first.score), float(first.mean), float(first.ci)),
            other=(float(second.score), float(second.mean), float(second.ci)),
            p_value=1.0 if identical else float(second.p_value),
            identical=identical,
        )
        for name, (first, second) in ((name, scores[name]) for name in signatures)
    ]


def load_metric(cache_dir: str | Path | None = None, **kwargs: Any) -> evaluate.EvaluationModule:
    """The sacreBLEU + chrF `evaluate` metric of this package (works offline).

    `cache_dir` is where `evaluate` keeps metric data; it defaults to in-memory computation
    (`keep_in_memory=True`) so nothing is written there. Other keyword arguments go to `evaluate.load`.
    """
    kwargs.setdefault("keep_in_memory", True)
    return evaluate.load(str(METRIC_MODULE), cache_dir=None if cache_dir is None else str(cache_dir), **kwargs)


def make_compute_metrics(
    tokenizer: PreTrainedTokenizerBase, metric: evaluate.EvaluationModule | None = None
) -> Callable[[EvalPrediction], dict[str, float]]:
    """A `Seq2SeqTrainer(compute_metrics=...)` function giving corpus `bleu`, `chrf` and mean `gen_len`.

    It expects generated token ids (`predict_with_generate=True`); -100 padding in predictions and labels is
    replaced by the pad id, and special tokens are skipped when decoding. `gen_len` counts the generated tokens
    other than the decoder start, `</s>` and padding (`<unk>` counts).
    """
    if metric is None:
        metric = load_metric()
    not_counted = np.array([tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id])

    def compute_metrics(eval_pred: EvalPrediction) -> dict[str, float]:
        predictions, labels = eval_pred.predictions, eval_pred.label_ids
        if isinstance(predictions, tuple):  # (generated ids, ...) from some models
            predictions = predictions[0]
        predictions = np.where(predictions == -100, tokenizer.pad_token_id, predictions)  # (batch, gen_len)
        labels = np.where(labels == -100, tokenizer.pad_token_id, labels)  # (batch, label_len)
        pred_texts = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        label_texts = tokenizer.batch_decode(labels, skip_special_tokens=True)
        scores = metric.compute(predictions=pred_texts, references=[[text] for text in label_texts])
        gen_len = float(np.mean(np.count_nonzero(~np.isin(predictions, not_counted), axis=-1)))
        return {"bleu": scores["bleu"], "chrf": scores["chrf"], "gen_len": gen_len}

    return compute_metrics
