"""Reproduce d2l's Nadaraya-Watson chapter: average, non-parametric and parametric attention pooling.

Writes `predictions.png`, `attention_nonparametric.png`, `attention_parametric.png` and `training_loss.png`
to `--output-dir` and logs each method's test MSE against the noise-free truth.

    python scripts/nadaraya_watson.py --output-dir outputs/nadaraya_watson --seed 0
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from hf_bahdanau.kernel_regression import AveragePooling, NonParametricPooling, make_nw_data, train_nw
from hf_bahdanau.visualization import plot_curves, show_heatmaps

logger = logging.getLogger("nadaraya_watson")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/nadaraya_watson"))
    parser.add_argument("--seed", type=int, default=0, help="seeds the data and the initial width w")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.5)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    generator = torch.Generator().manual_seed(args.seed)
    data = make_nw_data(generator=generator)
    model, losses = train_nw(data.x_train, data.y_train, epochs=args.epochs, lr=args.lr, generator=generator)
    logger.info(
        "learned w = %.4f, loss %.4f (epoch 1) -> %.4f (epoch %d)",
        model.w.item(),
        losses[0],
        losses[-1],
        len(losses),
    )

    methods = {"average": AveragePooling(), "non-parametric": NonParametricPooling(), "parametric": model}
    predictions, weights = {}, {}
    with torch.no_grad():
        for name, pooling in methods.items():
            predictions[name] = pooling(data.x_test, data.x_train, data.y_train)  # (n_test,)
            weights[name] = pooling.attention_weights  # (n_test, n_train)
            mse = torch.mean((predictions[name] - data.y_truth) ** 2).item()
            logger.info("test MSE %-15s %.4f", name, mse)

    out = args.output_dir
    plot_curves(
        data.x_test,
        {"truth": data.y_truth, **{f"{name} pooling": y for name, y in predictions.items()}},
        "x",
        "y",
        path=out / "predictions.png",
        points={"samples": (data.x_train, data.y_train)},
        figsize=(5.0, 3.5),
    )
    for name in ("non-parametric", "parametric"):
        show_heatmaps(
            weights[name],
            xlabel="Sorted training inputs",
            ylabel="Sorted testing inputs",
            titles=[f"{name} attention"],
            figsize=(3.5, 3.0),
            path=out / f"attention_{name.replace('-', '')}.png",
        )
    plot_curves(
        range(1, len(losses) + 1),
        {"train loss": losses},
        "epoch",
        "summed squared error",
        path=out / "training_loss.png",
    )


if __name__ == "__main__":
    main()
