"""One joint tokenizer for both sides of a translation corpus, trained with the `tokenizers` library.

`train_tokenizer` returns a `transformers.PreTrainedTokenizerFast` (the `TokenizersBackend` of transformers 5)
that appends `</s>` to every sequence, so `tokenizer(src, text_target=tgt)` gives `input_ids`,
`attention_mask` and `labels` ready for a seq2seq model, and that `AutoTokenizer.from_pretrained` reads
back after `save_pretrained` without this package.

Special token ids are fixed for every model type: pad = 0, bos = 1, eos = 2, unk = 3.

- `model="bpe"` / `"unigram"`: subwords over NFC-normalised text with a Metaspace pre-tokenizer that also
  isolates punctuation (`"rennt."` -> `"▁rennt", "."`: no subword learns a word's punctuation), so
  `decode(encode(x), skip_special_tokens=True) == x` for NFC text without leading/trailing whitespace and
  whose characters were seen in training (unseen characters become `<unk>`). Tokens `<pad> <s> </s> <unk>`.
- `model="word"`: d2l's word vocabulary: `normalize_d2l` (built into the tokenizer), whitespace split,
  words seen at least `min_freq` times. Tokens `<pad> <bos> <eos> <unk>` (d2l's reserved tokens);
  decoding joins words with single spaces.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from copy import deepcopy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from hf_bahdanau.errors import InputError, InputNotFoundError

if TYPE_CHECKING:
    import datasets  # imported where used: loading a saved tokenizer needs no corpus library

logger = logging.getLogger(__name__)

MODELS = ("bpe", "unigram", "word")
SUBWORD_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
WORD_SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")  # d2l's reserved tokens, in our fixed id order


# What a saved tokenizer folder holds: its settings and special tokens, and its vocabulary (tokenizer.json; a
# sentencepiece or word-list tokenizer of another library keeps its vocabulary in one of the others).
TOKENIZER_SETTINGS = "tokenizer_config.json"
VOCABULARY_FILES = ("tokenizer.json", "*.model", "*.spm", "vocab.json", "vocab.txt")


def looks_like_a_path(location: str) -> bool:
    """Whether `location` is meant as a local path, not a Hub repo id (`name` or `owner/name`)."""
    return location.startswith(("/", ".", "~")) or location.endswith("/") or "\\" in location or location.count("/") > 1


def check_tokenizer_location(location: str | os.PathLike, what: str) -> None:
    """Raise an InputNotFoundError naming what is missing where a tokenizer should be read: a path that does not exist,
    or a folder without its settings or vocabulary. A Hub repo id passes: transformers reads it."""
    path = Path(location).expanduser()
    if not path.exists():
        if looks_like_a_path(str(location)):
            raise InputNotFoundError(f"{what} {location} not found")
        return
    if not path.is_dir():
        raise InputNotFoundError(f"{what} {location} is not a folder (a saved tokenizer is a folder)")
    missing = [] if (path / TOKENIZER_SETTINGS).is_file() else [TOKENIZER_SETTINGS]
    if not any(any(path.glob(pattern)) for pattern in VOCABULARY_FILES):
        missing.insert(0, VOCABULARY_FILES[0])
    if missing:
        raise InputNotFoundError(
            f"{what} {location} has no tokenizer: {' and '.join(missing)} missing (tokenizer.json holds the "
            "vocabulary, tokenizer_config.json the special tokens); copy them back from where the model was trained"
        )


def _sentences(
    corpus: datasets.Dataset | datasets.DatasetDict | Iterable[str], languages: Sequence[str] | None
) -> Iterator[str]:
    """Training text: the chosen languages of a translation-format dataset (train split), or the strings."""
    import datasets

    if isinstance(corpus, datasets.DatasetDict):
        if "train" not in corpus:
            raise InputError(f"a DatasetDict needs a 'train' split to train a tokenizer; it has {list(corpus)}")
        corpus = corpus["train"]
    if not isinstance(corpus, datasets.Dataset):
        if isinstance(corpus, str):
            raise TypeError("corpus must be an iterable of sentences, not one string")
        yield from corpus
        return
    if "translation" not in corpus.column_names:
        raise InputError(f"dataset has no 'translation' column; columns: {corpus.column_names}")
    for batch in corpus.iter(batch_size=1000):
        for row in batch["translation"]:
            missing = set(languages or ()) - set(row)
            if missing:
                raise InputError(f"languages {sorted(missing)} not in the corpus; available: {sorted(row)}")
            yield from (row[lang] for lang in (languages or row))


# `tokenizers` holds every training sentence in memory: above this many pairs, a tokenizer trains on a sample of them.
DEFAULT_TRAIN_SAMPLES = 1_000_000


def sample_pairs(dataset: datasets.Dataset, max_samples: int | None, seed: int = 0) -> datasets.Dataset:
    """At most `max_samples` rows of `dataset` (None: `DEFAULT_TRAIN_SAMPLES`), a seeded random sample in file order
    when it has more; the dataset itself otherwise."""
    limit = DEFAULT_TRAIN_SAMPLES if max_samples is None else max_samples
    if limit < 1:
        raise InputError(f"tokenizer_train_samples must be a positive number of pairs, got {limit}")
    if len(dataset) <= limit:
        return dataset
    chosen = np.sort(np.random.default_rng(seed).choice(len(dataset), size=limit, replace=False))
    logger.info("training the tokenizer on a sample of %d of the %d pairs", limit, len(dataset))
    return dataset.select(chosen)


def _word_normalizer() -> normalizers.Normalizer:
    """`hf_bahdanau.data.cleaning.normalize_d2l` as a `tokenizers` normaliser."""
    return normalizers.Sequence(
        [
            normalizers.Replace("\u202f", " "),
            normalizers.Replace("\xa0", " "),
            normalizers.Lowercase(),
            normalizers.Replace(Regex(r"(?<=[^ ])(?=[,.!?])"), " "),
        ]
    )


def _build(model: str, vocab_size: int | None, min_freq: int, lowercase: bool) -> tuple[Tokenizer, trainers.Trainer]:
    if model == "word":
        tokenizer = Tokenizer(models.WordLevel(unk_token=WORD_SPECIALS[3]))
        tokenizer.normalizer = _word_normalizer()
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size or 1 << 30,
            min_frequency=min_freq,
            special_tokens=list(WORD_SPECIALS),
            show_progress=False,
        )
        return tokenizer, trainer
    if vocab_size is None:
        raise InputError(f"model={model!r} needs a vocab_size")
    steps = [normalizers.NFC(), normalizers.Strip()] + ([normalizers.Lowercase()] if lowercase else [])
    if model == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=SUBWORD_SPECIALS[3]))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_freq, special_tokens=list(SUBWORD_SPECIALS), show_progress=False
        )
    else:
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SUBWORD_SPECIALS),
            unk_token=SUBWORD_SPECIALS[3],
            show_progress=False,
        )
    tokenizer.normalizer = normalizers.Sequence(steps)
    # Punctuation tokens carry no "▁" of their own, so the Metaspace decoder glues them back where they were.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(prepend_scheme="always"), pre_tokenizers.Punctuation(behavior="isolated")]
    )
    tokenizer.decoder = decoders.Metaspace(prepend_scheme="always")
    return tokenizer, trainer


def with_bpe_dropout(tokenizer: PreTrainedTokenizerFast, dropout: float) -> PreTrainedTokenizerFast:
    """A copy of a BPE `tokenizer` that skips each merge with probability `dropout` (BPE-dropout, Provilkov et al.
    2020: `tokenizers`' `BPE(dropout=...)`), so a word is split differently from call to call. For training only: the
    tokenizer itself is unchanged, and the one saved with a model has no dropout (translation is deterministic)."""
    check_bpe_dropout(dropout)
    model = getattr(tokenizer, "backend_tokenizer", None) and tokenizer.backend_tokenizer.model
    if not isinstance(model, models.BPE):
        kind = type(model).__name__ if model is not None else type(tokenizer).__name__
        raise InputError(f"BPE-dropout needs a BPE tokenizer (--tokenizer_type bpe), not a {kind} one")
    copy = deepcopy(tokenizer)
    copy.backend_tokenizer.model.dropout = dropout
    return copy


def check_bpe_dropout(dropout: float, streaming: bool = False) -> None:
    """Refuse a `train --bpe_dropout` outside [0, 1), or with --streaming (whose stream is encoded on the fly without
    it), before any work."""
    if not 0 <= dropout < 1:
        raise InputError(f"--bpe_dropout must be a probability in [0, 1), got {dropout}")
    if dropout and streaming:
        raise InputError("--bpe_dropout works on a map-style corpus, not with --streaming")


class BpeDropoutEncoder:
    """A `datasets` transform (`Dataset.with_transform`) that encodes the pairs of a `translation` column with
    BPE-dropout each time they are read (from the text: decoding ids would drop `<unk>`), cut to the lengths as
    `tokenize_corpus` cuts them (keeping `</s>`); it gives the model inputs only, not the text."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerFast,
        dropout: float,
        src_lang: str,
        tgt_lang: str,
        max_source_length: int,
        max_target_length: int,
    ) -> None:
        from hf_bahdanau.data.tokenized import pair_encoder

        self.encode = pair_encoder(
            with_bpe_dropout(tokenizer, dropout), src_lang, tgt_lang, max_source_length, max_target_length
        )

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        encoded = self.encode(batch)
        return {name: encoded[name] for name in ("input_ids", "attention_mask", "labels")}


def bpe_dropout_view(
    dataset: datasets.Dataset, texts: datasets.Dataset, encoder: BpeDropoutEncoder
) -> datasets.Dataset:
    """`dataset` (tokenized pairs) with the `translation` column of `texts` (the split it was tokenized from, row for
    row), read through `encoder`: every read, hence every epoch, segments the words anew. Its Arrow data
    (the lengths that length grouping reads) stays the deterministic encoding."""
    import datasets

    if len(texts) != len(dataset):
        raise ValueError(f"BPE-dropout: {len(texts)} sentence pairs for {len(dataset)} tokenized ones")
    texts = texts.select_columns(["translation"]).flatten_indices()  # a selection written out, as axis=1 needs
    joined = datasets.concatenate_datasets([dataset, texts], axis=1)
    return joined.with_transform(encoder)


def train_tokenizer(
    corpus: datasets.Dataset | datasets.DatasetDict | Iterable[str],
    vocab_size: int | None = 8000,
    *,
    model: str = "bpe",
    min_freq: int = 2,
    languages: Sequence[str] | None = None,
    lowercase: bool = False,
    model_max_length: int = 512,
    max_samples: int | None = None,
) -> PreTrainedTokenizerFast:
    """Train one joint tokenizer on `corpus` and wrap it for `transformers`.

    Args:
        corpus: a translation-format `Dataset`, a `DatasetDict` (its train split is used), or sentences.
        vocab_size: size of the vocabulary including the 4 special tokens (for `"word"`: a maximum; None = all
            words seen `min_freq` times).
        model: `"bpe"`, `"unigram"` or `"word"` (see the module docstring).
        min_freq: minimum frequency of a BPE merge or a word (unused by unigram).
        languages: languages of a translation-format corpus to train on (default: all present).
        lowercase: lowercase subword text (the word model always lowercases, like d2l).
        model_max_length: the longest sequence the model takes, stored in the tokenizer config.
        max_samples: train on a seeded sample of this many pairs of a dataset that has more (None: all of a corpus
            up to `DEFAULT_TRAIN_SAMPLES` pairs, a sample of that many above it), since `tokenizers` holds its input
            in memory.
    """
    import datasets

    if model not in MODELS:
        raise InputError(f"unknown tokenizer model {model!r}; choose one of {MODELS}")
    if vocab_size is not None and vocab_size <= len(SUBWORD_SPECIALS):
        raise InputError(f"vocab_size must exceed the {len(SUBWORD_SPECIALS)} special tokens, got {vocab_size}")
    tokenizer, trainer = _build(model, vocab_size, min_freq, lowercase)
    if isinstance(corpus, datasets.DatasetDict) and "train" in corpus:
        corpus = corpus["train"]
    if isinstance(corpus, datasets.Dataset):
        corpus = sample_pairs(corpus, max_samples)
    tokenizer.train_from_iterator(_sentences(corpus, languages), trainer=trainer)
    pad, bos, eos, unk = WORD_SPECIALS if model == "word" else SUBWORD_SPECIALS
    ids = [tokenizer.token_to_id(token) for token in (pad, bos, eos, unk)]
    if ids != [0, 1, 2, 3]:
        raise RuntimeError(f"special tokens got ids {ids}, expected [0, 1, 2, 3]")  # a tokenizers change
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B:1 {eos}:1", special_tokens=[(eos, 2)]
    )
    if vocab_size is not None and model != "word" and tokenizer.get_vocab_size() != vocab_size:
        logger.warning(
            "trained %d tokens, not the %d asked: the corpus is too small",
            tokenizer.get_vocab_size(),
            vocab_size,
        )
    logger.info("trained a %s tokenizer of %d tokens", model, tokenizer.get_vocab_size())
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=pad,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
