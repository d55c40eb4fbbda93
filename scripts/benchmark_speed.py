"""Speed of `BahdanauForConditionalGeneration` against a plain d2l implementation of the same model.

Both run in one process on the same random token data (fixed seed), interleaved (ours, d2l, ours, ...) so that
noise from other processes hits both alike; every figure is a median over repeats. Measured:

- training: target tokens/s for forward + backward + Adam step (dropout on, as in training);
- greedy decoding: sentences/s; ours with `generate(num_beams=1)` on batches, d2l with the book's
  `predict_seq2seq` (one sentence at a time) and, for fairness, a batched variant of the same loop;
- beam search (ours only: d2l has no beam search implementation).

Every decoder runs exactly `--tgt-len` steps (no early stop at </s>).

    python scripts/benchmark_speed.py --threads 2 --output speed.md
    python scripts/benchmark_speed.py --quick  # tiny sizes, a few seconds
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from transformers import GenerationConfig

from hf_bahdanau import BahdanauConfig, BahdanauForConditionalGeneration

logger = logging.getLogger("benchmark_speed")

PAD, BOS, EOS = 0, 1, 2


# ---- d2l reference (the book's PyTorch code: "Bahdanau Attention" and "Sequence-to-Sequence Learning") -------


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


# ---- benchmark -------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--embedding-size", type=int, default=256)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=20)
    parser.add_argument("--tgt-len", type=int, default=22)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per implementation")
    parser.add_argument("--warmup", type=int, default=3, help="untimed training steps and decoding rounds")
    parser.add_argument("--decode-repeats", type=int, default=5, help="timed decoding rounds per implementation")
    parser.add_argument("--beams", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few repeats: a smoke test")
    parser.add_argument("--output", type=Path, default=None, help="also write the markdown table here")
    args = parser.parse_args(argv)
    if args.quick:
        args.vocab_size, args.embedding_size, args.hidden_size, args.batch_size = 50, 8, 16, 4
        args.src_len, args.tgt_len, args.steps, args.warmup, args.decode_repeats = 5, 6, 2, 1, 1
    return args


def interleaved(fns: dict[str, Callable[[], object]], warmup: int, repeats: int) -> dict[str, float]:
    """Median seconds per call of each function, calling them in turn `repeats` times after `warmup` rounds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def training_steps(
    args: argparse.Namespace, ours: BahdanauForConditionalGeneration, net: EncoderDecoder, src: torch.Tensor
) -> dict[str, Callable[[], object]]:
    generator = torch.Generator().manual_seed(args.seed + 1)
    labels = torch.randint(3, args.vocab_size, (args.batch_size, args.tgt_len), generator=generator)
    ours_optimizer = torch.optim.Adam(ours.parameters(), lr=1e-3)
    d2l_optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    d2l_loss = MaskedSoftmaxCELoss()
    src_valid_len = torch.full((args.batch_size,), args.src_len)
    tgt_valid_len = torch.full((args.batch_size,), args.tgt_len)
    dec_input = torch.cat([torch.full((args.batch_size, 1), BOS), labels[:, :-1]], dim=1)  # d2l's teacher forcing

    def ours_step() -> None:
        loss = ours(input_ids=src, labels=labels).loss
        ours_optimizer.zero_grad()
        loss.backward()
        ours_optimizer.step()

    def d2l_step() -> None:
        Y_hat = net(src, dec_input, src_valid_len)
        loss = d2l_loss(Y_hat, labels, tgt_valid_len)
        d2l_optimizer.zero_grad()
        loss.sum().backward()
        d2l_optimizer.step()

    ours.train()
    net.train()
    return {"ours": ours_step, "d2l": d2l_step}


def run(args: argparse.Namespace) -> list[tuple[str, str, float, str]]:
    """Rows (measure, implementation, figure, note) of the table."""
    torch.manual_seed(args.seed)
    config = BahdanauConfig(
        vocab_size=args.vocab_size,
        embedding_size=args.embedding_size,
        hidden_size=args.hidden_size,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        dropout=args.dropout,
    )
    ours = BahdanauForConditionalGeneration(config)
    net = d2l_model(args.vocab_size, args.embedding_size, args.hidden_size, args.layers, args.dropout)
    copy_weights(ours, net)
    generator = torch.Generator().manual_seed(args.seed)
    src = torch.randint(3, args.vocab_size, (args.batch_size, args.src_len), generator=generator)
    tokens = args.batch_size * args.tgt_len
    rows = []

    logger.info("training: %d warmup + %d timed steps each, interleaved", args.warmup, args.steps)
    seconds = interleaved(training_steps(args, ours, net, src), args.warmup, args.steps)
    for name in ("ours", "d2l"):
        rows.append(("training (target tokens/s)", name, tokens / seconds[name], "forward + backward + Adam"))

    ours.eval()
    ours.generation_config.max_length = None  # else its default of 128 is merged in and warned about
    greedy = GenerationConfig(
        decoder_start_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        do_sample=False,
        num_beams=1,
        max_new_tokens=args.tgt_len,  # exactly tgt_len steps, as the d2l loops (no early </s>)
        min_new_tokens=args.tgt_len,
    )
    beam = GenerationConfig(**{**greedy.to_diff_dict(), "num_beams": args.beams, "early_stopping": True})

    def ours_generate(config: GenerationConfig) -> None:
        assert ours.generate(src, generation_config=config).shape == (args.batch_size, args.tgt_len + 1)

    decoders = {
        "ours greedy": lambda: ours_generate(greedy),
        "d2l greedy, one sentence at a time": lambda: [predict_seq2seq(net, row, args.tgt_len) for row in src],
        "d2l greedy, batched loop": lambda: predict_seq2seq_batched(net, src, args.tgt_len),
        f"ours beam {args.beams}": lambda: ours_generate(beam),
    }
    logger.info(
        "decoding %d sentences x %d tokens: %d timed rounds each", args.batch_size, args.tgt_len, args.decode_repeats
    )
    with torch.inference_mode():
        seconds = interleaved(decoders, min(args.warmup, 1), args.decode_repeats)
    notes = {
        "ours greedy": f"generate(num_beams=1), batches of {args.batch_size}",
        "d2l greedy, one sentence at a time": "the book's predict_seq2seq (batch of 1)",
        "d2l greedy, batched loop": f"predict_seq2seq's loop on batches of {args.batch_size} (not in the book)",
        f"ours beam {args.beams}": f"generate(num_beams={args.beams}); d2l has no beam search",
    }
    for name, value in seconds.items():
        rows.append(("decoding (sentences/s)", name, args.batch_size / value, notes[name]))
    return rows


def markdown_table(rows: list[tuple[str, str, float, str]]) -> str:
    """The rows and the ours/d2l ratios as a markdown table."""
    lines = ["| measure | implementation | figure | notes |", "|---|---|---:|---|"]
    lines += [f"| {measure} | {name} | {value:,.1f} | {note} |" for measure, name, value, note in rows]
    figure = {name if "training" not in measure else f"training {name}": value for measure, name, value, _ in rows}
    ratios = [
        ("training, ours / d2l", figure["training ours"] / figure["training d2l"]),
        ("greedy, ours / d2l one at a time", figure["ours greedy"] / figure["d2l greedy, one sentence at a time"]),
        ("greedy, ours / d2l batched loop", figure["ours greedy"] / figure["d2l greedy, batched loop"]),
    ]
    lines += [f"| ratio | {name} | {value:.2f}x | |" for name, value in ratios]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    logger.info(
        "vocab %d, emb %d, hidden %d, %d layers, batch %d, src %d, tgt %d, torch %s, %d threads",
        args.vocab_size,
        args.embedding_size,
        args.hidden_size,
        args.layers,
        args.batch_size,
        args.src_len,
        args.tgt_len,
        torch.__version__,
        torch.get_num_threads(),
    )
    table = markdown_table(run(args))
    logger.info("results:\n%s", table)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(table + "\n")
        logger.info("table written to %s", args.output)


if __name__ == "__main__":
    main()
