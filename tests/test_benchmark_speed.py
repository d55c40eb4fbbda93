"""scripts/benchmark_speed.py: a quick run prints both implementations with positive figures; d2l's loss."""

import re
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchmark_speed.py"


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


def test_d2l_loss_is_the_masked_mean_cross_entropy(d2l):
    logits, labels = torch.randn(2, 4, 9), torch.randint(0, 9, (2, 4))
    loss = d2l.MaskedSoftmaxCELoss()(logits, labels, torch.tensor([4, 2]))
    token_losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    torch.testing.assert_close(loss, torch.stack([token_losses[0].mean(), token_losses[1, :2].sum() / 4]))
