"""Attention maths of d2l's chapters "Attention Scoring Functions", "Bahdanau Attention",
"Multi-Head Attention" and "Self-Attention and Positional Encoding".

The scoring modules keep the weights of their last call in ``.attention_weights`` (as d2l); multi-head attention
returns them. Shapes follow d2l:
queries ``(batch, num_queries, query_size)``, keys ``(batch, num_kv, key_size)``, values
``(batch, num_kv, value_size)``. This file imports nothing but torch: it is copied beside the models' code into
saved model folders for ``trust_remote_code``. The models take the weights from what the calls return
(``return_weights=True``), never from ``.attention_weights``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _attention_mask(shape: torch.Size | tuple[int, int, int], valid_lens: torch.Tensor) -> torch.Tensor:
    """A boolean mask broadcastable to scores of ``shape`` ``(batch, queries, keys)``: True where attention may look."""
    batch, num_queries, num_keys = shape
    if valid_lens.shape[0] != batch:
        raise ValueError(
            f"valid_lens has batch size {valid_lens.shape[0]} (shape {tuple(valid_lens.shape)}) but the scores "
            f"have batch size {batch} (shape {tuple(shape)})"
        )
    if valid_lens.dtype == torch.bool:
        if valid_lens.dim() == 2 and valid_lens.shape[1] == num_keys:  # (batch, keys)
            return valid_lens[:, None, :]
        if valid_lens.dim() == 3 and valid_lens.shape[1] in (1, num_queries) and valid_lens.shape[2] == num_keys:
            return valid_lens
        raise ValueError(
            f"boolean mask of shape {tuple(valid_lens.shape)} does not fit scores of shape {tuple(shape)}: "
            "expected (batch, keys) or (batch, queries, keys)"
        )
    if valid_lens.dim() == 1:  # (batch,): one length per sequence
        lens = valid_lens[:, None, None]
    elif valid_lens.dim() == 2 and valid_lens.shape[1] == num_queries:  # (batch, queries): one per query
        lens = valid_lens[:, :, None]
    else:
        raise ValueError(
            f"valid_lens of shape {tuple(valid_lens.shape)} does not fit scores of shape {tuple(shape)}: "
            "expected (batch,) or (batch, queries)"
        )
    positions = torch.arange(num_keys, device=valid_lens.device)  # (keys,)
    return positions < lens  # (batch, 1 | queries, keys)


def masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last axis of ``X`` ``(batch, queries, keys)``, ignoring masked keys.

    ``valid_lens`` is ``None``, lengths ``(batch,)`` or ``(batch, queries)`` (keys at positions >= the length
    are masked, as in d2l), or a boolean mask ``(batch, keys)`` / ``(batch, queries, keys)`` (True = keep).
    Masked keys get exactly zero weight and a row with no valid key is all zeros (never NaN), in any dtype.
    """
    if valid_lens is None:
        return F.softmax(X, dim=-1)
    mask = _attention_mask(X.shape, valid_lens).to(X.device)
    scores = X.masked_fill(~mask, torch.finfo(X.dtype).min)
    return F.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def _check_keys_values(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
    if not (queries.dim() == keys.dim() == values.dim() == 3):
        raise ValueError(
            f"queries, keys and values must be 3-D (batch, length, size); got {tuple(queries.shape)}, "
            f"{tuple(keys.shape)} and {tuple(values.shape)}"
        )
    if not (queries.shape[0] == keys.shape[0] == values.shape[0]):
        raise ValueError(
            f"batch sizes differ: queries {tuple(queries.shape)}, keys {tuple(keys.shape)}, "
            f"values {tuple(values.shape)}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            f"keys and values must have the same length: keys {tuple(keys.shape)}, values {tuple(values.shape)}"
        )


def _check_size(name: str, tensor: torch.Tensor, expected: int) -> None:
    if tensor.shape[-1] != expected:
        raise ValueError(f"{name} of shape {tuple(tensor.shape)} should have last dimension {expected}")


class ScoredAttention(nn.Module):
    """Attention pooling with a scoring function: ``softmax(score(q, k)) @ v`` (d2l's common skeleton).

    Subclasses define ``score``; ``project_keys`` lets a decoder transform the keys once per source and pass
    them back as ``projected_keys`` at every step.
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """The part of the score that depends on the keys alone (identity by default)."""
        return keys

    def score(self, queries: torch.Tensor, projected_keys: torch.Tensor) -> torch.Tensor:
        """Scores ``(batch, queries, keys)``."""
        raise NotImplementedError

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        projected_keys: torch.Tensor | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Context vectors ``(batch, queries, value_size)``, and with ``return_weights`` the attention weights
        ``(batch, queries, keys)`` too; the weights are also kept in ``.attention_weights`` (as d2l)."""
        _check_keys_values(queries, keys, values)
        if projected_keys is None:
            projected_keys = self.project_keys(keys)
        scores = self.score(queries, projected_keys)  # (batch, queries, keys)
        weights = self.attention_weights = masked_softmax(scores, valid_lens)
        context = torch.bmm(self.dropout(weights), values)
        return (context, weights) if return_weights else context


class DotProductAttention(ScoredAttention):
    """Scaled dot-product scoring ``q . k / sqrt(d)``; queries and keys share the size ``d``."""

    def score(self, queries: torch.Tensor, projected_keys: torch.Tensor) -> torch.Tensor:
        if queries.shape[-1] != projected_keys.shape[-1]:
            raise ValueError(
                f"dot-product attention needs queries and keys of one size: queries {tuple(queries.shape)}, "
                f"keys {tuple(projected_keys.shape)}"
            )
        return torch.bmm(queries, projected_keys.transpose(1, 2)) / math.sqrt(queries.shape[-1])


class AdditiveAttention(ScoredAttention):
    """Bahdanau (MLP) scoring ``w_v . tanh(W_q q + W_k k)``, no biases, as in d2l."""

    def __init__(self, key_size: int, query_size: int, num_hiddens: int, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        _check_size("keys", keys, self.W_k.in_features)
        return self.W_k(keys)  # (batch, keys, num_hiddens)

    def score(self, queries: torch.Tensor, projected_keys: torch.Tensor) -> torch.Tensor:
        _check_size("queries", queries, self.W_q.in_features)
        # (batch, queries, 1, num_hiddens) + (batch, 1, keys, num_hiddens) -> (batch, queries, keys, num_hiddens)
        features = self.W_q(queries).unsqueeze(2) + projected_keys.unsqueeze(1)
        return self.w_v(torch.tanh(features)).squeeze(-1)  # (batch, queries, keys)


class BilinearAttention(ScoredAttention):
    """Luong's "general" scoring ``q^T W k``."""

    def __init__(self, key_size: int, query_size: int, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        self.W = nn.Linear(key_size, query_size, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        _check_size("keys", keys, self.W.in_features)
        return self.W(keys)  # (batch, keys, query_size)

    def score(self, queries: torch.Tensor, projected_keys: torch.Tensor) -> torch.Tensor:
        _check_size("queries", queries, self.W.out_features)
        return torch.bmm(queries, projected_keys.transpose(1, 2))  # (batch, queries, keys)


class MultiHeadAttention(nn.Module):
    """d2l's multi-head attention: ``num_heads`` scaled dot-product heads over learned projections.

    ``forward`` returns ``(output, weights)``. ``implementation="eager"`` is d2l's masked softmax and returns the
    weights ``(batch, num_heads, queries, keys)``; ``"sdpa"`` runs ``torch.nn.functional.scaled_dot_product_attention``
    (fused kernels) and returns ``None`` unless ``need_weights``, which always takes the eager path; a callable with
    the signature of transformers' attention functions (``fn(module, query, key, value, attention_mask, dropout=,
    scaling=, is_causal=)`` on ``(batch, heads, length, head_size)`` tensors and a boolean mask, returning the output
    ``(batch, queries, heads, head_size)`` and the weights or None) runs in its place. A decoder can
    project keys and values once (``project_keys_values``) and pass them back as ``key_values`` at every step. Keys
    may serve groups of queries: with ``g`` times as many query rows as key rows, key row ``i`` serves query rows
    ``g * i .. g * i + g - 1`` (e.g. the beams of one source), which is the same as repeating each key row ``g``
    times, without the copies.
    """

    def __init__(
        self,
        key_size: int,
        query_size: int,
        value_size: int,
        num_hiddens: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
    ) -> None:
        super().__init__()
        if num_hiddens % num_heads != 0:
            raise ValueError(f"num_hiddens ({num_hiddens}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def _split_heads(self, X: torch.Tensor) -> torch.Tensor:
        """(batch, length, num_hiddens) -> (batch, num_heads, length, num_hiddens / num_heads)."""
        return X.reshape(X.shape[0], X.shape[1], self.num_heads, -1).transpose(1, 2)

    def project_keys_values(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values split into heads: two ``(batch, num_heads, keys, head_size)`` tensors."""
        if keys.dim() != 3 or keys.shape[:2] != values.shape[:2]:
            raise ValueError(
                f"keys and values must be (batch, length, size) of one batch and length: keys {tuple(keys.shape)}, "
                f"values {tuple(values.shape)}"
            )
        _check_size("keys", keys, self.W_k.in_features)
        _check_size("values", values, self.W_v.in_features)
        return self._split_heads(self.W_k(keys)), self._split_heads(self.W_v(values))

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        valid_lens: torch.Tensor | None = None,
        need_weights: bool = True,
        key_values: tuple[torch.Tensor, torch.Tensor] | None = None,
        implementation: str | Callable[..., tuple[torch.Tensor, torch.Tensor | None]] = "eager",
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output ``(batch, queries, num_hiddens)`` and weights ``(batch, num_heads, queries, keys)`` or None.

        Give ``keys`` and ``values`` ``(batch, keys, size)``, or their projections ``key_values``. ``is_causal``
        (without ``valid_lens``): query ``i`` sees keys ``0 .. i``, fused into the sdpa kernel.
        """
        if key_values is None:
            if keys is None or values is None:
                raise ValueError("pass keys and values, or their projections as key_values")
            _check_keys_values(queries, keys, values)
            key_values = self.project_keys_values(keys, values)
        k, v = key_values  # (batch / group, num_heads, keys, head_size)
        if queries.dim() != 3 or queries.shape[0] % k.shape[0]:
            raise ValueError(
                f"queries must be (batch, queries, size) with the keys' batch size {k.shape[0]} or a multiple of it, "
                f"got {tuple(queries.shape)}"
            )
        group = queries.shape[0] // k.shape[0]
        if is_causal and valid_lens is not None:
            raise ValueError("pass valid_lens or is_causal, not both")
        if is_causal and group > 1:
            raise ValueError("is_causal needs as many key rows as query rows")
        _check_size("queries", queries, self.W_q.in_features)
        out, weights = self._attend(
            self._split_heads(self.W_q(queries)), k, v, valid_lens, need_weights, implementation, is_causal
        )
        batch, num_queries, _ = queries.shape
        return self.W_o(out.transpose(1, 2).reshape(batch, num_queries, -1)), weights

    def _attend(
        self,
        q: torch.Tensor,  # (batch, num_heads, queries, head_size), batch = group * keys' batch
        k: torch.Tensor,  # (batch / group, num_heads, keys, head_size)
        v: torch.Tensor,
        valid_lens: torch.Tensor | None,
        need_weights: bool,
        implementation: str | Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
        is_causal: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of the split heads: output ``(batch, num_heads, queries, head_size)`` and weights or None."""
        group, query_shape = q.shape[0] // k.shape[0], q.shape
        if group > 1:  # the queries of a group become one row's queries: (batch / group, heads, group * queries, head)
            q = q.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)
        batch, _, num_queries, _ = q.shape
        mask = None
        if valid_lens is not None:
            mask = _attention_mask((batch, num_queries, k.shape[2]), valid_lens).to(q.device)
        if need_weights or implementation == "eager":
            if is_causal:
                mask = torch.ones(num_queries, k.shape[2], dtype=torch.bool, device=q.device).tril()
                mask = mask.expand(batch, -1, -1)  # (batch, queries, keys)
            heads = batch * self.num_heads
            flat_mask = None if mask is None else mask.repeat_interleave(self.num_heads, dim=0)
            scores = self.attention.score(q.reshape(heads, num_queries, -1), k.reshape(heads, k.shape[2], -1))
            # (batch, num_heads, queries, keys): the tensor returned is the one the output is made of, so that its
            # gradient exists (retain_grad)
            weights = masked_softmax(scores, flat_mask).view(batch, self.num_heads, num_queries, -1)
            out = torch.matmul(self.attention.dropout(weights), v)  # (batch, num_heads, queries, head_size)
        elif implementation == "sdpa" or callable(implementation):
            weights = None
            empty = None if mask is None else ~mask.any(-1, keepdim=True)  # (batch, 1 | queries, 1): no valid key
            # Fused kernels may give NaN for a row with no valid key: let it see every key, then zero its output.
            sdpa_mask = None if mask is None else (mask | empty)[:, None]  # (batch, 1, 1 | queries, keys)
            dropout_p = self.attention.dropout.p if self.training else 0.0
            if callable(implementation):  # transformers' attention interface: output (batch, queries, heads, size)
                out, weights = implementation(
                    self, q, k, v, sdpa_mask, dropout=dropout_p, scaling=q.shape[-1] ** -0.5, is_causal=is_causal
                )
                out = out.transpose(1, 2)
            else:
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=sdpa_mask, dropout_p=dropout_p, is_causal=is_causal
                )  # (batch, num_heads, queries, head_size)
            if mask is not None:  # a query with no valid key attends to nothing, as masked_softmax does
                out = out.masked_fill(empty[:, None], 0.0)
        else:
            raise ValueError(f"implementation must be 'eager', 'sdpa' or an attention function, got {implementation!r}")
        if group > 1:  # back to one row per query row
            out = out.unflatten(2, (group, -1)).transpose(1, 2).reshape(query_shape)
            if weights is not None:
                weights = weights.unflatten(2, (group, -1)).transpose(1, 2).flatten(0, 1)
        return out, weights


class PositionalEncoding(nn.Module):
    """Sinusoidal encoding ``P[i, 2j] = sin(i / 10000^(2j/d))``, ``P[i, 2j+1] = cos(...)``, added then dropped out."""

    def __init__(self, num_hiddens: int, dropout: float = 0.0, max_len: int = 1000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("P", self.table(max_len, num_hiddens), persistent=False)

    @staticmethod
    def table(max_len: int, num_hiddens: int) -> torch.Tensor:
        """The encodings of positions ``0 .. max_len - 1``: ``(1, max_len, num_hiddens)``."""
        position = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1)  # (max_len, 1)
        inverse_freq = torch.pow(10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
        angles = position / inverse_freq  # (max_len, ceil(num_hiddens / 2))
        P = torch.zeros(1, max_len, num_hiddens)
        P[:, :, 0::2] = torch.sin(angles)
        P[:, :, 1::2] = torch.cos(angles[:, : num_hiddens // 2])
        return P

    def forward(self, X: torch.Tensor, positions: torch.Tensor | None = None, offset: int = 0) -> torch.Tensor:
        """``X`` ``(batch, length, num_hiddens)`` -> same shape.

        ``positions`` ``(batch, length)`` gives each token's position (default ``offset .. offset + length - 1``),
        e.g. counted from the first real token of a left-padded sentence; ``offset`` counts tokens already decoded.
        """
        _check_size("X", X, self.P.shape[2])
        max_len = self.P.shape[1]
        if positions is None:
            if offset + X.shape[1] > max_len:
                raise ValueError(f"sequence length {offset + X.shape[1]} exceeds the encoding's max_len {max_len}")
            return self.dropout(X + self.P[:, offset : offset + X.shape[1]].to(X.dtype))
        if positions.shape != X.shape[:2]:
            raise ValueError(f"positions of shape {tuple(positions.shape)} do not fit X of shape {tuple(X.shape)}")
        return self.dropout(X + self.P[0, positions].to(X.dtype))


__all__ = [
    "AdditiveAttention",
    "BilinearAttention",
    "DotProductAttention",
    "MultiHeadAttention",
    "PositionalEncoding",
    "ScoredAttention",
    "masked_softmax",
]
