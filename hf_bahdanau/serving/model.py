"""One served model folder: its language pair, and `translate(texts, n_best, glossary)`, which goes through the
`Translator` that `hf-bahdanau translate` uses (`Translator.from_folder`), so the server gives the same translations as
the command for the same settings. This is the one place the server reaches the package's translation code."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hf_bahdanau.decoding.glossary import Glossary
    from hf_bahdanau.decoding.translator import Translator

from hf_bahdanau.decoding.markup import ALIGNMENT
from hf_bahdanau.errors import InputError

logger = logging.getLogger(__name__)


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
    """A model folder loaded for serving. `translate` runs in two threads, one with a glossary and one without
    (`batching.Lanes`), and `count_tokens` in a third: each has its own tokenizer."""

    def __init__(self, folder: str | Path, decoding: Decoding) -> None:
        from hf_bahdanau.decoding.loading import check_generation_length
        from hf_bahdanau.decoding.translator import Translator

        self.folder = str(folder)
        self._decoding = decoding
        check_generation_length(self.folder, decoding.max_new_tokens)
        self._translator = Translator.from_folder(self.folder, engine=decoding.engine, quantize=decoding.quantize,
                                                  threads=decoding.threads, batch_size=decoding.batch_size,
                                                  batch_tokens=decoding.batch_tokens)  # fmt: skip
        self._glossary_translator: Translator | None = None
        self._options = {name: value for name in ("num_beams", "max_new_tokens", "length_penalty")
                         if (value := getattr(decoding, name)) is not None}  # fmt: skip
        config = self._translator.config
        if not (config.source_language and config.target_language):
            raise InputError(
                f"{self.folder} records no language pair (source_language and target_language in its config): the "
                "server picks a model by the languages a request names"
            )
        self.pair: tuple[str, str] = (config.source_language, config.target_language)
        beams = decoding.num_beams or self._translator.generation_config.num_beams or 1
        self.places_terms = beams > 1  # a glossary needs beam search (on CTranslate2, the torch engine takes it)
        self.max_alternatives = beams - 1  # n-best lists, from either engine
        self._counting_tokenizer = copy.deepcopy(self._translator.tokenizer)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Each text's source length in tokens (`</s>` included), as `translate` counts it."""
        from hf_bahdanau.decoding.sources import source_ids

        return [len(row) for row in source_ids(self._counting_tokenizer, texts, self._translator.limit)]

    def translate(
        self, texts: list[str], n_best: int = 1, glossary: Glossary | None = None, aligned: bool = False
    ) -> list[list[str]] | list[list[tuple[str, str | None]]]:
        """Each text's `n_best` translations, best first, using the `glossary`'s terms; with `aligned`, each as
        `(text, Pharaoh alignment)` (None from an engine without alignments: CTranslate2)."""
        translator = self._translator if glossary is None else self._translator_with_glossary()
        alignments = ALIGNMENT if aligned and translator.engine == "torch" else False
        found = translator.translate(texts, n_best=n_best, glossary=glossary, alignments=alignments, **self._options)
        if aligned:
            return [[(h.text, h.alignment) for h in translation.hypotheses] for translation in found]
        return [[hypothesis.text for hypothesis in translation.hypotheses] for translation in found]

    def _translator_with_glossary(self) -> Translator:
        """The translator of the requests with a glossary, made by their thread when it first needs it: the model's
        weights with a tokenizer of its own, or, as CTranslate2 cannot place terms, the folder's torch model."""
        from hf_bahdanau.decoding.translator import Translator

        if self._glossary_translator is None:
            decoding, main = self._decoding, self._translator
            if main.engine == "torch":
                self._glossary_translator = Translator(main.model, copy.deepcopy(main.tokenizer),
                                                       batch_size=decoding.batch_size,
                                                       batch_tokens=decoding.batch_tokens,
                                                       trained_source_length=main.trained_source_length)  # fmt: skip
            else:
                logger.warning("CTranslate2 cannot place glossary terms: the torch engine translates with a glossary")
                self._glossary_translator = Translator.from_folder(self.folder, quantize=decoding.quantize,
                                                                   threads=decoding.threads,
                                                                   batch_size=decoding.batch_size,
                                                                   batch_tokens=decoding.batch_tokens)  # fmt: skip
        return self._glossary_translator


__all__ = ["Decoding", "ServedModel"]
