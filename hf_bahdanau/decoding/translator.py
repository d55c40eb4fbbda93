"""The one Translator: every way of translating (CLI translate and evaluate, the demo, the server) goes through it.

    translator = Translator.from_folder("runs/quick-de-en")            # or Translator(model, tokenizer)
    for translation in translator.translate(["Ein Hund rennt.", "Zwei Männer lachen."], num_beams=5, n_best=2):
        print(translation.text, translation.score, [h.text for h in translation.hypotheses])

It owns what decides a translation, so that every front end gets the same one:
- batching: sources sorted by length and cut into token batches (`batching`), results in input order;
- the length bound: unless `max_new_tokens` is given, a translation has at most `max(8, 3 * source tokens)` tokens
  (`sources.length_bound`), so odd input (a lone "-", emoji, a URL) cannot loop on; within the position table;
- the engine: torch (the package's own search, `search.search`), CTranslate2 (an `export`ed folder), or ONNX Runtime
  (an ONNX export, run by the same search: `onnxruntime`), bounded alike;
- terminology (`lexical`): a glossary whose applicable terms each translation must hold (beam search with
  dynamic beam allocation, `constraints`), a forced prefix and phrases to avoid; CTranslate2 takes a prefix and
  phrases to avoid itself, and hands a glossary to torch (`fallback`) or refuses it;
- n-best lists and scores (every engine), alignments (torch), quality estimates (`quality`, `evidence`). A
  hypothesis's score is its mean token log-probability (`</s>` included) under the model, so a score near 0 is a
  confident translation and a low one a doubtful one. Alignments are Pharaoh `i-j` pairs (`alignment`); attention
  maps come from `attention_maps`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hf_bahdanau.choices import ENGINES
from hf_bahdanau.errors import InputError, as_input_error
from hf_bahdanau.models.source_length import source_limit

from .batching import in_input_order, padded
from .glossary import Glossary, Term
from .lexical import LexicalOptions
from .quality.estimator import QualityEstimate, QualityEstimator, require_estimator
from .quality.features import Evidence, evidence_of, traced_evidence
from .settings import SearchSettings
from .sources import length_bound, source_ids, warn_long_sources

if TYPE_CHECKING:  # torch and transformers' models are the torch engine's: imported where it runs
    from transformers import PreTrainedTokenizerBase

    from .attention_maps import AttentionMaps
    from .engines.ctranslate2 import ScoredHypothesis
    from .folder_data import FolderTokenizer

logger = logging.getLogger(__name__)


@dataclass
class Hypothesis:
    """One translation of a source: its text, score (mean token log-probability; None for a blank source), Pharaoh
    alignment (when asked for) and token ids (`</s>` included)."""

    text: str
    score: float | None = None
    alignment: str | None = None
    ids: list[int] = field(default_factory=list, compare=False, repr=False)


@dataclass
class Translation:
    """The translation of one source: its `hypotheses`, best first (samples: by score); `text`, `score`, `alignment`
    and `quality` (its estimate, with `quality=True`) are the best one's; `terms`: the glossary terms that apply."""

    hypotheses: list[Hypothesis]
    terms: list[Term] = field(default_factory=list)
    quality: QualityEstimate | None = None

    @property
    def text(self) -> str:
        return self.hypotheses[0].text

    @property
    def score(self) -> float | None:
        return self.hypotheses[0].score

    @property
    def alignment(self) -> str | None:
        return self.hypotheses[0].alignment


class Translator:
    """Translate texts with a model and its tokenizer (`engine="torch"`), with a `CTranslate2Translator`
    (`engine="ctranslate2"`, its own tokenizer), or with an `OnnxRuntimeModel` (`engine="onnxruntime"`, its own
    tokenizer; searched as torch is). `batch_size`, `batch_tokens`: the most sentences and padded source tokens a
    batch holds (None: no limit). `trained_source_length`: the longest source the model saw in training;
    longer sources get one warning. `fallback`: makes the torch translator of the same model, for what CTranslate2
    cannot do (a glossary); without it, the CTranslate2 engine refuses a glossary. `quality_estimator`: what
    `quality=True` estimates with (`from_folder` reads the folder's)."""

    def __init__(
        self,
        model: Any,
        tokenizer: PreTrainedTokenizerBase | FolderTokenizer | None = None,
        *,
        engine: str = "torch",
        batch_size: int | None = 32,
        batch_tokens: int | None = None,
        trained_source_length: int | None = None,
        fallback: Callable[[], Translator] | None = None,
        quality_estimator: QualityEstimator | None = None,
    ) -> None:
        if engine not in ENGINES:
            raise InputError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
        self.model, self.engine = model, engine
        self.tokenizer = tokenizer if tokenizer is not None else model.tokenizer
        self.batch_size, self.batch_tokens = batch_size, batch_tokens
        self.trained_source_length = trained_source_length
        self.limit = source_limit(model.config, self.tokenizer)  # the longest source the model reads
        self._warned = False
        self._fallback, self._fallen_back = fallback, None
        self.quality_estimator = quality_estimator

    @classmethod
    def from_folder(
        cls,
        path: str | os.PathLike,
        *,
        engine: str = "torch",
        quantize: str | None = None,
        threads: int | None = None,
        torch_fallback: bool = False,
        **options: Any,
    ) -> Translator:
        """The translator of a saved model folder, for `engine="ctranslate2"` of its CTranslate2 export (an
        `export`ed folder, or the export cached in the model folder), for `engine="onnxruntime"` of an ONNX export
        (`export --format onnx`): the one loader of every front end.

        A model folder loads as `loading.load_translation_model` checks it: a model type of this package's (no code
        from the folder), safetensors only, every weight found, the tokenizer it was saved with. `quantize="int8"`:
        int8 weights on the CPU (ONNX Runtime: the export's int8 graphs); `threads`: CPU threads (ONNX Runtime's
        intra-op threads too); `torch_fallback`: a model folder's glossary requests go to torch (loaded alike, when
        first needed); `options`: `Translator`'s (`trained_source_length` defaults to the
        folder's record). What is wrong with the folder is a one-line InputError."""
        from .sources import trained_source_length

        path = str(path)
        if engine not in ENGINES:
            raise InputError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
        options.setdefault("trained_source_length", trained_source_length(path))
        options.setdefault("quality_estimator", QualityEstimator.from_folder(path))
        if engine == "ctranslate2":
            from .engines.ctranslate2 import CTranslate2Translator
            from .export.ctranslate2 import check_ctranslate2

            check_ctranslate2()
            if torch_fallback and os.path.isfile(os.path.join(path, "config.json")):
                torch_options = dict(options)
                options["fallback"] = lambda: cls.from_folder(path, quantize=quantize, threads=threads, **torch_options)
            with as_input_error(ValueError, OSError):  # the export, its JSON, tokenizer and generation config
                return cls(CTranslate2Translator.from_model(path, quantize, threads=threads or 0), engine=engine,
                           **options)  # fmt: skip
        if threads:
            import torch

            torch.set_num_threads(threads)
        if engine == "onnxruntime":
            from .engines.onnxruntime import OnnxRuntimeModel

            with as_input_error(ValueError, OSError):  # the export's JSON, tokenizer and graphs
                return cls(OnnxRuntimeModel(path, quantize, threads), engine=engine, **options)
        from .loading import load_translation_model

        model, tokenizer = load_translation_model(path, quantize)
        return cls(model, tokenizer, engine=engine, **options)

    @property
    def config(self) -> Any:
        """The model's config (source and target language, model type, ...)."""
        return self.model.config

    @property
    def generation_config(self) -> Any:
        """The model's generation config: the default number of beams, length penalty, ..."""
        return self.model.generation_config

    def source_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids (`</s>` included), cut to the model's limit with a warning; none for a blank text."""
        return source_ids(self.tokenizer, texts, self.limit)

    def translate(self, texts: Sequence[str], **options: Any) -> list[Translation]:
        """The translation of each text, in order: `translate_stream`'s, all at once.

        Options: `num_beams` (default: the model's; 1 is greedy), `n_best` (hypotheses a source, at most the beams;
        samples with `do_sample`), `max_new_tokens` (default: each source's length bound), `length_penalty`
        (default: the model's), `do_sample`, `alignments` (Pharaoh pairs on each hypothesis; `"source"`: each
        source word to one target word, every layer, `alignment.source_pharaoh`), `glossary` (a
        `Glossary` or a mapping source term -> target term), `prefix` (one string, or one per text), `avoid`
        (words or phrases), `quality` (each translation's `quality` estimate), `progress` (a bar)."""
        return [translation for ready in self.translate_stream(texts, **options) for translation in ready]

    def translate_html(self, texts: Sequence[str], language: str | None = None, **options: Any) -> list[str]:
        """Each HTML text translated a sentence at a time, its inline tags put back on the aligned words
        (`markup.translate_html`; `language`: the sentence splitter's, default the model's source language)."""
        from .markup.html import translate_html

        return translate_html(self, texts, language, **options)

    def translate_stream(
        self,
        texts: Sequence[str],
        *,
        num_beams: int | None = None,
        n_best: int = 1,
        max_new_tokens: int | None = None,
        length_penalty: float | None = None,
        do_sample: bool | None = None,
        alignments: bool | str = False,
        glossary: Glossary | Mapping[str, str] | None = None,
        prefix: str | Sequence[str] | None = None,
        avoid: Sequence[str] | None = None,
        quality: bool = False,
        progress: bool = False,
    ) -> Iterator[list[Translation]]:
        """Translate `texts` by length-sorted token batches; yields their translations in input order, as soon as
        the next ones are done (a file is written as it goes). A blank text translates to `n_best` empty hypotheses
        with score None. `quality`: each translation carries the estimate of its best hypothesis (an InputError where
        the translator has no estimator)."""
        texts = list(texts)
        estimator = require_estimator(self.quality_estimator, self.engine) if quality else None
        settings = self.settings(num_beams=num_beams, n_best=n_best, max_new_tokens=max_new_tokens,
                                 length_penalty=length_penalty, do_sample=do_sample)  # fmt: skip
        lexical = LexicalOptions.of(self.tokenizer, len(texts), glossary, prefix, avoid)
        if self.engine == "ctranslate2" and lexical is not None and lexical.places_terms:
            yield from self._torch_translator().translate_stream(
                texts, num_beams=num_beams, n_best=n_best, max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                do_sample=do_sample, alignments=alignments, glossary=lexical.glossary, prefix=prefix, avoid=avoid,
                quality=quality, progress=progress,
            )  # fmt: skip
            return
        if self.engine == "ctranslate2" and (alignments or settings.do_sample):
            raise InputError("the CTranslate2 engine translates without alignments or sampling")
        if self.engine == "onnxruntime" and (alignments or lexical is not None):
            raise InputError("the ONNX Runtime engine translates without alignments, glossaries, prefixes or phrases "
                             "to avoid: translate with the torch engine")  # fmt: skip
        if lexical is not None and lexical.places_terms and settings.num_beams < 2:
            raise InputError("a glossary needs beam search: num_beams of 2 or more")
        rows = self.source_ids(texts)
        lengths = [len(row) for row in rows]
        if not self._warned:
            self._warned = warn_long_sources(lengths, self.trained_source_length)
        bounds = [self._bound(lengths[i], texts[i], i, lexical) for i in range(len(texts))]

        def translate(indices: list[int]) -> list[Translation]:
            sources = [rows[i] for i in indices]
            if self.engine == "ctranslate2":  # and each best one's attention, and evidence where its search gave it
                found, best = self._translate_ctranslate2(texts, rows, indices, settings, max_new_tokens, bounds,
                                                          lexical, quality)  # fmt: skip
                attention, searched = [h.attention for h in best], [self.model.search_evidence(h) for h in best]
            else:
                attention, (found, searched) = None, self._translate_ids(sources, settings, max_new_tokens, alignments,
                    [bounds[i] for i in indices], lexical, texts, indices, quality)  # fmt: skip
            return found if estimator is None else estimator.attach(found, evidence_of(
                self.engine, self.model, self.tokenizer, sources, [each.hypotheses[0].ids for each in found],
                self.batch_size, attention, searched), [len(row) for row in sources])  # fmt: skip

        yield from in_input_order(translate, lengths, self.batch_tokens, self.batch_size, progress)

    def _torch_translator(self) -> Translator:
        """The torch translator that translates what CTranslate2 cannot (a glossary), made when first needed."""
        if self._fallback is None:
            raise InputError("the CTranslate2 engine cannot place glossary terms: translate with the torch engine")
        if self._fallen_back is None:
            logger.warning("CTranslate2 cannot place glossary terms: the torch engine translates with a glossary")
            self._fallen_back = self._fallback()
        return self._fallen_back

    @staticmethod
    def _bound(length: int, text: str, index: int, lexical: LexicalOptions | None) -> int:
        """The most new tokens (`</s>` included) of the translation of a source of `length` tokens: its length
        bound, or room for its prefix and glossary terms where they need more."""
        bound = length_bound(length)
        return bound if lexical is None else max(bound, lexical.needed_tokens(text, index) + 1)

    def settings(self, n_best: int = 1, **options: Any) -> SearchSettings:
        """The search settings of a call: the model's generation config, `options` (None: the model's) on top;
        ValueError for an n-best list longer than the beams, or a setting the search does not do."""
        settings = SearchSettings.from_config(self.generation_config, self.config, num_return_sequences=n_best,
                                              **options)  # fmt: skip
        if n_best > settings.num_beams and not settings.do_sample:
            raise InputError(f"n_best {n_best} is more than the {settings.num_beams} beams searched")
        return settings

    def _translate_ids(
        self,
        rows: list[list[int]],
        settings: SearchSettings,
        max_new_tokens: int | None,
        alignments: bool | str,
        bounds: list[int],
        lexical: LexicalOptions | None,
        texts: list[str],
        indices: list[int],
        trace: bool = False,
    ) -> tuple[list[Translation], list[Evidence | None]]:
        """Translate one batch of sources given as token ids (the torch engine): `texts[indices[k]]` is `rows[k]`,
        with at most `bounds[k]` new tokens unless `max_new_tokens`; with `trace`, each best one's search evidence."""
        import torch

        from hf_bahdanau.models.pipelines import pad_id

        from .alignment import alignments as pharaoh_alignments
        from .search import search

        # a blank source: `n_best` empty hypotheses, unscored (nothing was translated, so no certainty either)
        empty = Translation([Hypothesis("", None, "" if alignments else None)] * settings.num_return_sequences)
        results = [empty for _ in rows]
        evidence: list[Evidence | None] = [None] * len(rows)  # None: a blank source, or not traced
        kept = [i for i, row in enumerate(rows) if row]
        if not kept:
            return results, evidence
        device = self.model.device
        input_ids, attention_mask = padded([rows[i] for i in kept], pad_id(self.tokenizer), self.tokenizer.padding_side)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)  # (batch, src_len)
        limits = None
        if max_new_tokens is None:
            limits = torch.tensor([bounds[i] for i in kept], device=device)  # (batch,)
            settings = replace(settings, max_new_tokens=int(limits.max()))
        constraints = None
        if lexical is not None:
            vocab = self.model.get_output_embeddings().weight.shape[0]
            constraints = lexical.constraints(texts, [indices[i] for i in kept], vocab, device)
        found = search(self.model, input_ids, attention_mask, settings, limits, constraints, trace)
        n = settings.num_return_sequences
        lengths = found.lengths
        scores = (found.log_probs / lengths.clamp(min=1)).tolist()
        aligned = None
        if alignments:
            aligned = pharaoh_alignments(self.model, self.tokenizer, input_ids.repeat_interleave(n, 0),
                                         attention_mask.repeat_interleave(n, 0), found.sequences, lengths,
                                         by_source=alignments == "source")  # fmt: skip
        generated = found.sequences[:, 1:].cpu()
        for k, i in enumerate(kept):
            hypotheses = []
            for j in range(k * n, (k + 1) * n):
                ids = generated[j, : lengths[j]].tolist()
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                hypotheses.append(Hypothesis(text, scores[j], aligned[j] if aligned else None, ids))
            if settings.do_sample:
                hypotheses.sort(key=lambda hypothesis: -hypothesis.score)
            terms = lexical.terms(texts[indices[i]]) if lexical is not None else []
            if found.met is not None and not bool(found.met[k * n]):
                logger.warning("text %d: its glossary terms (%s) did not all fit in its %d tokens", indices[i],
                               ", ".join(term.target for term in terms), int(lengths[k * n]))  # fmt: skip
            results[i] = Translation(hypotheses, terms)
            if found.traces is not None and not settings.do_sample:  # samples: sorted after the search
                evidence[i] = traced_evidence(self.tokenizer, hypotheses[0].ids, found.traces[k * n], attention_mask[k])
        return results, evidence

    def _translate_ctranslate2(
        self,
        texts: list[str],
        rows: list[list[int]],
        indices: list[int],
        settings: SearchSettings,
        max_new_tokens: int | None,
        bounds: list[int],
        lexical: LexicalOptions | None,
        attention: bool = False,
    ) -> tuple[list[Translation], list[ScoredHypothesis]]:
        """Translate one batch (`texts[indices]`, token ids `rows[indices]`) with CTranslate2, each source bounded as
        the torch engine bounds it (its last token is a forced `</s>`, which CTranslate2 leaves out). A prefix and
        phrases to avoid become CTranslate2's target prefix and suppressed sequences. Also gives each best hypothesis
        as CTranslate2 found it (`attention`: with its attention, and a greedy search's log-probabilities)."""
        options = {"num_beams": settings.num_beams, "length_penalty": settings.length_penalty,
                   "early_stopping": settings.early_stopping, "num_return_sequences": settings.num_return_sequences,
                   "end_at_limit": max_new_tokens is None, "attention": attention}  # fmt: skip
        if lexical is not None and lexical.avoid:
            options["suppress"] = [lexical.tokens(ids) for ids in lexical.avoided_ids()]
        prefixes = None if lexical is None else [lexical.tokens(lexical.prefix_ids(i)) for i in indices]
        limits = [max_new_tokens or bounds[i] - 1 for i in indices]
        found = self.model.bounded_hypotheses([texts[i] for i in indices], [rows[i] for i in indices], limits,
                                              prefixes, **options)  # fmt: skip
        translations = [Translation([Hypothesis(h.text, h.score, None, h.ids) for h in row]) for row in found]
        return translations, [row[0] for row in found]

    def evidence(self, texts: Sequence[str], translations: Sequence[Translation]) -> list[Evidence | None]:
        """The evidence of each translation's best hypothesis from a teacher-forced pass (None for an empty one)."""
        targets = [translation.hypotheses[0].ids for translation in translations]
        return evidence_of(self.engine, self.model, self.tokenizer, self.source_ids(texts), targets, self.batch_size)

    def attention_maps(self, text: str, hypothesis: Hypothesis | None = None, **options: Any) -> AttentionMaps:
        """The attention maps of `text`'s translation (`translate(..., **options)`'s best), or of `hypothesis`
        (e.g. one of an n-best list) from a teacher-forced pass: `(layers, heads, queries, keys)` for any model."""
        from .attention_maps import attention_maps

        if self.engine != "torch":
            raise InputError("attention maps need the torch engine")
        if not text.strip():
            raise InputError("cannot translate an empty text with attention weights")
        if hypothesis is None:
            hypothesis = self.translate([text], **options)[0].hypotheses[0]
        return attention_maps(self.model, self.tokenizer, text, hypothesis.ids)


__all__ = ["ENGINES", "Hypothesis", "Translation", "Translator"]
