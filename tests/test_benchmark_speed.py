"""scripts/benchmark_speed.py: a quick run prints every implementation with positive figures; the timing loop; the
model in d2l's loop decodes as generate(); d2l's loss."""

import re

import pytest
import torch
from conftest import REPO_ROOT, load_script
from transformers import GenerationConfig

from hf_bahdanau import BahdanauConfig, BahdanauForConditionalGeneration

DECODERS = ("ours", "ours int8", "MarianMT", "ours, user call (EOS on)", "MarianMT, user call (EOS on)")
MEASURES = {"greedy (sentences/s)": DECODERS[:2] + DECODERS[3:4], "beam (sentences/s)": DECODERS,
            "training (target tokens/s)": ("ours",)}  # fmt: skip


@pytest.mark.slow
def test_quick_run_lists_every_implementation_with_positive_figures(tmp_path, run_script):
    output = tmp_path / "speed.md"
    log = run_script("benchmark_speed", "--quick", "--threads", "1", "--output", str(output))
    table = output.read_text()
    assert table.rstrip("\n") in log  # logged as well
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    figures = {(measure.strip(), name.strip()): value.strip() for measure, name, value, _ in rows}
    keys = [(f"{model} {measure}", name) for model in ("RNN", "Transformer") for measure, names in MEASURES.items()
            for name in names]  # fmt: skip
    names = ("ours, d2l's loop", "d2l, batched loop", "d2l, one at a time")
    keys += [("RNN greedy (sentences/s)", name) for name in names]
    keys += [("ratio", f"RNN {name}") for name in ("training, ours / d2l", "greedy, ours int8 / d2l, batched loop",
                                                   "greedy, ours, d2l's loop / d2l, batched loop")]  # fmt: skip
    keys += [("ratio", f"Transformer {name}") for name in ("training, ours / MarianMT", "beam, ours / MarianMT",
                                                           "greedy, ours / MarianMT")]  # fmt: skip
    assert len(figures) == len(rows) == 36
    for key in keys:
        assert key in figures, key
        assert float(re.sub(r"[,x]", "", figures[key])) > 0, (key, figures[key])


def test_functions_are_timed_in_turn_each_by_its_fastest_call_on_the_clock_given(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "scripts"))
    interleaved = load_script("benchmark_speed").interleaved
    calls, ticks = [], iter([0, 5, 5, 6, 6, 8, 8, 11])  # a: 5 then 2, b: 1 then 3
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    assert interleaved(fns, warmup=1, repeats=2, clock=lambda: next(ticks)) == {"a": 2, "b": 1}
    assert calls == ["a", "b"] * 3


def test_the_model_in_d2ls_loop_decodes_as_generate(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "scripts"))
    bench = load_script("benchmark_speed")
    args = bench.parse_args(["--quick"])
    torch.manual_seed(0)
    model = BahdanauForConditionalGeneration(BahdanauConfig(vocab_size=50, embedding_size=8, hidden_size=16))
    src = torch.randint(3, 50, (args.batch_size, args.src_len))
    decoded = bench.d2l_loop(model, src, args.tgt_len)()
    model.generation_config.eos_token_id = None  # greedy to the last step, as the loop
    config = GenerationConfig(
        decoder_start_token_id=bench.BOS, pad_token_id=bench.PAD, num_beams=1, max_new_tokens=args.tgt_len
    )
    with torch.inference_mode():
        generated = model.generate(src, generation_config=config)
    assert torch.equal(decoded, generated[:, 1:])


def test_d2l_loss_is_the_masked_mean_cross_entropy(d2l):
    logits, labels = torch.randn(2, 4, 9), torch.randint(0, 9, (2, 4))
    loss = d2l.MaskedSoftmaxCELoss()(logits, labels, torch.tensor([4, 2]))
    token_losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    torch.testing.assert_close(loss, torch.stack([token_losses[0].mean(), token_losses[1, :2].sum() / 4]))
