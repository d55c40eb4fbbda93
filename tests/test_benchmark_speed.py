"""scripts/benchmark_speed.py: a quick run prints both implementations, and its d2l reference is our model."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import torch

from hf_bahdanau import BahdanauConfig, BahdanauForConditionalGeneration

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchmark_speed.py"


def load_script():
    spec = importlib.util.spec_from_file_location("benchmark_speed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_lists_both_implementations_with_positive_figures(tmp_path):
    output = tmp_path / "speed.md"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--threads", "1", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = output.read_text()
    assert table in result.stderr  # logged as well
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    figures = {(measure.strip(), name.strip()): value.strip() for measure, name, value, _ in rows}
    for key in [
        ("training (target tokens/s)", "ours"),
        ("training (target tokens/s)", "d2l"),
        ("decoding (sentences/s)", "ours greedy"),
        ("decoding (sentences/s)", "d2l greedy, one sentence at a time"),
        ("decoding (sentences/s)", "d2l greedy, batched loop"),
        ("decoding (sentences/s)", "ours beam 5"),
        ("ratio", "training, ours / d2l"),
        ("ratio", "greedy, ours / d2l one at a time"),
    ]:
        assert key in figures, key
        assert float(re.sub(r"[,x]", "", figures[key])) > 0, (key, figures[key])


def test_d2l_reference_gives_our_logits_and_greedy_tokens():
    bench = load_script()
    torch.manual_seed(0)
    config = BahdanauConfig(vocab_size=40, embedding_size=10, hidden_size=14, dropout=0.0)
    ours = BahdanauForConditionalGeneration(config).eval()
    net = bench.d2l_model(40, 10, 14, 2, 0.0).eval()
    bench.copy_weights(ours, net)
    generator = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(3, 40, (3, 7), generator=generator), torch.randint(3, 40, (3, 5), generator=generator)
    with torch.no_grad():
        expected = ours(input_ids=src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(net(src, tgt, torch.tensor([7, 7, 7])), expected)
    ours.generation_config.max_length = None
    generated = ours.generate(src, num_beams=1, do_sample=False, max_new_tokens=6).tolist()
    for row in range(3):
        tokens = generated[row][1:]  # without the start token, up to </s> (id 2)
        tokens = tokens[: tokens.index(2)] if 2 in tokens else tokens
        assert bench.predict_seq2seq(net, src[row], 6, stop_at_eos=True) == tokens
        assert bench.predict_seq2seq_batched(net, src, 6)[row, : len(tokens)].tolist() == tokens


def test_d2l_loss_is_the_masked_mean_cross_entropy():
    bench = load_script()
    logits, labels = torch.randn(2, 4, 9), torch.randint(0, 9, (2, 4))
    loss = bench.MaskedSoftmaxCELoss()(logits, labels, torch.tensor([4, 2]))
    token_losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    torch.testing.assert_close(loss, torch.stack([token_losses[0].mean(), token_losses[1, :2].sum() / 4]))
