"""Training on a corpus streamed from disk (`train --streaming`): pairs read by `datasets`' `text` builder in
streaming mode, tokenized on the fly, batched by length through a bucketing buffer, and resumed mid-stream.

`stream_train_pairs` gives the train files of a corpus folder as a `datasets.IterableDataset` of `src`/`tgt` pairs,
this process's part of it when several train (`split_dataset_by_node`). `LengthBucketedBatches` reads
`buffer_size` tokenized pairs at a time, sorts them by length, cuts them into batches and yields the batches in a
seeded order; it records where each buffer started in the stream (`IterableDataset.state_dict()`), so
`position(batches)` says where a run that consumed that many batches stands, and `resume_from` starts there.
`StreamStateCallback` stores that position in each checkpoint (`stream_state-<rank>.json`).
"""

from __future__ import annotations

import collections
import copy
import json
import logging
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import datasets
import datasets.distributed
import torch
from transformers import PreTrainedTokenizerBase, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from hf_bahdanau.data.cache import named_corpus_path
from hf_bahdanau.data.cleaning import pair_cleaner
from hf_bahdanau.data.readers import GZIP_ERRORS, folder_files
from hf_bahdanau.data.tokenized import pair_encoder
from hf_bahdanau.errors import InputError, InputNotFoundError

logger = logging.getLogger(__name__)

STREAM_STATE_FILE = "stream_state-{rank}.json"  # in each checkpoint, one per process


def stream_train_pairs(
    source: str,
    src_lang: str,
    tgt_lang: str,
    *,
    test_split: str = "test_2016_flickr",
    normalize: bool = False,
    rank: int = 0,
    world_size: int = 1,
) -> datasets.IterableDataset:
    """The train files of corpus folder `source` (or a named corpus) as a stream of cleaned `src`/`tgt` pairs: this
    process's part when `world_size` > 1 (whole shards when their count divides the world size, else every
    `world_size`-th pair)."""
    folder = Path(named_corpus_path(source) or source)
    if not folder.is_dir():
        raise InputError(
            f"--streaming reads a corpus folder of {{split}}.{{lang}}[.gz] files (its train files streamed, its "
            f"validation and test files loaded); {source} is not one"
        )
    files = folder_files(folder, src_lang, tgt_lang, test_split)
    if "train" not in files:
        raise InputNotFoundError(f"--streaming: no train.{src_lang} / train.{tgt_lang} in {folder}")
    sides = []
    for path, column in zip(files["train"], ("src", "tgt"), strict=True):
        stream = datasets.load_dataset(
            "text", data_files=str(path.resolve()), split="train", streaming=True, encoding="utf-8-sig"
        )
        sides.append(stream.rename_column("text", column))
    try:  # (reads the files' first lines)
        pairs = datasets.concatenate_datasets(sides, axis=1)  # the two files zipped by line
    except GZIP_ERRORS as error:
        raise InputError(f"a train file of {folder} is cut off or not valid gzip ({error})") from None
    if world_size > 1:
        pairs = datasets.distributed.split_dataset_by_node(pairs, rank=rank, world_size=world_size)
    where = " and ".join(map(str, files["train"]))
    return pairs.map(pair_cleaner(None, True, normalize, where), batched=True)


def tokenized_stream(
    pairs: datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    src_lang: str,
    tgt_lang: str,
    max_source_length: int,
    max_target_length: int,
) -> datasets.IterableDataset:
    """`pairs` tokenized on the fly (a lazy batched map): `input_ids`, `attention_mask`, `labels`."""
    encode = pair_encoder(tokenizer, src_lang, tgt_lang, max_source_length, max_target_length)

    def to_features(batch: dict[str, list[str]]) -> dict[str, list[Any]]:
        rows = [{src_lang: s, tgt_lang: t} for s, t in zip(batch["src"], batch["tgt"], strict=True)]
        out = encode({"translation": rows})
        del out["src_cut"], out["tgt_cut"]
        return out

    return pairs.map(to_features, batched=True, remove_columns=["src", "tgt"])


class LengthBucketedBatches(torch.utils.data.IterableDataset):
    """Batches of similar length from a stream of tokenized pairs, resumable mid-stream.

    Each pass reads `buffer_size` pairs at a time, sorts them by length, cuts them into batches of `batch_size`
    (the buffer's last one may be smaller) and yields them in an order seeded by `seed`, the pass and the buffer.
    A pass ends with the stream; the next `iter` starts the next pass. Items are lists of feature dicts (one batch):
    a `DataLoader(batch_size=None, collate_fn=...)` pads them.
    """

    def __init__(
        self, stream: datasets.IterableDataset, batch_size: int, buffer_size: int, seed: int = 0, source: str = ""
    ) -> None:
        if buffer_size < batch_size:
            raise InputError(f"--bucket_buffer_size {buffer_size} must hold at least one batch ({batch_size} pairs)")
        self.stream, self.batch_size, self.buffer_size, self.seed = stream, batch_size, buffer_size, seed
        self.source = source or "the train stream"  # what errors name
        self._start = copy.deepcopy(stream.state_dict())
        self.batches = 0  # batches yielded (or skipped when resuming) over all passes
        self.passes = 0  # passes started
        self._marks: collections.deque[dict[str, Any]] = collections.deque(maxlen=16)  # where recent buffers began
        self._resume: dict[str, Any] | None = None

    def _buffer_batches(self, buffer: list[dict[str, Any]], pass_index: int, number: int) -> list[list[dict]]:
        """The batches of one buffer: pairs sorted by length (longest side), cut, in a seeded order."""
        buffer.sort(key=lambda row: max(len(row["input_ids"]), len(row["labels"])))
        batches = [buffer[i : i + self.batch_size] for i in range(0, len(buffer), self.batch_size)]
        random.Random(f"{self.seed}-{pass_index}-{number}").shuffle(batches)
        return batches

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        """One pass: the rest of the resumed pass, or the next pass when nothing of it is left (a run stopped at a
        pass's end, or a corpus that shrank since), so that the Trainer never sees an empty pass and stops."""
        if self._resume is not None:
            mark, self._resume = self._resume, None
            self.passes, self.batches = mark["pass"] + 1, mark["batches"]
            resumed = False
            for batch in self._pass(mark["pass"], mark["buffer"], mark["state"], mark["skip"]):
                resumed = True
                yield batch
            if resumed:
                return
            if self.batches - mark["batches"] < mark["skip"]:
                logger.warning("the train stream ended before the stored position: the corpus changed since")
            logger.info("the resumed pass %d has no batch left: pass %d starts", mark["pass"], self.passes)
        pass_index = self.passes
        self.passes += 1
        empty = True
        for batch in self._pass(pass_index, 0, self._start, 0):
            empty = False
            yield batch
        if empty:
            raise InputError(f"{self.source} holds no training pair: its train files are empty")

    def _pass(self, pass_index: int, number: int, state: dict[str, Any], skip: int) -> Iterator[list[dict[str, Any]]]:
        """The batches of pass `pass_index` from buffer `number` (starting at stream state `state`), less `skip`."""
        self.stream.load_state_dict(copy.deepcopy(state))
        rows = iter(self.stream)
        while True:
            mark = {"pass": pass_index, "buffer": number, "batches": self.batches}
            mark["state"] = copy.deepcopy(self.stream.state_dict())
            try:
                buffer = [row for _, row in zip(range(self.buffer_size), rows, strict=False)]
            except GZIP_ERRORS as error:
                raise InputError(f"a train file of {self.source} is cut off or not valid gzip ({error})") from None
            if not buffer:
                return
            self._marks.append(mark)
            for batch in self._buffer_batches(buffer, pass_index, number):
                self.batches += 1
                if skip:
                    skip -= 1
                    continue
                yield batch
            number += 1

    def position(self, consumed: int) -> dict[str, Any]:
        """Where a run that consumed `consumed` batches stands: the start of its buffer in the stream and the batches
        of that buffer it has used (the data loader may have read ahead)."""
        started = [mark for mark in self._marks if mark["batches"] <= consumed]
        if not started:
            raise RuntimeError(f"the stream position of batch {consumed} is no longer known")
        mark = started[-1]
        return {**mark, "skip": consumed - mark["batches"]}

    def resume_from(self, position: dict[str, Any]) -> None:
        """Start the next `iter` where `position` (from `position`) stands."""
        self._resume = copy.deepcopy(position)


class StreamStateCallback(TrainerCallback):
    """Stores each process's stream position in every checkpoint (before its manifest is written)."""

    def __init__(self, batches: LengthBucketedBatches, rank: int) -> None:
        self.batches, self.rank = batches, rank

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        consumed = state.global_step * args.gradient_accumulation_steps
        position = self.batches.position(consumed)
        (folder / STREAM_STATE_FILE.format(rank=self.rank)).write_text(json.dumps(position), encoding="utf-8")


def resume_stream(batches: LengthBucketedBatches, checkpoint: str | Path, rank: int) -> None:
    """Continue `batches` where checkpoint `checkpoint` left this process's stream (a warning and the start of the
    stream when the checkpoint holds no position for it)."""
    path = Path(checkpoint) / STREAM_STATE_FILE.format(rank=rank)
    if not path.is_file():
        logger.warning(
            "%s has no stream position for process %d: its stream starts from the beginning", checkpoint, rank
        )
        return
    position = json.loads(path.read_text(encoding="utf-8"))
    batches.resume_from(position)
    logger.info("process %d resumes the stream at pass %d, batch %d", rank, position["pass"], position["batches"])


def stream_dataloader(
    batches: LengthBucketedBatches, collate: Callable[[list[dict]], Any]
) -> torch.utils.data.DataLoader:
    """The train data loader of a streamed run: one bucketed batch an item, padded by `collate`."""
    return torch.utils.data.DataLoader(batches, batch_size=None, collate_fn=collate)
