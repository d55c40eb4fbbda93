"""The state of a beam search: for each sentence still in the batch, its running and finished hypotheses (fairseq's
`SequenceGenerator` keeps the same), advanced by one step's candidates and pruned when sentences settle.

The arithmetic and the stopping rules are `generate()`'s: the running beams are the best candidates that did not end;
a candidate among the top `beams` that ends joins the finished ones, its score divided by its length to the power
`length_penalty`; a sentence settles once no running beam can beat its worst finished one (`early_stopping`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from .settings import SearchSettings

NEG = -1.0e9  # generate()'s "no such hypothesis" score


@dataclass
class Candidates:
    """One step's candidates of each sentence, `(size, 2 * beams)`, as a strategy (`strategies`) picks them.

    scores: each candidate's beam score (its hypothesis's masked log-probabilities summed).
    indices: `beam * vocab + token`: the running beam it continues and its next token.
    ranks: the order in which the running beams are taken from them (highest first).
    complete: whether it holds every required phrase (None: every candidate does).
    met: `(size, 2 * beams, phrases)` the required phrases it holds (None: the search has none).
    """

    scores: torch.Tensor
    indices: torch.Tensor
    ranks: torch.Tensor
    complete: torch.Tensor | None = None
    met: torch.Tensor | None = None


@dataclass
class BeamState:
    """The hypotheses of the sentences left, every tensor `(size, ...)` with one row a sentence left:
    `sentences` the batch index of each, `limits` `(size, beams)` each row's most new tokens (None: no bound),
    `running` / `finished` `(size, beams, max_length)` the hypotheses with their beam `scores`, `log_probs` (under
    the model, unmasked) and, once finished, `lengths` and whether each `holds` every required phrase;
    `improvable`: generate()'s early stopping heuristic; `top_beams` `(2 * beams,)`, the same for every sentence:
    the candidates that may finish, the top `beams`; `running_traces` / `finished_traces` `(size, beams, steps,
    width)` each hypothesis's traces of the steps so far (`search.step_trace`; None: not kept)."""

    sentences: torch.Tensor
    limits: torch.Tensor | None
    running: torch.Tensor
    running_scores: torch.Tensor
    running_log_probs: torch.Tensor
    finished: torch.Tensor
    finished_scores: torch.Tensor
    finished_log_probs: torch.Tensor
    finished_lengths: torch.Tensor
    is_finished: torch.Tensor
    holds: torch.Tensor
    improvable: torch.Tensor
    top_beams: torch.Tensor = field(metadata={"shared": True})
    running_traces: torch.Tensor | None = None
    finished_traces: torch.Tensor | None = None

    @classmethod
    def start(
        cls, settings: SearchSettings, batch: int, limits: torch.Tensor | None, device: torch.device,
        traced: int | None = None,
    ) -> BeamState:  # fmt: skip
        """Every sentence with one running hypothesis, the decoder start (the other beams are no hypothesis yet);
        `traced`: the width of the step traces to keep (None: none)."""
        traces = None
        if traced is not None:
            traces = torch.zeros((batch, settings.num_beams, 0, traced), device=device)
        beams, max_length = settings.num_beams, 1 + settings.max_new_tokens
        running = torch.full((batch, beams, max_length), beam_fill(settings), dtype=torch.long, device=device)
        running[:, :, 0] = settings.decoder_start_token_id
        running_scores = torch.zeros((batch, beams), device=device)
        running_scores[:, 1:] = NEG  # the first step expands the first beam only
        return cls(
            sentences=torch.arange(batch, device=device),
            limits=None if limits is None else limits[:, None].expand(-1, beams).contiguous(),
            running=running,
            running_scores=running_scores,
            running_log_probs=torch.zeros((batch, beams), device=device),
            finished=running.clone(),
            finished_scores=torch.full((batch, beams), NEG, device=device),
            finished_log_probs=torch.zeros((batch, beams), device=device),
            finished_lengths=torch.zeros((batch, beams), dtype=torch.long, device=device),
            is_finished=torch.zeros((batch, beams), dtype=torch.bool, device=device),
            holds=torch.ones((batch, beams), dtype=torch.bool, device=device),
            improvable=torch.ones(batch, dtype=torch.bool, device=device),
            top_beams=torch.arange(2 * beams, device=device) < beams,
            running_traces=traces,
            finished_traces=None if traces is None else traces.clone(),
        )

    @property
    def size(self) -> int:
        return self.sentences.shape[0]

    def row_limits(self) -> torch.Tensor | None:
        """`(size * beams,)` each running beam's most new tokens (None: no bound)."""
        return None if self.limits is None else self.limits.flatten()

    def histories(self, cur_len: int) -> torch.Tensor:
        """`(size * beams, cur_len)` each running hypothesis so far, the decoder start first."""
        return self.running[:, :, :cur_len].reshape(-1, cur_len)

    def advance(
        self, candidates: Candidates, log_probs: torch.Tensor, cur_len: int, settings: SearchSettings,
        attention: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """Take one step's `candidates` (`log_probs` `(size * beams, vocab)`: the model's, unmasked; `attention`
        `(size * beams, src_len)`: the step's, kept where traces are): the running beams become the best that did
        not end, the finished ones the best of those kept and those that ended. Returns the chosen candidates
        `(size, beams)`, the decoder row each running beam continues `(size * beams,)` and which candidates ended
        `(size, 2 * beams)`."""
        beams, vocab = settings.num_beams, log_probs.shape[-1]
        parents, tokens = candidates.indices // vocab, candidates.indices % vocab  # (size, 2 * beams)
        sequences = along(self.running, parents)
        sequences[:, :, cur_len] = tokens
        token_log_probs = log_probs.view(self.size, -1).gather(1, candidates.indices)  # (size, 2 * beams)
        sequence_log_probs = self.running_log_probs.gather(1, parents) + token_log_probs  # (size, 2 * beams)
        traces = None
        if self.running_traces is not None:
            steps = along(attention.view(self.size, beams, -1), parents)  # (size, 2 * beams, src_len)
            step = torch.cat((steps, token_log_probs[:, :, None]), dim=2)  # (size, 2 * beams, width)
            traces = torch.cat((along(self.running_traces, parents), step[:, :, None]), dim=2)  # (.., cur_len, width)
        hits = tokens == settings.eos_token_id
        if cur_len + 1 >= self.running.shape[-1]:
            hits[:] = True
        self._finish(candidates, sequences, sequence_log_probs, hits, cur_len, settings, traces)
        chosen = torch.topk(candidates.ranks + hits.to(torch.float32) * NEG, beams)[1]  # (size, beams)
        self.running = along(sequences, chosen)
        if traces is not None:
            self.running_traces = along(traces, chosen)
        self.running_scores = (candidates.scores + hits.to(torch.float32) * NEG).gather(1, chosen)
        self.running_log_probs = sequence_log_probs.gather(1, chosen)
        rows = torch.arange(self.size, device=chosen.device)[:, None] * beams + parents.gather(1, chosen)
        return chosen, rows.flatten(), hits

    def _finish(
        self,
        candidates: Candidates,
        sequences: torch.Tensor,  # (size, 2 * beams, max_length)
        sequence_log_probs: torch.Tensor,  # (size, 2 * beams)
        hits: torch.Tensor,  # (size, 2 * beams): the candidates that end
        cur_len: int,
        settings: SearchSettings,
        traces: torch.Tensor | None = None,  # (size, 2 * beams, cur_len, width)
    ) -> None:
        """The finished hypotheses: the best `beams` of those kept and of the top `beams` candidates that end."""
        beams = settings.num_beams
        ended = hits & self.top_beams  # (size, 2 * beams)
        ended_scores = candidates.scores / (cur_len**settings.length_penalty)
        all_done = self.is_finished.all(-1, keepdim=True) & (settings.early_stopping is True)  # (size, 1)
        ended_scores += all_done.to(torch.float32) * NEG
        ended_scores += (~self.improvable[:, None]).to(torch.float32) * NEG
        ended_scores += (~ended) * NEG
        if candidates.complete is not None:  # a hypothesis cut off by its bound without every phrase ranks below all
            ended_scores += (~candidates.complete) * (NEG / 2)
        merged_scores = torch.cat((self.finished_scores, ended_scores), dim=1)
        best = torch.topk(merged_scores, beams)[1]  # (size, beams)
        if candidates.complete is not None:
            self.holds = torch.cat((self.holds, candidates.complete), 1).gather(1, best)
        self.finished = along(torch.cat((self.finished, sequences), 1), best)
        if traces is not None:  # the finished ones' traces padded by this step
            earlier = torch.nn.functional.pad(self.finished_traces, (0, 0, 0, 1))  # (size, beams, cur_len, width)
            self.finished_traces = along(torch.cat((earlier, traces), 1), best)
        self.finished_scores = merged_scores.gather(1, best)
        self.finished_log_probs = torch.cat((self.finished_log_probs, sequence_log_probs), 1).gather(1, best)
        lengths = torch.full_like(candidates.indices, cur_len)
        self.finished_lengths = torch.cat((self.finished_lengths, lengths), 1).gather(1, best)
        self.is_finished = torch.cat((self.is_finished, ended), 1).gather(1, best)

    def best_running(self, cur_len: int, settings: SearchSettings) -> torch.Tensor:
        """`(size,)` the best score a running beam may still reach, as generate()'s heuristic bounds it."""
        never = settings.early_stopping == "never" and settings.length_penalty > 0.0
        best_length = self.running.shape[-1] - 1 if never else cur_len
        return self.running_scores.max(1)[0] / (best_length**settings.length_penalty)

    def settled(self, best_running: torch.Tensor, hits: torch.Tensor, settings: SearchSettings) -> torch.Tensor:
        """`(size,)` the sentences whose finished hypotheses are final: no running beam can beat the worst of them
        (`best_running` `(size,)`), every candidate ended (`hits`), or with `early_stopping=True` all beams finished."""
        worst = torch.where(self.is_finished, self.finished_scores.min(1, keepdim=True)[0], NEG)  # (size, beams)
        self.improvable = self.improvable & (best_running[:, None] > worst).any(-1)
        settled = ~self.improvable | bool(hits.all())
        if settings.early_stopping is True:
            settled |= self.is_finished.all(1)
        return settled

    def keep(self, kept: torch.Tensor) -> torch.Tensor:
        """Keep only the sentences `kept` `(kept,)`; returns their decoder rows `(kept * beams,)`."""
        for each in fields(self):
            value = getattr(self, each.name)
            if value is not None and not each.metadata.get("shared"):
                setattr(self, each.name, value[kept])
        beams = self.running.shape[1]
        return (kept[:, None] * beams + torch.arange(beams, device=kept.device)).flatten()


def along(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`values` `(size, n, ...)` taken at `index` `(size, k)` along its second dimension: `(size, k, ...)`."""
    spread = index.view(*index.shape, *[1] * (values.dim() - 2))
    return values.gather(1, spread.expand(*index.shape, *values.shape[2:]))


def beam_fill(settings: SearchSettings) -> int:
    """generate()'s fill of beam search after `</s>` (`</s>` itself where the pad id is 0 or unset)."""
    return settings.pad_token_id or settings.eos_token_id


class BeamResults:
    """The `num_return_sequences` best finished hypotheses of each sentence of the batch, stored as it settles."""

    def __init__(self, settings: SearchSettings, batch: int, device: torch.device, traced: int | None = None) -> None:
        returned, max_length = settings.num_return_sequences, 1 + settings.max_new_tokens
        self.sequences = torch.full((batch, returned, max_length), beam_fill(settings), dtype=torch.long, device=device)
        self.lengths = torch.zeros((batch, returned), dtype=torch.long, device=device)
        self.log_probs = torch.zeros((batch, returned), device=device)
        self.holds = torch.ones((batch, returned), dtype=torch.bool, device=device)
        self.traces = None  # (batch, returned, max_length - 1, traced)
        if traced is not None:
            self.traces = torch.zeros((batch, returned, max_length - 1, traced), device=device)

    def store(self, state: BeamState, settled: torch.Tensor) -> None:
        """The results of the sentences of `state` that `settled` `(size,)`."""
        returned = self.lengths.shape[1]
        where = state.sentences[settled]
        self.sequences[where] = state.finished[settled, :returned]
        self.lengths[where] = state.finished_lengths[settled, :returned]
        self.log_probs[where] = state.finished_log_probs[settled, :returned]
        self.holds[where] = state.holds[settled, :returned]
        if self.traces is not None:
            finished = state.finished_traces[settled, :returned]  # (settled, returned, steps, width)
            self.traces[where, :, : finished.shape[2]] = finished


__all__ = ["NEG", "BeamResults", "BeamState", "Candidates", "along", "beam_fill"]
