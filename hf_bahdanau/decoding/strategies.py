"""How a beam search picks each step's candidates (fairseq's `search.py`): `BestCandidates`, generate()'s best
`2 * beams` continuations, and `PhraseAllocation`, dynamic beam allocation for required phrases (`constraints`).

A strategy masks the model's log-probabilities, picks the candidates from the masked beam scores and may keep a
record of its own for each running hypothesis (the phrases it holds), which follows the beams the search chooses and
the sentences it keeps; it may settle a sentence earlier than generate()'s rule does.
"""

from __future__ import annotations

import torch

from .beams import NEG, BeamState, Candidates
from .constraints import Constraints
from .settings import SearchSettings


class BestCandidates:
    """generate()'s candidates: the best `2 * beams` continuations by beam score, taken in that order;
    `constraints` (a prefix, phrases to avoid) mask the log-probabilities first (fairseq's `BeamSearch`)."""

    def __init__(self, settings: SearchSettings, constraints: Constraints | None = None) -> None:
        self.beams, self.eos = settings.num_beams, settings.eos_token_id
        self.constraints = constraints

    def mask(self, log_probs: torch.Tensor, state: BeamState, cur_len: int) -> torch.Tensor:
        """`log_probs` `(size * beams, vocab)` with -inf on the tokens the constraints forbid each beam next."""
        if self.constraints is None:
            return log_probs
        sources = state.sentences.repeat_interleave(self.beams)
        return self.constraints.mask(log_probs, state.histories(cur_len), sources, self.eos, self.unmet(state))

    def unmet(self, state: BeamState) -> torch.Tensor | None:
        """`(size * beams,)` the beams that may not end yet (None: any may)."""
        return None

    def candidates(self, scores: torch.Tensor, state: BeamState, cur_len: int) -> Candidates:
        """The candidates of each sentence from the beam scores `(size, beams, vocab)` of every continuation."""
        top_scores, top_indices = torch.topk(scores.view(state.size, -1), 2 * self.beams)  # (size, 2 * beams)
        return Candidates(top_scores, top_indices, top_scores)

    def follow(self, candidates: Candidates, chosen: torch.Tensor) -> None:
        """The running beams are now `candidates`' `chosen` `(size, beams)`."""

    def settles(self, state: BeamState, best_running: torch.Tensor, settled: torch.Tensor) -> torch.Tensor:
        """`(size,)` the sentences final: those `settled` by generate()'s rule, and any this strategy's own rule
        settles given the best score a running beam may reach (`best_running` `(size,)`)."""
        return settled

    def keep(self, kept: torch.Tensor) -> None:
        """Only the sentences `kept` stay in the search."""


class PhraseAllocation(BestCandidates):
    """Dynamic beam allocation (`Constraints.candidates`; fairseq's `LexicallyConstrainedBeamSearch`): candidates
    taken round-robin across banks of phrase progress, and a beam may end only once it holds every phrase.

    Its own stopping rule: a sentence with phrases is final once no running hypothesis, normalized as generate()'s
    heuristic does, beats the last of the `num_return_sequences` finished ones that hold every phrase. generate()'s
    rule waits for `num_beams` such hypotheses, which under the allocation's forced continuations keeps a sentence,
    and its batch, running long after its result is settled.
    """

    def __init__(self, settings: SearchSettings, constraints: Constraints, batch: int, device: torch.device) -> None:
        super().__init__(settings, constraints)
        self.returned = settings.num_return_sequences
        self.lengths = constraints.required_lengths(torch.arange(batch, device=device))  # (batch, phrases)
        self.has_phrases = (self.lengths > 0).any(-1)  # (batch,)
        # (size, beams, phrases): the phrases each running hypothesis holds
        self.met = torch.zeros((batch, self.beams, self.lengths.shape[1]), dtype=torch.bool, device=device)
        self.in_order = -torch.arange(2 * self.beams, dtype=torch.float32, device=device)  # the order, as a rank

    def unmet(self, state: BeamState) -> torch.Tensor:
        return ((~self.met) & (self.lengths[state.sentences, None] > 0)).any(-1).flatten()

    def candidates(self, scores: torch.Tensor, state: BeamState, cur_len: int) -> Candidates:
        found = self.constraints.candidates(scores, state.running, self.met, state.sentences, cur_len, 2 * self.beams)
        top_scores, top_indices, top_met = found  # (size, 2 * beams), (size, 2 * beams, phrases)
        complete = (top_met | (self.lengths[state.sentences, None] == 0)).all(-1)  # (size, 2 * beams)
        return Candidates(top_scores, top_indices, self.in_order.expand(state.size, -1), complete, top_met)

    def follow(self, candidates: Candidates, chosen: torch.Tensor) -> None:
        self.met = candidates.met.gather(1, chosen[:, :, None].expand(-1, -1, self.met.shape[-1]))

    def settles(self, state: BeamState, best_running: torch.Tensor, settled: torch.Tensor) -> torch.Tensor:
        last_returned = state.finished_scores[:, self.returned - 1]  # (size,): below NEG / 4 where it lacks a phrase
        beaten = (last_returned > NEG / 4) & (best_running <= last_returned)  # (size,)
        return settled | (self.has_phrases[state.sentences] & beaten)

    def keep(self, kept: torch.Tensor) -> None:
        self.met = self.met[kept]


def strategy_for(
    settings: SearchSettings, constraints: Constraints | None, batch: int, device: torch.device
) -> BestCandidates:
    """Dynamic beam allocation where the constraints require phrases, else generate()'s candidates."""
    if constraints is not None and constraints.has_required:
        return PhraseAllocation(settings, constraints, batch, device)
    return BestCandidates(settings, constraints)


__all__ = ["BestCandidates", "PhraseAllocation", "strategy_for"]
