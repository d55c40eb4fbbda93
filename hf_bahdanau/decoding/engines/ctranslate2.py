"""Translate with a CTranslate2 export (`decoding/export.py` writes it): the `--engine ctranslate2` engine.

`CTranslate2Translator` answers like the translation pipeline, `[{"translation_text": ...}]`, or with scored n-best
lists (`hypotheses`), and maps `generate()` options onto CTranslate2's `translate_batch` options. A hypothesis's
score is the torch engine's: its mean token log-probability, `</s>` included (CTranslate2 divides the sum by the
length to the power `length_penalty`). It reads the export's config, generation config and tokenizer as data
(`folder_data`): translating with it imports neither torch nor transformers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hf_bahdanau.choices import EXPORT_INFO
from hf_bahdanau.decoding.export.ctranslate2 import cached_export, is_ctranslate2_folder, require_ctranslate2
from hf_bahdanau.decoding.export.folders import check_tokenizer_file
from hf_bahdanau.decoding.folder_data import Settings, read_tokenizer
from hf_bahdanau.decoding.quality.features import Evidence, evidence_for
from hf_bahdanau.decoding.sources import source_ids
from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json
from hf_bahdanau.models.source_length import source_limit

# generate() option -> translate_batch() option
_OPTIONS = {
    "num_beams": "beam_size",
    "length_penalty": "length_penalty",
    "num_return_sequences": "num_hypotheses",
    "no_repeat_ngram_size": "no_repeat_ngram_size",
    "repetition_penalty": "repetition_penalty",
}


@dataclass(frozen=True)
class ScoredHypothesis:
    """One translation of a source by CTranslate2: its text, score (the mean token log-probability, `</s>` included;
    None for a blank source), token ids (`</s>` included where the translation ended) and, when asked for, the
    search's attention `(tokens, source tokens)` of each of them (the last layer's first head; None where not asked
    for, or where `</s>` was added after the search) and, from a plain greedy search, each token's `log_probs`."""

    text: str
    score: float | None
    ids: list[int] = field(default_factory=list)
    attention: np.ndarray | None = None
    log_probs: list[float] | None = None


class CTranslate2Translator:
    """Translate with a CTranslate2 export, as the translation pipeline does: `translator(texts, num_beams=5)`.

    `compute_type`: CTranslate2's ("default": as stored; "int8" quantizes float32 weights on load). `threads`:
    CPU threads for one batch (0: CTranslate2's default). `config` and `generation_config` are the exported
    model's (`Settings`); call options override the generation config.
    """

    def __init__(
        self, folder: str | os.PathLike, device: str = "cpu", compute_type: str = "default", threads: int = 0
    ) -> None:
        ct2 = require_ctranslate2()
        self.folder = Path(folder)
        if not is_ctranslate2_folder(self.folder):
            raise InputError(f"{self.folder} is no CTranslate2 export of this package (no model.bin or {EXPORT_INFO})")
        check_tokenizer_file(self.folder)
        info = read_json(self.folder / EXPORT_INFO)
        self.config = Settings(info["model_config"])
        self.quantization = info["quantization"]
        self.generation_config = Settings(read_json(self.folder / "generation_config.json"))
        self.tokenizer = read_tokenizer(self.folder)
        self.translator = ct2.Translator(
            str(self.folder), device=device, compute_type=compute_type, inter_threads=1, intra_threads=threads
        )

    @classmethod
    def from_model(
        cls, model_dir: str | os.PathLike, quantization: str | None = None, **kwargs: Any
    ) -> CTranslate2Translator:
        """A translator for an export (run as stored, or computing in `quantization`), or for a model folder
        through its export cached in the folder (`cached_export`, float32 unless `quantization`)."""
        if is_ctranslate2_folder(model_dir):
            return cls(model_dir, compute_type=quantization or "default", **kwargs)
        return cls(cached_export(model_dir, quantization or "float32"), **kwargs)

    def options(self, **overrides: Any) -> dict[str, Any]:
        """`translate_batch` options from the generation config and `overrides` (`generate()` names)."""
        taken = (*_OPTIONS, "max_new_tokens", "min_new_tokens", "early_stopping")
        settings = {name: getattr(self.generation_config, name, None) for name in taken}
        settings.update({name: value for name, value in overrides.items() if value is not None})
        unknown = sorted(set(settings) - set(taken))
        if unknown:
            raise InputError(f"the CTranslate2 engine does not take {', '.join(unknown)}")
        options = {_OPTIONS[name]: settings[name] for name in _OPTIONS if settings.get(name) is not None}
        longest = settings.get("max_new_tokens") or self.generation_config.max_length - 1
        # Decoder position i holds the token fed at step i: the table bounds how many tokens can be made.
        options["max_decoding_length"] = min(longest, self.config.max_position_embeddings)
        options["min_decoding_length"] = settings.get("min_new_tokens") or 0  # CTranslate2's 1 would forbid ""
        # CTranslate2 ends a search once beam_size * patience hypotheses have finished; generate()'s default
        # (early_stopping=False) searches on while a live beam could still win. Patience 2 gave generate()'s beam-5
        # output on 995 of test_2016_flickr's 1,000 sentences (patience 1: 980; docs/benchmarks.md).
        options["patience"] = 1 if settings.get("early_stopping") is True else 2
        return options

    def source_tokens(self, text: str) -> list[str]:
        """The source's token strings, `</s>` included, cut to the model's limit as the pipeline cuts it."""
        ids = source_ids(self.tokenizer, [text], source_limit(self.config, self.tokenizer))[0]
        return self.tokenizer.convert_ids_to_tokens(ids) if ids else []

    def __call__(
        self,
        texts: str | Sequence[str],
        batch_size: int = 32,
        prefixes: Sequence[list[str]] | None = None,
        suppress: list[list[str]] | None = None,
        **options: Any,
    ) -> list[dict[str, str]] | list[list[dict[str, str]]]:
        """Translations as the pipeline gives them: a string -> `[{"translation_text": ...}]`; a list -> one dict
        per text (a list of dicts per text with `num_return_sequences` > 1). Empty texts translate to "".
        `prefixes`: the target tokens each translation starts with (one list per text); `suppress`: token
        sequences no translation may contain."""
        single = isinstance(texts, str)
        found = self.hypotheses([texts] if single else texts, batch_size, prefixes, suppress, **options)
        outputs = [[{"translation_text": hypothesis.text} for hypothesis in hypotheses] for hypotheses in found]
        if single:
            return outputs[0]
        per_input = self.options(**options).get("num_hypotheses", 1)
        return [output[0] for output in outputs] if per_input == 1 else outputs

    def hypotheses(
        self,
        texts: Sequence[str],
        batch_size: int = 32,
        prefixes: Sequence[list[str]] | None = None,
        suppress: list[list[str]] | None = None,
        end_at_limit: bool = False,
        attention: bool = False,
        source_ids: Sequence[list[int]] | None = None,
        **options: Any,
    ) -> list[list[ScoredHypothesis]]:
        """The `num_return_sequences` best translations of each text, best first, scored (`__call__`'s options).
        `end_at_limit`: a translation stopped by `max_new_tokens` gets `</s>` after it, scored with it (the torch
        engine's length bound, whose last token is a forced `</s>`). `attention`: each keeps the search's attention
        and, from a plain greedy search (`plain_greedy`), its tokens' log-probabilities. `source_ids`: the texts'
        token ids where already made (`source_tokens`' ids)."""
        texts = list(texts)
        if not all(isinstance(text, str) for text in texts):
            raise TypeError("CTranslate2Translator takes a string or a list of strings")
        settings = self.options(**options)
        # torch forces `</s>` at a bound within its position table; at the table it stops without it
        end_at_limit = end_at_limit and settings["max_decoding_length"] < self.config.max_position_embeddings
        if suppress:
            settings["suppress_sequences"] = suppress
        if source_ids is None:
            sources = [self.source_tokens(text) for text in texts]
        else:
            sources = [self.tokenizer.convert_ids_to_tokens(list(ids)) if ids else [] for ids in source_ids]
        kept = [tokens for tokens in sources if tokens]
        if prefixes is not None:
            given = zip(prefixes, sources, strict=True)
            settings["target_prefix"] = [prefix or None for prefix, tokens in given if tokens]
        taken = dict(max_batch_size=batch_size, max_input_length=0, return_scores=True, return_end_token=True,
                     return_attention=attention)  # fmt: skip
        steps: list[Any] = []  # each generated token's step (GenerationStepResult), as the search makes them
        if attention and plain_greedy(settings):
            taken["callback"] = steps.append
        results = iter(self.translator.translate_batch(kept, **taken, **settings) if kept else [])
        firsts = iter(self._first_attention(kept, batch_size) if attention and settings.get("beam_size", 1) > 1 else [])
        traced = iter(_step_log_probs(steps, len(kept)) if steps else [])
        blank = [ScoredHypothesis("", None)] * settings.get("num_hypotheses", 1)
        return [
            self._scored(tokens, next(results), settings, end_at_limit, prefix or [], next(firsts, None),
                         next(traced, None))
            if tokens else blank
            for tokens, prefix in zip(sources, prefixes or [None] * len(texts), strict=True)
        ]  # fmt: skip

    def bounded_hypotheses(
        self,
        texts: Sequence[str],
        source_ids: Sequence[list[int]],
        bounds: Sequence[int],
        prefixes: Sequence[list[str]] | None = None,
        **options: Any,
    ) -> list[list[ScoredHypothesis]]:
        """`hypotheses` of each text (token ids `source_ids[k]`, target prefix `prefixes[k]`) with at most
        `bounds[k]` new tokens: one call per bound, since CTranslate2 takes one a call."""
        found: dict[int, list[ScoredHypothesis]] = {}
        for bound in sorted(set(bounds)):
            group = [k for k, each in enumerate(bounds) if each == bound]
            made = self.hypotheses([texts[k] for k in group], batch_size=len(group), max_new_tokens=bound,
                                   prefixes=None if prefixes is None else [prefixes[k] for k in group],
                                   source_ids=[source_ids[k] for k in group], **options)  # fmt: skip
            found.update(zip(group, made, strict=True))
        return [found[k] for k in range(len(texts))]

    def _first_attention(self, sources: list[list[str]], batch_size: int) -> list[list[float]]:
        """The attention of the first step of each source's translation (the same for every hypothesis: the decoder
        has seen only its start), from one greedy step: CTranslate2's beam search returns none for that step."""
        found = self.translator.translate_batch(sources, max_batch_size=batch_size, max_input_length=0, beam_size=1,
                                                max_decoding_length=1, return_attention=True)  # fmt: skip
        return [list(result.attention[0][0]) for result in found]

    def _scored(
        self, source: list[str], result: Any, settings: dict[str, Any], end_at_limit: bool, prefix: list[str],
        first: list[float] | None = None, log_probs: list[float] | None = None,
    ) -> list[ScoredHypothesis]:  # fmt: skip
        """The hypotheses of one CTranslate2 `result` for `source`, scored as the torch engine scores them.
        CTranslate2's score is the sum of the log-probabilities after the `prefix` over the length to the power
        `length_penalty`; the prefix's log-probabilities come from `score_batch`, and so does the whole score of a
        hypothesis stopped by its bound without `</s>` (`end_at_limit`: torch forces `</s>` there). `log_probs`:
        the greedy search's, of each token of the one hypothesis."""
        eos, penalty = self.tokenizer.eos_token, settings.get("length_penalty", 1.0)
        hypotheses = [list(tokens) for tokens in result.hypotheses]
        before = sum(self._log_probs([source], [prefix])[0][: len(prefix)]) if prefix else 0.0
        pairs = zip(hypotheses, result.scores, strict=True)
        sums = [score * max(len(tokens), 1) ** penalty + before for tokens, score in pairs]
        cut = [i for i, tokens in enumerate(hypotheses) if end_at_limit and tokens[-1:] != [eos]]
        for i, log_probs in zip(cut, self._log_probs([source] * len(cut), [hypotheses[i] for i in cut]), strict=True):
            hypotheses[i].append(eos)
            sums[i] = sum(log_probs)
        attentions = [np.array(rows, dtype=np.float64) if rows and i not in cut else None
                      for i, rows in enumerate(result.attention or [None] * len(hypotheses))]  # fmt: skip
        for rows in attentions:
            if rows is not None and first is not None:  # the first step's attention, where the search's is wrong
                rows[0] = first
        traced = [log_probs if log_probs is not None and len(log_probs) == len(tokens) and i not in cut else None
                  for i, tokens in enumerate(hypotheses)]  # fmt: skip
        found = zip(hypotheses, sums, attentions, traced, strict=True)
        return [
            ScoredHypothesis(self.decode(tokens), total / max(len(tokens), 1), self.ids(tokens), rows, steps)
            for tokens, total, rows, steps in found
        ]

    def ids(self, tokens: list[str]) -> list[int]:
        return self.tokenizer.convert_tokens_to_ids(tokens)

    def _log_probs(self, sources: list[list[str]], targets: list[list[str]]) -> list[list[float]]:
        """The log-probability of each token of each target, and of the `</s>` after it, given its source."""
        scored = self.translator.score_batch(sources, targets, max_input_length=0) if targets else []
        return [result.log_probs for result in scored]

    def search_evidence(self, hypothesis: ScoredHypothesis) -> Evidence | None:
        """The evidence of `hypothesis` from its search, where that kept its tokens' log-probabilities and attention
        (`hypotheses(..., attention=True)`, a plain greedy search); else None (`evidence` scores it again)."""
        if hypothesis.log_probs is None or hypothesis.attention is None:
            return None
        return evidence_for(self.tokenizer, hypothesis.ids, hypothesis.log_probs, hypothesis.attention)

    def evidence(
        self,
        sources: Sequence[list[int]],
        targets: Sequence[list[int]],
        attention: Sequence[np.ndarray | None] | None = None,
    ) -> list[Evidence]:
        """The evidence (`quality_features`) of each translation `targets[k]` (ids, `</s>` included) of `sources[k]`
        (ids): each token's log-probability from a teacher-forced `score_batch`; its attention `attention[k]` (the
        search's, `ScoredHypothesis.attention`), or where that is None from a greedy search with the translation
        but its last token as the target prefix (CTranslate2's attention: the last layer's first head)."""
        attention = list(attention or [None] * len(targets))
        source_tokens = [self.tokenizer.convert_ids_to_tokens(list(ids)) for ids in sources]
        target_tokens = [self.tokenizer.convert_ids_to_tokens(list(ids)) for ids in targets]
        eos = self.tokenizer.eos_token  # score_batch scores `</s>` after the tokens it is given
        bodies = [tokens[:-1] if tokens[-1] == eos else tokens for tokens in target_tokens]
        scored = self.translator.score_batch(source_tokens, bodies, max_batch_size=len(targets), max_input_length=0)
        missing = [k for k, rows in enumerate(attention) if rows is None or len(rows) < len(targets[k])]
        attended = self.translator.translate_batch(
            [source_tokens[k] for k in missing], [target_tokens[k][:-1] for k in missing], max_batch_size=len(targets),
            beam_size=1, max_input_length=0, max_decoding_length=max(len(ids) for ids in targets),
            min_decoding_length=0, return_end_token=True, return_attention=True,
        ) if missing else []  # fmt: skip
        for k, result in zip(missing, attended, strict=True):
            attention[k] = np.array(result.attention[0], dtype=np.float64)
        return [evidence_for(self.tokenizer, target, score.log_probs, rows)
                for target, score, rows in zip(targets, scored, attention, strict=True)]  # fmt: skip

    def decode(self, tokens: list[str]) -> str:
        return self.tokenizer.decode(self.ids(tokens), skip_special_tokens=True)


def plain_greedy(settings: dict[str, Any]) -> bool:
    """Whether `translate_batch` `settings` ask for a greedy search whose step log-probabilities are the model's
    own: no prefix, no suppressed sequences, no repetition penalties, no least length."""
    return (
        settings.get("beam_size", 1) == 1 and not any(settings.get("target_prefix") or [])
        and not settings.get("suppress_sequences") and settings.get("repetition_penalty", 1.0) == 1.0
        and not settings.get("no_repeat_ngram_size") and not settings.get("min_decoding_length")
    )  # fmt: skip


def _step_log_probs(steps: list[Any], count: int) -> list[list[float]]:
    """Each of `count` sources' token log-probabilities in order, from a greedy search's `steps` (each source's in
    the order the search made them)."""
    found: list[list[float]] = [[] for _ in range(count)]
    for step in steps:
        found[step.batch_id].append(step.log_prob)
    return found


__all__ = ["CTranslate2Translator", "ScoredHypothesis", "plain_greedy"]
