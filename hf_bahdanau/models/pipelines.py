"""A translation pipeline for seq2seq models, since transformers 5 removed `pipeline("translation")`.

`TranslationPipeline` keeps v4's output format: `pipe("text")` gives `[{"translation_text": ...}]`, a list of
strings gives a list of such dicts (a list of lists with `num_return_sequences > 1`). Generation parameters
(`num_beams`, `max_new_tokens`, ...) pass through to `model.generate`, at construction or per call.

- Empty (or whitespace-only) inputs translate to `""` without reaching the model, also inside a batch.
- Inputs longer than the tokenizer's `model_max_length` or the model's `max_position_embeddings` are truncated,
  with a logged warning.
- Batches are padded on the tokenizer's `padding_side`; both model types translate both sides alike.
- `quality=True` adds each translation's quality estimate (`"quality": {"score", "words", "bergamot"}`, from the
  `quality_estimator.json` of the folder the model was loaded from) through the package's Translator.

Registered under `TASK` (and its alias `"bahdanau-translation"`) by `register_pipeline()` (called on
`import hf_bahdanau`). `save_for_pipeline` writes a
folder that `pipeline(TASK, model=folder, trust_remote_code=True)` loads where this package is not installed:
this file is copied there as remote code, so it imports only the standard library, torch and transformers.
In-process (after `import hf_bahdanau`), `pipeline(TASK, model=folder)` needs no `trust_remote_code`: the config
hides the folder's pipelines whose task this process registered (`TranslationConfig.custom_pipelines`).
Where transformers has no `"translation"` task (transformers 5; v4 had one), a saved folder names its pipeline
under `"translation"` too: `pipeline("translation", model=folder, trust_remote_code=True)` runs the folder's copy of
this file, as v4 users type it. In-process, `pipeline("translation", model=<a model object>)` is refused by
transformers 5 (it removed that task, and this package leaves transformers' tables alone): use `TASK`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    GenerationConfig,
    Pipeline,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.pipelines import PIPELINE_REGISTRY, SUPPORTED_TASKS

from .source_length import cut_source, source_limit

logger = logging.getLogger(__name__)


def transformers_provides(task: str) -> bool:
    """Whether transformers itself has a pipeline for `task` (v4 had `"translation"`; v5 removed it)."""
    impl = SUPPORTED_TASKS.get(task, {}).get("impl")
    module = impl if isinstance(impl, str) else getattr(impl, "__module__", "")
    return module.startswith("transformers.pipelines.")


TASK = "d2l-translation"
LEXICAL_KEYS = ("glossary", "prefix", "avoid")  # options the pipeline hands to the package's Translator
# Registered in-process (and saved into model folders): an alias of TASK.
REGISTERED_ALIASES = ("bahdanau-translation",)
# Saved into model folders: also transformers v4's "translation", which transformers 5 does not provide (a folder's
# own pipelines are looked up before transformers refuses a removed task, so `pipeline("translation", model=folder,
# trust_remote_code=True)` works, without this package too). Not registered in-process: transformers 5 refuses it.
TASK_ALIASES = REGISTERED_ALIASES + (() if transformers_provides("translation") else ("translation",))
Translation = dict[str, Any]  # {"translation_text": ...} (and "quality" with quality=True)
# What a `pipeline(...)` keyword may set of `generate()`: a generation config or any of its parameters.
GENERATION_KEYS = {key for key in vars(GenerationConfig()) if not key.startswith("_")} | {"generation_config"}


def pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The tokenizer's pad id, 0 when it has none."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def terminology_translator(name: str = "translator_class") -> Any:
    """The `translator_class` (or another attribute `name`) of the pipeline registered for `TASK` in this process: the
    package's `Translator` once `import hf_bahdanau` ran, for this class and for a saved folder's own copy of this file
    alike; else None."""
    registered = PIPELINE_REGISTRY.supported_tasks.get(TASK, {}).get("impl")
    return getattr(registered, name, None)


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A short hash of the tokenizer's vocabulary (token -> id): another tokenizer of the same size differs."""
    vocabulary = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    return hashlib.sha256(vocabulary.encode("utf-8")).hexdigest()[:16]


def check_tokenizer_matches(config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase) -> None:
    """Raise a ValueError when `tokenizer` cannot feed a model of `config`, or is not the one it was saved with
    (a config without `tokenizer_fingerprint` is not compared)."""
    recorded = getattr(config, "tokenizer_fingerprint", None)
    if recorded is not None and recorded != tokenizer_fingerprint(tokenizer):
        raise ValueError(
            f"the tokenizer's fingerprint {tokenizer_fingerprint(tokenizer)} differs from the {recorded} the model was "
            "saved with: the tokenizer belongs to another model"
        )
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's vocabulary has {config.vocab_size}: "
            "they do not belong together"
        )
    for name in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, name) != getattr(config, name):
            raise ValueError(
                f"tokenizer {name}={getattr(tokenizer, name)} but model config {name}={getattr(config, name)}: "
                "the tokenizer does not belong to this model"
            )


def encode(tokenizer: PreTrainedTokenizerBase, text: str, limit: int | None = None) -> dict[str, torch.Tensor]:
    """`input_ids` and `attention_mask` `(1, src_len)`; an empty text gives one padding token under a zero mask.

    A text longer than `limit` tokens (default: the tokenizer's `model_max_length`) is cut, with a warning."""
    if not isinstance(text, str):
        raise TypeError(f"expected a string to translate, got {type(text).__name__}")
    if not text.strip():
        pad = pad_id(tokenizer)
        return {"input_ids": torch.tensor([[pad]]), "attention_mask": torch.zeros(1, 1, dtype=torch.long)}
    ids = cut_source(tokenizer(text, verbose=False)["input_ids"], limit or tokenizer.model_max_length, text)
    return {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}


class TranslationPipeline(Pipeline):
    """Translate strings with a seq2seq model: v4's `TranslationPipeline` for transformers 5.

    `translator_class`: what translates with `glossary=`, `prefix=` or `avoid=` (called as `translator_class(model,
    tokenizer, batch_size=...)`, then `.translate(texts, n_best=..., **options)`); `import hf_bahdanau` sets it to the
    package's `Translator`, and None means the package is not there; `read_estimator(folder)`, its quality
    estimator of a model folder (or None), for `quality=True`."""

    translator_class: Any = None
    read_estimator: Any = None

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False
    _pipeline_calls_generate = True
    modelcard = None  # `Pipeline.save_pretrained` of transformers 5.0-5.3 reads it, which their `__init__` never sets

    def __init__(self, *args: Any, check_tokenizer: bool = True, **kwargs: Any) -> None:
        """`Pipeline`'s; a model of this package saved with its tokenizer's fingerprint (`tokenizer_fingerprint`) is
        checked to get that tokenizer (`check_tokenizer_matches`): another one of the same size translates garbage.
        `check_tokenizer=False` (also a `pipeline(...)` keyword) skips the check. Generation parameters given here
        (`num_beams=5`, a `generation_config`, ...) apply to every call; a call's own override them. The pipeline
        keeps them itself, as transformers releases differ in what their `Pipeline` does with them."""
        self.generate_defaults = {key: kwargs.pop(key) for key in GENERATION_KEYS & kwargs.keys()}
        super().__init__(*args, **kwargs)
        if check_tokenizer and getattr(self.model.config, "tokenizer_fingerprint", None) is not None:
            try:
                check_tokenizer_matches(self.model.config, self.tokenizer)
            except ValueError as error:
                raise ValueError(f"{error} (check_tokenizer=False translates with it anyway)") from None

    def __call__(self, texts: str | list[str], **kwargs: Any) -> list[Translation] | list[list[Translation]]:
        """Translate one string (`[{"translation_text": ...}]`) or a list (one result per string).

        `kwargs`: `batch_size`, `num_workers` and `model.generate` parameters; `glossary` (a mapping source term ->
        target term), `prefix` and `avoid` (words or phrases): generate() has no such constraints, so with any of
        them the pipeline translates through the package's Translator (`terminology_translator`); so does
        `input_format="html"` (sentence by sentence, the inline tags put back on the aligned words), and
        `quality=True`, which adds `"quality"` to each dict (the estimate of the folder's quality estimator).
        """
        input_format = kwargs.pop("input_format", None) or "text"
        if input_format not in ("text", "html"):
            raise ValueError(f"input_format {input_format!r}: choose text or html")
        if input_format == "html" and kwargs.get("quality"):
            raise ValueError("quality=True estimates translations of text, not of input_format='html'")
        if input_format == "html":
            return self._translate_html(texts, kwargs)
        if any(kwargs.get(name) is not None for name in LEXICAL_KEYS) or kwargs.get("quality"):
            return self._translate_with_terminology(texts, kwargs)
        kwargs.pop("quality", None)
        if isinstance(texts, str):
            return super().__call__(texts, **kwargs)
        if not isinstance(texts, (list, tuple)) or not all(isinstance(text, str) for text in texts):
            raise TypeError("TranslationPipeline takes a string or a list of strings")
        if not texts:
            return []
        results = super().__call__(list(texts), **kwargs)
        return [result[0] for result in results] if all(len(result) == 1 for result in results) else results

    def _translate_with_terminology(
        self, texts: str | list[str], kwargs: dict[str, Any]
    ) -> list[Translation] | list[list[Translation]]:
        """Translate with a glossary, a prefix or phrases to avoid, or with quality estimates, through the package's
        `Translator`."""
        translator_class = terminology_translator()
        if translator_class is None:
            raise ValueError(
                "glossary=, prefix=, avoid= and quality= need the hf_bahdanau package (pip install hf_bahdanau, then "
                "import hf_bahdanau): generate() places no required terms and estimates nothing"
            )
        options = {**self.generate_defaults, **kwargs}
        single = isinstance(texts, str)
        n_best = options.pop("num_return_sequences", None) or 1
        settings = {"batch_size": options.pop("batch_size", None) or 32}
        read_estimator, folder = terminology_translator("read_estimator"), self.model.name_or_path
        if options.get("quality") and read_estimator is not None and os.path.isdir(folder):
            settings["quality_estimator"] = read_estimator(folder)  # of the folder the model was loaded from
        translator = translator_class(self.model, self.tokenizer, **settings)
        found = translator.translate([texts] if single else list(texts), n_best=n_best, **options)
        results = [[{"translation_text": hypothesis.text} for hypothesis in translation.hypotheses]
                   for translation in found]  # fmt: skip
        if options.get("quality"):  # the best hypothesis's estimate (None for a blank text)
            for translation, dicts in zip(found, results, strict=True):
                dicts[0]["quality"] = None if translation.quality is None else translation.quality.as_dict()
        if single:
            return results[0]
        return [result[0] for result in results] if n_best == 1 else results

    def _translate_html(self, texts: str | list[str], kwargs: dict[str, Any]) -> list[Translation]:
        """Translate HTML through the package's `Translator` (`translate_html`)."""
        translator_class = terminology_translator()
        if translator_class is None:
            raise ValueError("input_format='html' needs the hf_bahdanau package (pip install hf_bahdanau, then import "
                             "hf_bahdanau)")  # fmt: skip
        options = {**self.generate_defaults, **kwargs}
        translator = translator_class(self.model, self.tokenizer, batch_size=options.pop("batch_size", None) or 32)
        found = translator.translate_html([texts] if isinstance(texts, str) else list(texts), **options)
        results = [{"translation_text": text} for text in found]
        return results if not isinstance(texts, str) else results[:1]

    def _sanitize_parameters(self, **generate_kwargs: Any) -> tuple[dict, dict, dict]:
        return {}, generate_kwargs, {}

    def preprocess(self, text: str) -> dict[str, torch.Tensor]:
        return encode(self.tokenizer, text, source_limit(self.model.config, self.tokenizer))

    def _forward(self, model_inputs: dict[str, torch.Tensor], **generate_kwargs: Any) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = model_inputs["input_ids"], model_inputs["attention_mask"]  # (batch, src_len)
        generate_kwargs = {**self.generate_defaults, **generate_kwargs}  # the call's on top of the pipeline's
        config = generate_kwargs.get("generation_config") or self.model.generation_config
        per_input = generate_kwargs.get("num_return_sequences") or config.num_return_sequences or 1
        keep = attention_mask.bool().any(1)  # (batch,); empty inputs never reach the model
        pad = pad_id(self.tokenizer)
        output_ids = input_ids.new_full((input_ids.shape[0], per_input, 1), pad)  # (batch, per_input, tgt_len)
        if keep.any():
            generated = self.model.generate(
                input_ids=input_ids[keep], attention_mask=attention_mask[keep], **generate_kwargs
            )  # (kept * per_input, tgt_len)
            generated = generated.reshape(int(keep.sum()), per_input, -1)
            output_ids = output_ids.expand(-1, -1, generated.shape[-1]).clone()
            output_ids[keep] = generated
        return {"output_ids": output_ids}

    def postprocess(self, model_outputs: dict[str, torch.Tensor]) -> list[Translation]:
        # output_ids: (1, per_input, tgt_len), one input at a time
        return [
            {"translation_text": self.tokenizer.decode(ids, skip_special_tokens=True)}
            for ids in model_outputs["output_ids"][0]
        ]


def register_pipeline() -> None:
    """Register `TranslationPipeline` for `pipeline(TASK, ...)` and `REGISTERED_ALIASES` with
    `AutoModelForSeq2SeqLM` models, and name every alias of `TASK_ALIASES` for saved folders; idempotent."""
    for task in (TASK, *REGISTERED_ALIASES):
        if PIPELINE_REGISTRY.supported_tasks.get(task, {}).get("impl") is not TranslationPipeline:
            PIPELINE_REGISTRY.register_pipeline(
                task, pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
            )


def _name_every_task(folder: Path) -> None:
    """Name the folder's pipeline (saved under one task in its `config.json`) under `TASK` and every alias."""
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    spec = next(iter(config["custom_pipelines"].values()))
    config["custom_pipelines"] = {task: spec for task in (TASK, *TASK_ALIASES)}
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def save_for_pipeline(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: str | os.PathLike) -> Path:
    """Save model, tokenizer and this pipeline's code so that `pipeline(TASK, model=folder,
    trust_remote_code=True)` works without this package; the model's config gets `custom_pipelines` only in
    the saved copy, and the tokenizer's fingerprint (checked when the folder is loaded by the command line)."""
    register_pipeline()
    model.config.tokenizer_fingerprint = tokenizer_fingerprint(tokenizer)
    pipe = TranslationPipeline(model=model, tokenizer=tokenizer, task=TASK, device=model.device)
    had_custom = "custom_pipelines" in model.config.__dict__
    previous = getattr(model.config, "custom_pipelines", None)
    try:
        pipe.save_pretrained(folder)  # sets model.config.custom_pipelines and copies this file into folder
        _name_every_task(Path(folder))
    finally:
        if had_custom:
            model.config.custom_pipelines = previous
        else:
            del model.config.custom_pipelines
    logger.info("saved a %s pipeline in %s", TASK, folder)
    return Path(folder)


__all__ = [
    "TASK",
    "REGISTERED_ALIASES",
    "TASK_ALIASES",
    "TranslationPipeline",
    "check_tokenizer_matches",
    "encode",
    "pad_id",
    "register_pipeline",
    "save_for_pipeline",
    "terminology_translator",
    "tokenizer_fingerprint",
    "transformers_provides",
]
