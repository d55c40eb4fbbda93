"""One served model folder: its language pair, and `translate(texts, n_best)`, which goes through what
`hf-bahdanau translate` uses (`load_translator`, `_hypotheses_function`, `translate_in_order`), so the server gives
the same translations as the command for the same settings. This is the one place the server reaches the package's
translation code."""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Decoding:
    """How every request to a model is translated (the `translate` command's options of the same names)."""

    engine: str = "torch"
    num_beams: int | None = None
    max_new_tokens: int | None = None
    length_penalty: float | None = None
    quantize: str | None = None
    threads: int | None = None
    batch_size: int = 32
    batch_tokens: int | None = None


class ServedModel:
    """A model folder loaded for serving; `count_tokens` may run in another thread than `translate` (it has its
    own copy of the tokenizer)."""

    def __init__(self, folder: str | Path, decoding: Decoding) -> None:
        from ..cli import UsageError, check_generation_length, load_translator
        from ..pipelines import source_limit

        self.folder = str(folder)
        self._args = argparse.Namespace(
            model=self.folder, **vars(decoding), n_best=None, scores=False, alignments=False
        )
        check_generation_length(self.folder, decoding.max_new_tokens)
        self._model, self._translator = load_translator(self._args)
        config = self._model.config
        if not (config.source_language and config.target_language):
            raise UsageError(
                f"{self.folder} records no language pair (source_language and target_language in its config): the "
                "server picks a model by the languages a request names"
            )
        self.pair: tuple[str, str] = (config.source_language, config.target_language)
        beams = decoding.num_beams or self._model.generation_config.num_beams or 1
        self.max_alternatives = beams - 1 if decoding.engine == "torch" else 0  # n-best: torch only, as translate
        self._counting_tokenizer = copy.deepcopy(self._translator.tokenizer)
        self._limit = source_limit(self._model, self._translator.tokenizer)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Each text's source length in tokens (`</s>` included), as `translate` counts it."""
        from ..translating import source_ids

        return [len(row) for row in source_ids(self._counting_tokenizer, texts, self._limit)]

    def translate(self, texts: list[str], n_best: int = 1) -> list[list[str]]:
        """Each text's `n_best` translations, best first."""
        from ..cli import _hypotheses_function
        from ..translating import translate_in_order

        args = argparse.Namespace(**{**vars(self._args), "n_best": n_best if n_best > 1 else None})
        lengths, translate = _hypotheses_function(self._model, self._translator, texts, args)
        found = translate_in_order(translate, lengths, args.batch_tokens, args.batch_size)
        return [[hypothesis.text for hypothesis in row] for batch in found for row in batch]


__all__ = ["Decoding", "ServedModel"]
