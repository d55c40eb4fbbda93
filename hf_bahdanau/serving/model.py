"""One served model folder: its language pair, and `translate(texts, n_best, glossary)`, which goes through the
`Translator` that `hf-bahdanau translate` uses (`Translator.from_folder`), so the server gives the same translations as
the command for the same settings. This is the one place the server reaches the package's translation code.

A folder with a quality estimator estimates every translation (`Sentence.quality`); with a teacher (`serve
--fallback`), the model is the student of a `Cascade`, and its teacher re-translates what is estimated below
`Decoding.min_quality`."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hf_bahdanau.decoding.cascade import Cascade
    from hf_bahdanau.decoding.glossary import Glossary
    from hf_bahdanau.decoding.quality.estimator import QualityEstimate
    from hf_bahdanau.decoding.translator import Translator

from hf_bahdanau.decoding.markup.html import ALIGNMENT
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
    quality: bool = True  # answers carry the estimates of a folder with a quality estimator
    min_quality: float | None = None  # with a teacher: the least estimate kept from the model
    fallback_engine: str = "torch"  # the teachers' engine


class Sentence(list):
    """One sentence's translations, best first (strings, or `(text, alignment)` pairs), with the best one's quality
    estimate (`quality`: None where the model has no estimator, for a blank sentence, and for a teacher's translation
    where the teacher has none) and whether the teacher made them (`retranslated`)."""

    def __init__(
        self, texts: Sequence[str], quality: QualityEstimate | None = None, retranslated: bool = False
    ) -> None:
        super().__init__(texts)
        self.quality, self.retranslated = quality, retranslated


@dataclass(frozen=True)
class Teacher:
    """A teacher (`serve --fallback`): its folder, its translator and the language pair it translates."""

    folder: str
    translator: Translator
    pair: tuple[str | None, str | None]

    @classmethod
    def load(cls, folder: str, decoding: Decoding) -> Teacher:
        """The teacher of `folder`: its `fallback_engine`, unquantized, with the decoding's threads and batches."""
        from hf_bahdanau.decoding.translator import Translator

        translator = Translator.from_folder(
            folder, engine=decoding.fallback_engine, threads=decoding.threads, batch_size=decoding.batch_size,
            batch_tokens=decoding.batch_tokens,
        )  # fmt: skip
        return cls(folder, translator, (translator.config.source_language, translator.config.target_language))


class ServedModel:
    """A model folder loaded for serving. `translate` runs in two threads, one with a glossary and one without
    (`batching.Lanes`), and `count_tokens` in a third: each has its own tokenizer. `teachers`: the one of this
    model's language pair, where there is one, re-translates what the model's estimator scores below
    `decoding.min_quality`."""

    def __init__(self, folder: str | Path, decoding: Decoding, teachers: Sequence[Teacher] = ()) -> None:
        from hf_bahdanau.decoding.cascade import estimates
        from hf_bahdanau.decoding.loading import check_generation_length
        from hf_bahdanau.decoding.translator import Translator

        self.folder = str(folder)
        self._decoding = decoding
        check_generation_length(self.folder, decoding.max_new_tokens)
        self._translator = Translator.from_folder(self.folder, engine=decoding.engine, quantize=decoding.quantize,
                                                  threads=decoding.threads, batch_size=decoding.batch_size,
                                                  batch_tokens=decoding.batch_tokens)  # fmt: skip
        self._glossary_translator: Translator | Cascade | None = None
        self._options = {name: value for name in ("num_beams", "max_new_tokens", "length_penalty")
                         if (value := getattr(decoding, name)) is not None}  # fmt: skip
        config = self._translator.config
        if not (config.source_language and config.target_language):
            raise InputError(
                f"{self.folder} records no language pair (source_language and target_language in its config): the "
                "server picks a model by the languages a request names"
            )
        self.pair: tuple[str, str] = (config.source_language, config.target_language)
        self.teacher = next((teacher for teacher in teachers if teacher.pair == self.pair), None)
        self.min_quality = decoding.min_quality if self.teacher is not None else None
        self.estimates = decoding.quality and estimates(self._translator)  # its answers carry them
        if decoding.quality and self._translator.quality_estimator is not None and not self.estimates:
            logger.warning("%s: its quality estimator needs the torch or ctranslate2 engine", self.folder)
        beams = decoding.num_beams or self._translator.generation_config.num_beams or 1
        if self.teacher is not None:  # n-best lists and glossaries from both
            beams = min(beams, self.teacher.translator.generation_config.num_beams or 1)
        sides = [self._translator] if self.teacher is None else [self._translator, self.teacher.translator]
        self.glossary_refusal = glossary_refusal(beams, sides)  # None: requests with a glossary are translated
        self.max_alternatives = beams - 1  # n-best lists, from either engine
        self._counting_tokenizer = copy.deepcopy(self._translator.tokenizer)
        self._plain = self._cascade(self._translator, self.teacher and self.teacher.translator)
        self._plain_aligns = all(side.engine == "torch" for side in sides)  # (the glossary lane's are torch)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Each text's source length in tokens (`</s>` included), as `translate` counts it."""
        from hf_bahdanau.decoding.sources import source_ids

        return [len(row) for row in source_ids(self._counting_tokenizer, texts, self._translator.limit)]

    def translate(
        self, texts: list[str], n_best: int = 1, glossary: Glossary | None = None, aligned: bool = False
    ) -> list[Sentence]:
        """Each text's `n_best` translations, best first, using the `glossary`'s terms, with the best one's estimate;
        with `aligned`, each as `(text, Pharaoh alignment)` (None from an engine without alignments: CTranslate2)."""
        from hf_bahdanau.decoding.cascade import TEACHER, Cascaded

        translator = self._plain if glossary is None else self._translator_with_glossary()
        aligned_here = aligned and (glossary is not None or self._plain_aligns)
        found = translator.translate(texts, n_best=n_best, glossary=glossary,
                                     alignments=ALIGNMENT if aligned_here else False, quality=self.estimates,
                                     **self._options)  # fmt: skip
        return [Sentence([(h.text, h.alignment) if aligned else h.text for h in translation.hypotheses],
                         translation.quality, isinstance(translation, Cascaded) and translation.made_by == TEACHER)
                for translation in found]  # fmt: skip

    def _cascade(self, student: Translator, teacher: Translator | None) -> Translator | Cascade:
        """`student`, or the `Cascade` of it and `teacher`."""
        from hf_bahdanau.decoding.cascade import Cascade

        return student if teacher is None else Cascade(student, teacher, self._decoding.min_quality)

    def _translator_with_glossary(self) -> Translator | Cascade:
        """The translator of the requests with a glossary, made by their thread when it first needs it: the model's
        (and its teacher's) weights with a tokenizer of its own, or, as CTranslate2 cannot place terms, the folder's
        torch model."""
        if self._glossary_translator is None:
            student = self._torch_twin(self._translator, self.folder, self._decoding.quantize)
            teacher = self.teacher and self._torch_twin(self.teacher.translator, self.teacher.folder, None)
            self._glossary_translator = self._cascade(student, teacher)
        return self._glossary_translator

    def _torch_twin(self, main: Translator, folder: str, quantize: str | None) -> Translator:
        """A torch translator of `main`'s model for another thread: its weights with a tokenizer of its own, or for
        CTranslate2 the `folder`'s torch model."""
        from hf_bahdanau.decoding.translator import Translator

        decoding = self._decoding
        if main.engine == "torch":
            return Translator(main.model, copy.deepcopy(main.tokenizer), batch_size=decoding.batch_size,
                              batch_tokens=decoding.batch_tokens, trained_source_length=main.trained_source_length,
                              quality_estimator=main.quality_estimator)  # fmt: skip
        logger.warning("CTranslate2 cannot place glossary terms: the torch engine translates with a glossary")
        return Translator.from_folder(folder, quantize=quantize, threads=decoding.threads,
                                      batch_size=decoding.batch_size, batch_tokens=decoding.batch_tokens)  # fmt: skip


def glossary_refusal(beams: int, translators: Sequence[Translator]) -> str | None:
    """Why a request with a glossary is refused (None: it is translated): a glossary needs beam search, and the torch
    model of each folder (CTranslate2 cannot place terms, and the torch engine takes its requests from the same
    folder; an ONNX export holds no torch model)."""
    if beams < 2:
        return "a glossary needs beam search, and this server translates greedily"
    if any(translator.engine == "onnxruntime" for translator in translators):
        return "a glossary needs the torch or ctranslate2 engine, and this server runs onnxruntime"
    return None


__all__ = ["Decoding", "Sentence", "ServedModel", "Teacher", "glossary_refusal"]
