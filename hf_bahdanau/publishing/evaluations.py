"""The evaluation records of a model folder (`eval_results.json`), which `hf-bahdanau evaluate` writes and cards
read."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json

logger = logging.getLogger(__name__)

EVAL_RESULTS_FILE = "eval_results.json"  # written by `hf-bahdanau evaluate`
# The scores of an evaluation as the card's model-index names them: (key in eval_results.json, name).
SCORE_NAMES = (("bleu", "BLEU"), ("bleu_lowercase", "BLEU lowercased"), ("chrf", "chrF"))


def dataset_label(data: str) -> str:
    """How cards and `eval_results.json` name a corpus: a file or folder by its name (no local path), else as is."""
    return Path(data).name if Path(data).exists() else data


# The fields of a stored evaluation that cards and `record_evaluation` read, with their types.
_RESULT_FIELDS = {"dataset": str, "split": str, "source_language": str, "target_language": str, "num_beams": int,
                  "bleu": (int, float), "bleu_signature": str, "chrf": (int, float), "chrf_signature": str}  # fmt: skip


def read_evaluations(folder: str | Path) -> list[dict[str, Any]]:
    """The scores `hf-bahdanau evaluate` stored in `folder` (empty when never evaluated); an InputError naming the
    file when it does not hold them as `record_evaluation` writes them."""
    path = Path(folder) / EVAL_RESULTS_FILE
    if not path.is_file():
        return []
    results = read_json(path).get("results")
    if not isinstance(results, list) or not all(
        isinstance(result, dict) and all(isinstance(result.get(name), kind) for name, kind in _RESULT_FIELDS.items())
        for result in results
    ):
        raise InputError(f"{path} does not hold evaluation results as evaluate writes them: fix or remove it")
    return results


def decoding_name(num_beams: int) -> str:
    """How an evaluation decoded: "greedy" or "beam N"."""
    return "greedy" if num_beams == 1 else f"beam {num_beams}"


def record_evaluation(
    folder: str | Path,
    scores: dict[str, Any],
    *,
    data: str,
    split: str,
    languages: tuple[str, str],
    num_beams: int,
    samples: int,
) -> Path:
    """Store sacreBLEU and chrF (2 decimals, as sacreBLEU prints them) with their signatures in `eval_results.json`,
    and the lowercased BLEU with its signature when `scores` has it.

    A new result replaces the one of the same corpus, split, languages and beams; the others are kept (so a greedy
    evaluation does not replace the beam-search one).
    """
    result = {
        "dataset": dataset_label(data),
        "split": split,
        "source_language": languages[0],
        "target_language": languages[1],
        "num_beams": num_beams,
        "samples": samples,
        "bleu": round(float(scores["bleu"]), 2),
        "bleu_signature": scores["bleu_signature"],
        "chrf": round(float(scores["chrf"]), 2),
        "chrf_signature": scores["chrf_signature"],
    }
    if "bleu_lowercase" in scores:  # lowercased BLEU, as Joey NMT reports it
        result["bleu_lowercase"] = round(float(scores["bleu_lowercase"]), 2)
        result["bleu_lowercase_signature"] = scores["bleu_lowercase_signature"]
    key = ("dataset", "split", "source_language", "target_language", "num_beams")
    kept = [old for old in read_evaluations(folder) if any(old[name] != result[name] for name in key)]
    path = Path(folder) / EVAL_RESULTS_FILE
    path.write_text(json.dumps({"results": [*kept, result]}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    logger.info("scores stored in %s", path)
    return path
