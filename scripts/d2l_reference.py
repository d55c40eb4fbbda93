"""d2l's own PyTorch code for the models we reimplement: the plain reference for equivalence tests and speed.

Copied from *Dive into Deep Learning* ("Attention Scoring Functions", "Bahdanau Attention", "Multi-Head
Attention", "Self-Attention and Positional Encoding", "The Transformer Architecture", "Sequence-to-Sequence
Learning"), kept as the book writes it (time-major GRUs, keys projected at every step, the decoder's growing
`key_values` state, one sentence at a time in `predict_seq2seq`), with type hints and explicit layer sizes added
(the book uses `nn.LazyLinear`). `copy_weights` loads a `BahdanauForConditionalGeneration` into the RNN,
`copy_transformer_weights` a `TransformerForConditionalGeneration` into the Transformer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from hf_bahdanau import BahdanauForConditionalGeneration, TransformerForConditionalGeneration

PAD, BOS, EOS = 0, 1, 2


def sequence_mask(X: torch.Tensor, valid_len: torch.Tensor, value: float = 0) -> torch.Tensor:
    """d2l's `sequence_mask`: set the entries of `X` past each row's valid length to `value` (in place)."""
    maxlen = X.size(1)
    mask = torch.arange((maxlen), dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def masked_softmax(X: torch.Tensor, valid_lens: torch.Tensor | None) -> torch.Tensor:
    """d2l's `masked_softmax`: masked entries get -1e6 before the softmax over the last axis."""
    if valid_lens is None:
        return nn.functional.softmax(X, dim=-1)
    shape = X.shape
    if valid_lens.dim() == 1:
        valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    else:
        valid_lens = valid_lens.reshape(-1)
    X = sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return nn.functional.softmax(X.reshape(shape), dim=-1)


class AdditiveAttention(nn.Module):
    """d2l's `AdditiveAttention`: projects the keys again at every call."""

    def __init__(self, key_size: int, query_size: int, num_hiddens: int, dropout: float) -> None:
        super().__init__()
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens) -> torch.Tensor:  # noqa: ANN001
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = queries.unsqueeze(2) + keys.unsqueeze(1)
        features = torch.tanh(features)
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class Seq2SeqEncoder(nn.Module):
    """d2l's `Seq2SeqEncoder`: embedding and a time-major multilayer GRU."""

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, num_layers, dropout=dropout)

    def forward(self, X, *args) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001, ANN002
        embs = self.embedding(X.t().type(torch.int64))  # (num_steps, batch, embed_size)
        outputs, state = self.rnn(embs)
        return outputs, state


class Seq2SeqAttentionDecoder(nn.Module):
    """d2l's `Seq2SeqAttentionDecoder`: one GRU step per token, attending with the previous top state."""

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.attention = AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, dropout)
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size + num_hiddens, num_hiddens, num_layers, dropout=dropout)
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens) -> tuple:  # noqa: ANN001
        outputs, hidden_state = enc_outputs
        return (outputs.permute(1, 0, 2), hidden_state, enc_valid_lens)

    def forward(self, X, state) -> tuple[torch.Tensor, tuple]:  # noqa: ANN001
        enc_outputs, hidden_state, enc_valid_lens = state
        X = self.embedding(X).permute(1, 0, 2)  # (num_steps, batch, embed_size)
        outputs, self._attention_weights = [], []
        for x in X:
            query = torch.unsqueeze(hidden_state[-1], dim=1)  # (batch, 1, num_hiddens)
            context = self.attention(query, enc_outputs, enc_outputs, enc_valid_lens)
            x = torch.cat((context, torch.unsqueeze(x, dim=1)), dim=-1)
            out, hidden_state = self.rnn(x.permute(1, 0, 2), hidden_state)
            outputs.append(out)
            self._attention_weights.append(self.attention.attention_weights)
        outputs = self.dense(torch.cat(outputs, dim=0))
        return outputs.permute(1, 0, 2), (enc_outputs, hidden_state, enc_valid_lens)


class EncoderDecoder(nn.Module):
    """d2l's `EncoderDecoder`."""

    def __init__(self, encoder: Seq2SeqEncoder, decoder: Seq2SeqAttentionDecoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, enc_X, dec_X, *args) -> torch.Tensor:  # noqa: ANN001, ANN002
        enc_outputs = self.encoder(enc_X, *args)
        dec_state = self.decoder.init_state(enc_outputs, *args)
        return self.decoder(dec_X, dec_state)[0]


def init_seq2seq(module: nn.Module) -> None:
    """d2l's `init_seq2seq`: Xavier for linear layers and GRU weights."""
    if type(module) is nn.Linear:
        nn.init.xavier_uniform_(module.weight)
    if type(module) is nn.GRU:
        for param in module._flat_weights_names:
            if "weight" in param:
                nn.init.xavier_uniform_(module._parameters[param])


class MaskedSoftmaxCELoss(nn.CrossEntropyLoss):
    """d2l's `MaskedSoftmaxCELoss`: per-sequence mean of the token losses within the valid length."""

    def forward(self, pred, label, valid_len) -> torch.Tensor:  # noqa: ANN001
        weights = torch.ones_like(label)
        weights = sequence_mask(weights, valid_len)
        self.reduction = "none"
        unweighted_loss = super().forward(pred.permute(0, 2, 1), label)
        return (unweighted_loss * weights).mean(dim=1)


def d2l_model(vocab: int, embed: int, hidden: int, layers: int, dropout: float) -> EncoderDecoder:
    net = EncoderDecoder(
        Seq2SeqEncoder(vocab, embed, hidden, layers, dropout),
        Seq2SeqAttentionDecoder(vocab, embed, hidden, layers, dropout),
    )
    net.apply(init_seq2seq)
    return net


def copy_weights(ours: BahdanauForConditionalGeneration, net: EncoderDecoder) -> None:
    """Load our model's weights into the d2l model (same parameter names and layouts, module by module)."""
    pairs = [
        (net.encoder.embedding, ours.model.encoder.embed_tokens),
        (net.encoder.rnn, ours.model.encoder.rnn),
        (net.decoder.attention, ours.model.decoder.attention),
        (net.decoder.embedding, ours.model.decoder.embed_tokens),
        (net.decoder.rnn, ours.model.decoder.rnn),
        (net.decoder.dense, ours.lm_head),
    ]
    for theirs, mine in pairs:
        theirs.load_state_dict(mine.state_dict())


@torch.no_grad()
def predict_seq2seq(
    net: EncoderDecoder, src_tokens: torch.Tensor, num_steps: int, stop_at_eos: bool = False
) -> list[int]:
    """d2l's `predict_seq2seq` for one tokenized sentence `(src_len,)`: greedy, batch of one, step by step.

    The book stops at </s>; `stop_at_eos=False` decodes `num_steps` tokens so that every decoder does the same work.
    """
    net.eval()
    enc_valid_len = torch.tensor([len(src_tokens)])
    enc_X = torch.unsqueeze(src_tokens, dim=0)
    enc_outputs = net.encoder(enc_X, enc_valid_len)
    dec_state = net.decoder.init_state(enc_outputs, enc_valid_len)
    dec_X = torch.unsqueeze(torch.tensor([BOS], dtype=torch.long), dim=0)
    output_seq = []
    for _ in range(num_steps):
        Y, dec_state = net.decoder(dec_X, dec_state)
        dec_X = Y.argmax(dim=2)
        pred = dec_X.squeeze(dim=0).type(torch.int32).item()
        if stop_at_eos and pred == EOS:
            break
        output_seq.append(pred)
    return output_seq


@torch.no_grad()
def predict_seq2seq_batched(net: EncoderDecoder, src: torch.Tensor, num_steps: int) -> torch.Tensor:
    """The same greedy loop over a whole batch `(batch, src_len)` (not in the book): tokens `(batch, num_steps)`."""
    net.eval()
    enc_valid_len = torch.full((src.shape[0],), src.shape[1])
    dec_state = net.decoder.init_state(net.encoder(src, enc_valid_len), enc_valid_len)
    dec_X = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
    outputs = []
    for _ in range(num_steps):
        Y, dec_state = net.decoder(dec_X, dec_state)
        dec_X = Y.argmax(dim=2)
        outputs.append(dec_X)
    return torch.cat(outputs, dim=1)


def transpose_qkv(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """d2l's `transpose_qkv`: (batch, length, num_hiddens) -> (batch * num_heads, length, num_hiddens / num_heads)."""
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1).permute(0, 2, 1, 3)
    return X.reshape(-1, X.shape[2], X.shape[3])


def transpose_output(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """d2l's `transpose_output`, the inverse of `transpose_qkv`."""
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2]).permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


# ---- the Transformer ("Multi-Head Attention", "Self-Attention and Positional Encoding", "The Transformer") ----


class DotProductAttention(nn.Module):
    """d2l's `DotProductAttention`."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, valid_lens=None) -> torch.Tensor:  # noqa: ANN001
        d = queries.shape[-1]
        scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class MultiHeadAttention(nn.Module):
    """d2l's `MultiHeadAttention` (projections without bias)."""

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float, bias: bool = False) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.attention = DotProductAttention(dropout)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens) -> torch.Tensor:  # noqa: ANN001
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)
        if valid_lens is not None:
            valid_lens = torch.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)
        output = self.attention(queries, keys, values, valid_lens)
        return self.W_o(transpose_output(output, self.num_heads))


class PositionalEncoding(nn.Module):
    """d2l's `PositionalEncoding`."""

    def __init__(self, num_hiddens: int, dropout: float, max_len: int = 1000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.P = torch.zeros((1, max_len, num_hiddens))
        X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
            10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens
        )
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        X = X + self.P[:, : X.shape[1], :].to(X.device)
        return self.dropout(X)


class PositionWiseFFN(nn.Module):
    """d2l's `PositionWiseFFN`."""

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int) -> None:
        super().__init__()
        self.dense1 = nn.Linear(num_hiddens, ffn_num_hiddens)
        self.relu = nn.ReLU()
        self.dense2 = nn.Linear(ffn_num_hiddens, num_hiddens)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.dense2(self.relu(self.dense1(X)))


class AddNorm(nn.Module):
    """d2l's `AddNorm`."""

    def __init__(self, num_hiddens: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(num_hiddens)

    def forward(self, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        return self.ln(self.dropout(Y) + X)


class TransformerEncoderBlock(nn.Module):
    """d2l's `TransformerEncoderBlock`."""

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(num_hiddens, num_heads, dropout)
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens)
        self.addnorm2 = AddNorm(num_hiddens, dropout)

    def forward(self, X, valid_lens) -> torch.Tensor:  # noqa: ANN001
        Y = self.addnorm1(X, self.attention(X, X, X, valid_lens))
        return self.addnorm2(Y, self.ffn(Y))


class TransformerEncoder(nn.Module):
    """d2l's `TransformerEncoder`."""

    def __init__(self, vocab: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, blks: int, dropout: float):
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embedding = nn.Embedding(vocab, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout)
        self.blks = nn.Sequential()
        for i in range(blks):
            self.blks.add_module(str(i), TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout))

    def forward(self, X, valid_lens) -> torch.Tensor:  # noqa: ANN001
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        self.attention_weights = [None] * len(self.blks)
        for i, blk in enumerate(self.blks):
            X = blk(X, valid_lens)
            self.attention_weights[i] = blk.attention.attention.attention_weights
        return X


class TransformerDecoderBlock(nn.Module):
    """d2l's `TransformerDecoderBlock`: the i-th block keeps its inputs so far in `state[2][i]`."""

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float, i: int) -> None:
        super().__init__()
        self.i = i
        self.attention1 = MultiHeadAttention(num_hiddens, num_heads, dropout)
        self.addnorm1 = AddNorm(num_hiddens, dropout)
        self.attention2 = MultiHeadAttention(num_hiddens, num_heads, dropout)
        self.addnorm2 = AddNorm(num_hiddens, dropout)
        self.ffn = PositionWiseFFN(num_hiddens, ffn_num_hiddens)
        self.addnorm3 = AddNorm(num_hiddens, dropout)

    def forward(self, X, state) -> tuple[torch.Tensor, list]:  # noqa: ANN001
        enc_outputs, enc_valid_lens = state[0], state[1]
        key_values = X if state[2][self.i] is None else torch.cat((state[2][self.i], X), dim=1)
        state[2][self.i] = key_values
        if self.training:
            batch_size, num_steps, _ = X.shape
            dec_valid_lens = torch.arange(1, num_steps + 1, device=X.device).repeat(batch_size, 1)
        else:
            dec_valid_lens = None
        X2 = self.attention1(X, key_values, key_values, dec_valid_lens)
        Y = self.addnorm1(X, X2)
        Y2 = self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)
        Z = self.addnorm2(Y, Y2)
        return self.addnorm3(Z, self.ffn(Z)), state


class TransformerDecoder(nn.Module):
    """d2l's `TransformerDecoder`."""

    def __init__(self, vocab: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, blks: int, dropout: float):
        super().__init__()
        self.num_hiddens, self.num_blks = num_hiddens, blks
        self.embedding = nn.Embedding(vocab, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout)
        self.blks = nn.Sequential()
        for i in range(blks):
            self.blks.add_module(str(i), TransformerDecoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, i))
        self.dense = nn.Linear(num_hiddens, vocab)

    def init_state(self, enc_outputs, enc_valid_lens) -> list:  # noqa: ANN001
        return [enc_outputs, enc_valid_lens, [None] * self.num_blks]

    def forward(self, X, state) -> tuple[torch.Tensor, list]:  # noqa: ANN001
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
        for blk in self.blks:
            X, state = blk(X, state)
        return self.dense(X), state


def d2l_transformer(vocab: int, hidden: int, ffn: int, heads: int, blks: int, dropout: float) -> EncoderDecoder:
    return EncoderDecoder(
        TransformerEncoder(vocab, hidden, ffn, heads, blks, dropout),
        TransformerDecoder(vocab, hidden, ffn, heads, blks, dropout),
    )


def copy_transformer_weights(ours: TransformerForConditionalGeneration, net: EncoderDecoder) -> None:
    """Load our Transformer's weights into d2l's (module by module; the layouts are the same)."""

    def attention(theirs: MultiHeadAttention, mine: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
        return [(getattr(theirs, name), getattr(mine, name)) for name in ("W_q", "W_k", "W_v", "W_o")]

    pairs = [
        (net.encoder.embedding, ours.model.encoder.embed_tokens),
        (net.decoder.embedding, ours.model.decoder.embed_tokens),
        (net.decoder.dense, ours.lm_head),
    ]
    for theirs, mine in zip(net.encoder.blks, ours.model.encoder.layers, strict=True):
        pairs += attention(theirs.attention, mine.self_attn)
        pairs += [(theirs.addnorm1.ln, mine.self_attn_norm.norm), (theirs.ffn, mine.ffn)]
        pairs += [(theirs.addnorm2.ln, mine.ffn_norm.norm)]
    for theirs, mine in zip(net.decoder.blks, ours.model.decoder.layers, strict=True):
        pairs += attention(theirs.attention1, mine.self_attn) + attention(theirs.attention2, mine.cross_attn)
        pairs += [(theirs.addnorm1.ln, mine.self_attn_norm.norm), (theirs.addnorm2.ln, mine.cross_attn_norm.norm)]
        pairs += [(theirs.ffn, mine.ffn), (theirs.addnorm3.ln, mine.ffn_norm.norm)]
    for theirs, mine in pairs:
        theirs.load_state_dict(mine.state_dict())
