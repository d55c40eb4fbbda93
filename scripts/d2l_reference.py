"""d2l's own PyTorch code for the models we reimplement: the plain reference for equivalence tests and speed.

Copied from *Dive into Deep Learning* ("Attention Scoring Functions", "Bahdanau Attention", "Multi-Head
Attention", "Sequence-to-Sequence Learning"), kept as the book writes it (time-major GRUs, keys projected at
every step, one sentence at a time in `predict_seq2seq`), with type hints added. `copy_weights` loads a
`BahdanauForConditionalGeneration` into it.
"""

from __future__ import annotations

import torch
from torch import nn

from hf_bahdanau import BahdanauForConditionalGeneration

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
        (net.encoder.embedding, ours.encoder.embed_tokens),
        (net.encoder.rnn, ours.encoder.rnn),
        (net.decoder.attention, ours.decoder.attention),
        (net.decoder.embedding, ours.decoder.embed_tokens),
        (net.decoder.rnn, ours.decoder.rnn),
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
