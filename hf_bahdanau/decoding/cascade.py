"""A student that calls its teacher: translate with a (fast) student model, and re-translate with its teacher every
sentence whose quality estimate is below a threshold.

    cascade = Cascade(Translator.from_folder("runs/student", engine="ctranslate2", quantize="int8"),
                      Translator.from_folder("runs/teacher"), min_quality=0.5, teacher_options={"num_beams": 5})
    for translation in cascade.translate(["Ein Hund rennt.", "Zwei Männer lachen."], num_beams=1):
        print(translation.made_by, translation.text)

It has the `Translator`'s `translate` and `translate_stream`: the student translates by its length-sorted batches,
each with its quality estimate (`quality`: the student needs an estimator), and the sentences of a batch whose
estimate is below `min_quality` go to the teacher in one call. Results come in input order, each marked with the
model that made it (`Cascaded.made_by`). A blank source has no estimate and stays the student's (empty).

What a call asks of the search (`num_beams`, `max_new_tokens`, `length_penalty`, `do_sample`) is the student's; the
teacher searches as its generation config says, with `teacher_options` on top. What a call asks of the output (an
n-best list, alignments, a glossary, a prefix, phrases to avoid, quality estimates) applies to both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from hf_bahdanau.errors import InputError

from .quality.estimator import ESTIMATOR_FILE, require_estimator
from .translator import Translation

if TYPE_CHECKING:
    from .quality.estimator import QualityEstimate, QualityEstimator
    from .translator import Translator

SEARCH_OPTIONS = ("num_beams", "max_new_tokens", "length_penalty", "do_sample")  # the student's alone
STUDENT, TEACHER = "student", "teacher"


@dataclass
class Cascaded(Translation):
    """A translation of a `Cascade`: `Translation`'s fields, `made_by` (`"student"` or `"teacher"`) and
    `student_quality`, the student's estimate that decided (None for a blank source). With `quality=True`, `quality`
    is the estimate of the model that made it: the student's, or the teacher's where the teacher has an estimator
    (else None)."""

    made_by: str = STUDENT
    student_quality: QualityEstimate | None = None


def _cascaded(translation: Translation, made_by: str, student_quality: QualityEstimate | None,
              quality: bool) -> Cascaded:  # fmt: skip
    """`translation` as a `Cascaded` one (its `quality` kept only where a call asked for estimates)."""
    found = {field.name: getattr(translation, field.name) for field in fields(Translation)}
    if not quality:
        found["quality"] = None
    return Cascaded(**found, made_by=made_by, student_quality=student_quality)


class Cascade:
    """Translate with `student`, re-translate with `teacher` what the student's estimator scores below `min_quality`
    (0 to 1); `teacher_options`: the teacher's search settings (`Translator.translate`'s `num_beams`, ...)."""

    def __init__(
        self,
        student: Translator,
        teacher: Translator,
        min_quality: float,
        teacher_options: dict[str, Any] | None = None,
    ) -> None:
        if student.quality_estimator is None:
            raise InputError(
                f"the student has no quality estimator ({ESTIMATOR_FILE}) to decide what its teacher re-translates: "
                "make one with hf-bahdanau calibrate"
            )
        require_estimator(student.quality_estimator, student.engine)  # an engine that gives the evidence
        if not 0.0 <= min_quality <= 1.0:
            raise InputError(f"the least quality must be between 0 and 1, got {min_quality:g}")
        student_pair = (student.config.source_language, student.config.target_language)
        teacher_pair = (teacher.config.source_language, teacher.config.target_language)
        if None not in student_pair + teacher_pair and student_pair != teacher_pair:
            raise InputError(f"the student translates {'->'.join(student_pair)} but its teacher "
                             f"{'->'.join(teacher_pair)}")  # fmt: skip
        self.student, self.teacher, self.min_quality = student, teacher, min_quality
        self.teacher_options = dict(teacher_options or {})
        self.retranslated = 0  # sentences the teacher has re-translated, over every call
        self.estimated = 0  # sentences the student has estimated (every one but blank sources), over every call

    @property
    def config(self) -> Any:
        """The student's config (its language pair)."""
        return self.student.config

    @property
    def generation_config(self) -> Any:
        """The student's generation config."""
        return self.student.generation_config

    @property
    def quality_estimator(self) -> QualityEstimator | None:
        """The student's estimator, which decides."""
        return self.student.quality_estimator

    def below(self, estimate: QualityEstimate | None) -> bool:
        """Whether the teacher re-translates a translation the student estimated so (None: a blank source, never)."""
        return estimate is not None and estimate.score < self.min_quality

    def translate(self, texts: Sequence[str], **options: Any) -> list[Cascaded]:
        """The translation of each text, in order: `translate_stream`'s, all at once."""
        return [translation for ready in self.translate_stream(texts, **options) for translation in ready]

    def translate_stream(
        self, texts: Sequence[str], *, quality: bool = False, **options: Any
    ) -> Iterator[list[Cascaded]]:
        """`Translator.translate_stream` of the student, each batch's sentences below `min_quality` re-translated by
        the teacher in one call; yields `Cascaded` translations in input order as soon as the next ones are done."""
        texts = list(texts)
        teacher_options = {name: value for name, value in options.items() if name not in SEARCH_OPTIONS}
        teacher_options.pop("progress", None)
        teacher_options.pop("prefix", None)  # each re-translated text's own
        teacher_options.update(self.teacher_options)
        teacher_quality = quality and estimates(self.teacher)
        start = 0
        for batch in self.student.translate_stream(texts, quality=True, **options):
            indices = range(start, start + len(batch))
            low = [k for k, found in enumerate(batch) if self.below(found.quality)]
            self.estimated += sum(found.quality is not None for found in batch)
            redone: dict[int, Translation] = {}
            if low:
                prefix = _picked(options.get("prefix"), [indices[k] for k in low])
                sources = [texts[indices[k]] for k in low]
                again = self.teacher.translate(sources, quality=teacher_quality, prefix=prefix, **teacher_options)
                redone = dict(zip(low, again, strict=True))
                self.retranslated += len(low)
            yield [
                _cascaded(redone[k], TEACHER, found.quality, quality) if k in redone
                else _cascaded(found, STUDENT, found.quality, quality)
                for k, found in enumerate(batch)
            ]  # fmt: skip
            start += len(batch)


def estimates(translator: Translator) -> bool:
    """Whether `translator` makes quality estimates: it has an estimator, and an engine that gives their evidence."""
    try:
        require_estimator(translator.quality_estimator, translator.engine)
    except InputError:
        return False
    return True


def _picked(prefix: str | Sequence[str] | None, indices: list[int]) -> str | list[str] | None:
    """The prefix of the texts at `indices`: one string stays one string, one per text is picked."""
    if prefix is None or isinstance(prefix, str):
        return prefix
    return [prefix[i] for i in indices]


__all__ = ["Cascade", "Cascaded", "STUDENT", "TEACHER", "estimates"]
