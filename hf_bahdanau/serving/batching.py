"""Dynamic batching: the sentences of requests that arrive together are translated in one batch.

Each model has a queue of sentences and one thread that translates them. When the thread is free and sentences
wait, it waits for more while they keep coming: until none has come for `wait` seconds since the later of the last
arrival and the end of its previous batch, the batch is full, or `MAX_WAIT` times `wait` have passed (clients
answered by one batch send their next requests together, joining those that came meanwhile: one batch, not two).
Then it takes the waiting sentences in arrival order
while the batch's padded size (sentences x the longest's tokens) stays within `batch_tokens` and it has at most
`batch_size` sentences; a request is answered as soon as the batch holding its last sentence is done. Sentences
asking for a different number of alternatives, another glossary or alignments (HTML) wait for a batch of their own.
At most `queue_limit` sentences may wait: a request that would pass it is refused (429; 400 for a request of more
sentences than that), and a request whose client has gone frees its waiting sentences at once.

A model has two such queues (`Lanes`): one for requests with a glossary, whose target terms can make a batch's
translations far longer than its sources, and one for the rest, which never wait behind them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hf_bahdanau.decoding.glossary import Glossary

from .shapes import ApiError

logger = logging.getLogger(__name__)
MAX_WAIT = 10  # a batch's first sentence waits at most this many times `wait`


@dataclass(eq=False)
class Job:
    """One request's sentences; `future` gets each sentence's translations (n-best lists) in order."""

    texts: list[str]
    n_best: int
    future: asyncio.Future
    results: list = field(default_factory=list)
    waiting: int = 0  # sentences not yet taken into a batch
    remaining: int = 0  # sentences not yet translated
    cancelled: bool = False
    glossary: Glossary | None = None
    aligned: bool = False  # each hypothesis as (text, Pharaoh alignment or None), for HTML

    @property
    def decoding(self) -> tuple[int, Glossary | None, bool]:
        """What sentences translated in one batch must share."""
        return self.n_best, self.glossary, self.aligned


@dataclass(eq=False)
class _Item:
    job: Job
    index: int
    tokens: int
    arrival: float


class Batcher:
    """The queue and translating thread of one model: `translate(texts, n_best, glossary)` -> n-best lists (run in
    the thread), `count_tokens(texts)` -> source lengths (run by `submit`'s caller)."""

    def __init__(
        self,
        translate: Callable[[list[str], int, Glossary | None], list[list[str]]],
        count_tokens: Callable[[list[str]], list[int]],
        *,
        wait: float = 0.02,
        batch_tokens: int = 4096,
        batch_size: int = 64,
        queue_limit: int = 2000,
        name: str = "model",
    ) -> None:
        self._translate, self._count_tokens = translate, count_tokens
        self.wait, self.batch_tokens, self.batch_size, self.queue_limit = wait, batch_tokens, batch_size, queue_limit
        self._queue: deque[_Item] = deque()
        self._waiting = 0  # sentences in the queue whose request still wants them
        self._last_arrival = 0.0
        self._closed = False
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"batcher-{name}", daemon=True)
        self.batches = 0  # batches translated (for /health)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def waiting(self) -> int:
        return self._waiting

    def submit(self, texts: list[str], n_best: int = 1, glossary: Glossary | None = None, aligned: bool = False) -> Job:
        """Queue a request's sentences (in the event loop); `Job.future` completes when all are translated (with
        `aligned`, each hypothesis as `(text, alignment)`: `translate(..., aligned=True)`).
        ApiError 429 when the queue is full, 400 for more sentences than it holds, 503 when the server is
        stopping."""
        loop = asyncio.get_running_loop()
        job = Job(list(texts), n_best, loop.create_future(), [None] * len(texts), len(texts), len(texts), False,
                  glossary, aligned)  # fmt: skip
        if not texts:
            job.future.set_result([])
            return job
        if len(texts) > self.queue_limit:  # it would never fit: no use retrying
            raise ApiError(
                400, f"Invalid request: request ({len(texts)} sentences) exceeds the queue ({self.queue_limit})"
            )
        tokens = self._count_tokens(job.texts)
        now = time.monotonic()
        with self._condition:
            if self._closed:
                raise ApiError(503, "The server is shutting down")
            if self._waiting + len(texts) > self.queue_limit:
                raise ApiError(
                    429,
                    f"Slowdown: {self._waiting} sentences are waiting to be translated (at most {self.queue_limit}); "
                    "retry in a moment",
                    {"Retry-After": "1"},
                )
            self._queue.extend(_Item(job, i, count, now) for i, count in enumerate(tokens))
            self._waiting += len(texts)
            self._last_arrival = now
            self._condition.notify()
        return job

    def cancel(self, job: Job) -> None:
        """Drop a request's sentences that no batch has taken yet (its client has gone)."""
        with self._condition:
            if not job.cancelled:
                job.cancelled = True
                self._waiting -= job.waiting
                job.waiting = 0

    def close(self, timeout: float | None = None) -> None:
        """Stop the thread once the batch in progress is done, waiting for it at most `timeout` seconds (the thread
        is a daemon: a batch left unfinished ends with the process); requests still waiting get 503."""
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("stopping with a batch still being translated (its requests were answered 503)")
        for item in self._queue:
            if not item.job.cancelled:
                _fail(item.job, ApiError(503, "The server is shutting down"))
        self._queue.clear()

    # ---- the thread -------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            if batch:
                self._translate_batch(batch)

    def _next_batch(self) -> list[_Item] | None:
        """The next batch (see the module's docstring), [] if every waiting sentence was cancelled, None once
        closed."""
        free_since = time.monotonic()
        with self._condition:
            while not self._queue and not self._closed:
                self._condition.wait()
            if self._closed:
                return None
            latest = max(self._queue[0].arrival, free_since) + MAX_WAIT * self.wait
            while not self._closed and not self._select(take=False):
                left = min(latest, max(self._last_arrival, free_since) + self.wait) - time.monotonic()
                if left <= 0:
                    break
                self._condition.wait(left)
            return self._select(take=True) or []

    def _select(self, take: bool) -> list[_Item] | bool:
        """Take the batch from the queue (`take`), or say whether the waiting sentences fill one already. Cancelled
        sentences are dropped on the way."""
        batch: list[_Item] = []
        rest: deque[_Item] = deque()
        longest, full = 0, False
        for item in self._queue:
            if item.job.cancelled:
                continue
            if batch and item.job.decoding != batch[0].job.decoding:
                rest.append(item)
                continue
            size = (len(batch) + 1) * max(longest, item.tokens)  # padded tokens with this sentence in
            if batch and (full or size > self.batch_tokens or len(batch) >= self.batch_size):
                full = True
                rest.append(item)
                continue
            batch.append(item)
            longest = max(longest, item.tokens)
        if not take:
            return full or len(batch) >= self.batch_size
        self._queue = rest
        for item in batch:
            item.job.waiting -= 1
        self._waiting -= len(batch)
        return batch

    def _translate_batch(self, batch: list[_Item]) -> None:
        try:
            texts = [item.job.texts[item.index] for item in batch]
            n_best, glossary, aligned = batch[0].job.decoding
            found = (self._translate(texts, n_best, glossary, aligned=True) if aligned
                     else self._translate(texts, n_best, glossary))  # fmt: skip
        except Exception as error:  # a bug or a broken model: those requests get 500, the server goes on
            logger.exception("translating a batch of %d sentences failed", len(batch))
            for job in {item.job for item in batch}:
                _fail(job, ApiError(500, f"Cannot translate text: {type(error).__name__}"))
            return
        self.batches += 1
        for item, hypotheses in zip(batch, found, strict=True):
            job = item.job
            job.results[item.index] = hypotheses
            job.remaining -= 1
            if job.remaining == 0 and not job.cancelled:
                job.future.get_loop().call_soon_threadsafe(_resolve, job.future, job.results)


class Lanes:
    """A model's two `Batcher`s, each with its own thread: requests with a glossary go to one, the rest to the
    other. `translate` runs in both threads, each lane's calls with or without a glossary only."""

    def __init__(
        self,
        translate: Callable[[list[str], int, Glossary | None], list[list[str]]],
        count_tokens: Callable[[list[str]], list[int]],
        *,
        name: str = "model",
        **options: float,
    ) -> None:
        self.plain = Batcher(translate, count_tokens, name=name, **options)
        self.glossary = Batcher(translate, count_tokens, name=f"{name}-glossary", **options)

    def _lane(self, glossary: Glossary | None) -> Batcher:
        return self.plain if glossary is None else self.glossary

    def start(self) -> None:
        self.plain.start()
        self.glossary.start()

    @property
    def alive(self) -> bool:
        return self.plain.alive and self.glossary.alive

    @property
    def waiting(self) -> int:
        return self.plain.waiting + self.glossary.waiting

    @property
    def batches(self) -> int:
        return self.plain.batches + self.glossary.batches

    def submit(self, texts: list[str], n_best: int = 1, glossary: Glossary | None = None, aligned: bool = False) -> Job:
        """`Batcher.submit` on the request's lane."""
        return self._lane(glossary).submit(texts, n_best, glossary, aligned)

    def cancel(self, job: Job) -> None:
        """`Batcher.cancel` on the request's lane."""
        self._lane(job.glossary).cancel(job)

    def close(self, timeout: float | None = None) -> None:
        """`Batcher.close` on both lanes, within `timeout` seconds in all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for lane in (self.plain, self.glossary):
            lane.close(None if deadline is None else max(0.0, deadline - time.monotonic()))


def _resolve(future: asyncio.Future, results: list) -> None:
    if not future.done():
        future.set_result(results)


def _reject(future: asyncio.Future, error: Exception) -> None:
    if not future.done():
        future.set_exception(error)


def _fail(job: Job, error: Exception) -> None:
    job.future.get_loop().call_soon_threadsafe(_reject, job.future, error)


__all__ = ["Batcher", "Job", "Lanes"]
