"""Tiny models of both types, the inputs the model tests share, and the tiny command-line runs the CLI tests share."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import GenerationConfig, LogitsProcessor

from hf_bahdanau import get_model_type

VOCAB = 40
MODEL_TYPES = ["bahdanau", "d2l_transformer"]


def tiny_sizes(model_type: str, width: int = 16) -> dict:
    """Config sizes of a tiny model `width` wide (no dropout, so train mode is deterministic)."""
    if model_type == "bahdanau":
        return dict(embedding_size=width, hidden_size=width, dropout=0.0)
    return dict(d_model=width, ffn_dim=2 * width, attention_heads=2, dropout=0.0)


def make_model(model_type: str, seed: int = 0, width: int = 16, **overrides):
    """A tiny model in eval mode with vocabulary `VOCAB` unless overridden."""
    config_class, model_class = get_model_type(model_type)
    torch.manual_seed(seed)
    settings = dict(vocab_size=VOCAB, **tiny_sizes(model_type, width))
    settings.update(overrides)
    return model_class(config_class(**settings)).eval()


TINY_CORPUS = [
    "Ein Mann fährt Fahrrad.", "A man is riding a bicycle.", "Zwei Hunde spielen im Schnee.",
    "Two dogs are playing in the snow.", "Eine Frau liest ein Buch im Park.", "A woman is reading a book in the park.",
    "Kinder laufen am Strand entlang.", "Children are running along the beach.", "Ein Junge springt ins Wasser.",
    "A boy jumps into the water.", "Die Leute warten auf den Bus.", "People are waiting for the bus.",
]  # fmt: skip
"""German-English pairs the `tokenizer` fixture (conftest) learns its 120 tokens from, unless a module has CORPUS."""


def tiny_translator(model_type: str, tokenizer, beams: int, max_new_tokens: int | None = None, **config):
    """A tiny random model 32 wide for `tokenizer`'s vocabulary that searches `beams` beams by default (and at most
    `max_new_tokens` new tokens where given); `config`: more config settings (e.g. `source_language="de"`)."""
    model = make_model(model_type, width=32, vocab_size=len(tokenizer), **config)
    model.generation_config.num_beams = beams
    if max_new_tokens is not None:
        model.generation_config.max_new_tokens = max_new_tokens
    return model


def greedy_config(**kwargs) -> GenerationConfig:
    """A generation config with the model's special tokens and nothing else (greedy unless overridden)."""
    settings = dict(decoder_start_token_id=1, eos_token_id=2, pad_token_id=0, num_beams=1, do_sample=False)
    return GenerationConfig(**{**settings, **kwargs})


def random_ids(*shape, seed=0, vocab=VOCAB):
    return torch.randint(3, vocab, shape, generator=torch.Generator().manual_seed(seed))


def tiny_train_argv(data, output, *extra: str) -> list[str]:
    """`main()` arguments of a tiny `train` on the Tatoeba en-fr file `data`: an RNN 16 wide, 6 steps of 32 pairs,
    logged every 2 steps, evaluated and saved at step 6 (about 10 s), then `extra`."""
    return ["train", "--data", str(data), "--output-dir", str(output), "--src-lang", "en", "--tgt-lang", "fr",
            "--max_train_samples", "200", "--max_eval_samples", "8", "--vocab_size", "300", "--embedding_size", "16",
            "--hidden_size", "16", "--per_device_train_batch_size", "32", "--max_steps", "6", "--logging_steps", "2",
            "--eval_steps", "6", "--save_steps", "6", "--generation_max_length", "10", "--generation_num_beams", "1",
            *extra]  # fmt: skip


class SourceLengthLimit(LogitsProcessor):
    """`generate()`'s version of the search's per-source length bound (`decoding.search.force_end`), for the oracle:
    `</s>` forced once a row has generated its limit's tokens but one."""

    def __init__(self, limits: torch.Tensor, eos_token_id: int) -> None:
        self.limits = limits  # (rows,): each row's most new tokens, `</s>` included
        self.eos_token_id = eos_token_id

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        ended = self.limits.to(scores.device) - 1 <= input_ids.shape[1] - 1  # (rows,), after the decoder start
        scores = scores.clone()
        scores[ended] = -torch.inf
        scores[ended, self.eos_token_id] = 0.0
        return scores


# ---- command line runs ----

TINY_RUN = [
    "--src-lang", "en", "--tgt-lang", "fr",
    "--max_train_samples", "300", "--max_eval_samples", "16", "--vocab_size", "400",
    "--encoder_layers", "1", "--decoder_layers", "1", "--dropout", "0.0",
    "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "16",
    "--learning_rate", "0.01", "--warmup_steps", "0", "--logging_steps", "5",
    "--generation_num_beams", "2", "--generation_max_length", "20", "--label_smoothing_factor", "0.1",
]  # fmt: skip
TINY_MODEL = {
    "bahdanau": ["--embedding_size", "32", "--hidden_size", "32"],
    "d2l_transformer": ["--model_type", "transformer", "--d_model", "32", "--attention_heads", "2", "--ffn_dim", "64",
                        "--init_std", "0.18"],
}  # fmt: skip
TINY = [*TINY_RUN, *TINY_MODEL["bahdanau"]]


@contextlib.contextmanager
def kept_process_state() -> Iterator[None]:
    """What the block changes in this process is put back after it: the environment, the working folder, signal
    handlers (those set from Python), the handlers added to the root logger (pytest's own aside, which it swaps
    between a test's phases) and its level, torch's thread count, and the progress-bar switches of the Hugging Face
    libraries imported before it. `main(argv)` changes some of these, as the process it was written for may."""
    environment, folder = dict(os.environ), os.getcwd()
    handlers = {number: signal.getsignal(number) for number in _settable_signals()}
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    bars = {name: is_on(sys.modules[name]) for name, (is_on, *_) in _PROGRESS_BARS.items() if name in sys.modules}
    try:
        yield
    finally:
        for name in set(os.environ) - set(environment):
            del os.environ[name]
        os.environ.update({name: value for name, value in environment.items() if os.environ.get(name) != value})
        os.chdir(folder)
        for number, handler in handlers.items():
            if handler is not None and signal.getsignal(number) is not handler:
                signal.signal(number, handler)
        for handler in root.handlers[:]:
            if handler not in root_handlers and not type(handler).__module__.startswith("_pytest."):
                root.removeHandler(handler)
                handler.close()
        root.setLevel(root_level)
        if threads is not None and sys.modules["torch"].get_num_threads() != threads:
            sys.modules["torch"].set_num_threads(threads)
        for name, was_on in bars.items():
            is_on, turn_on, turn_off = _PROGRESS_BARS[name]
            if is_on(sys.modules[name]) != was_on:
                getattr(sys.modules[name], turn_on if was_on else turn_off)()


def _settable_signals() -> list[signal.Signals]:
    """The signals whose handler Python may set."""
    return [number for number in signal.valid_signals() if number not in (signal.SIGKILL, signal.SIGSTOP)]


# The Hugging Face libraries' global progress-bar switches, by the module that holds them: whether bars are on, and the
# names of the functions that turn them on and off. (huggingface_hub's last: transformers' switch turns it too.)
_PROGRESS_BARS = {
    "transformers.utils.logging": (lambda m: m.is_progress_bar_enabled(), "enable_progress_bar",
                                   "disable_progress_bar"),
    "datasets.utils": (lambda m: not m.are_progress_bars_disabled(), "enable_progress_bars", "disable_progress_bars"),
    "huggingface_hub.utils": (lambda m: not m.are_progress_bars_disabled(), "enable_progress_bars",
                              "disable_progress_bars"),
}  # fmt: skip


def error_of(argv: list[str], caplog: pytest.LogCaptureFixture) -> str:
    """`main(argv)` run in this process: it returns 1 having logged one line at ERROR last; that line."""
    from hf_bahdanau.cli import main

    assert main(argv) == 1
    record = caplog.records[-1]
    assert record.levelname == "ERROR" and "\n" not in record.getMessage(), record.getMessage()
    return record.getMessage()


def weights_digest(model: torch.nn.Module) -> str:
    """A sha256 over a model's weights, in name order."""
    state = model.state_dict()
    return hashlib.sha256(b"".join(state[name].numpy().tobytes() for name in sorted(state))).hexdigest()


def copy_model(folder: Path, destination: Path) -> Path:
    """A copy of a model folder without its checkpoints."""
    return shutil.copytree(folder, destination, ignore=shutil.ignore_patterns("checkpoint-*"))


def swap_two_tokens(folder: Path) -> None:
    """Give the folder's tokenizer another vocabulary of the same size (two ids swapped)."""
    tokenizer_file = folder / "tokenizer.json"
    tokenizer = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    vocabulary = tokenizer["model"]["vocab"]
    first, second = [token for token, index in vocabulary.items() if index in (10, 11)]
    vocabulary[first], vocabulary[second] = vocabulary[second], vocabulary[first]
    tokenizer_file.write_text(json.dumps(tokenizer), encoding="utf-8")


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its relative path: what it holds."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def logged_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages logged at ERROR."""
    return [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]


EN_FR_SENTENCES = ["i see the dog .", "we like green tea .", "they want a red house .", "you need the cat ."]


DIGIT_WORDS = "zero one two three four five six seven eight nine".split()


def numbered_sentence(number: int) -> str:
    """A distinct sentence of 2 to 8 words for each number (its digits spelt out, then filler by its size)."""
    digits = [DIGIT_WORDS[int(d)] for d in str(number)]
    return " ".join(digits + ["and"] * (number % 6))


def numbers_corpus(folder: Path) -> Path:
    """A Multi30k-style folder of `numbered_sentence`s: 203 distinct training pairs, 20 validation and 10 test pairs."""
    folder.mkdir()
    for stem, numbers in (("train", range(203)), ("val", range(300, 320)), ("test", range(400, 410))):
        (folder / f"{stem}.en").write_text("".join(numbered_sentence(n) + "\n" for n in numbers), "utf-8")
        (folder / f"{stem}.fr").write_text("".join(numbered_sentence(n).upper() + " !\n" for n in numbers), "utf-8")
    return folder


TINY_STREAM = [
    "--src-lang", "en", "--tgt-lang", "fr", "--test_split", "test", "--vocab_size", "200",
    "--embedding_size", "16", "--hidden_size", "16", "--encoder_layers", "1", "--decoder_layers", "1",
    "--dropout", "0.0", "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "10",
    "--learning_rate", "0.01", "--warmup_steps", "0", "--lr_scheduler_type", "constant", "--logging_steps", "1",
    "--generation_max_length", "10", "--eval_strategy", "no", "--load_best_model_at_end", "false",
    "--streaming", "true", "--bucket_buffer_size", "40",
]  # fmt: skip


# A word-level corpus for pipeline tests (`train_tokenizer(WORD_CORPUS, None, model="word", min_freq=1)`), texts to
# translate with it, and the new tokens a pipeline test generates.
_SUBJECTS = ["i", "you", "we", "they", "the cat"]
_VERBS = ["see", "like", "want", "have", "need"]
_OBJECTS = ["the dog .", "green tea .", "a red house ."]
WORD_CORPUS = [" ".join(words) for words in itertools.product(_SUBJECTS, _VERBS, _OBJECTS)][:50]
WORD_TEXTS = [
    "i see the dog .", "we like green tea .", "the cat wants a red house and green tea .", "you .", "they need",
]  # fmt: skip
PIPELINE_NEW_TOKENS = 6
