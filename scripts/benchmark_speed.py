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
from transformers import GenerationConfig

from hf_bahdanau import BahdanauConfig, BahdanauForConditionalGeneration

from d2l_reference import (  # scripts/ is on sys.path when this file runs as a script
    BOS,
    EOS,
    PAD,
    EncoderDecoder,
    MaskedSoftmaxCELoss,
    copy_weights,
    d2l_model,
    predict_seq2seq,
    predict_seq2seq_batched,
)

logger = logging.getLogger("benchmark_speed")


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
