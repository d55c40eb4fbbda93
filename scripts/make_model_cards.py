"""Generate the model card of a trained folder into `model_cards/<name>.md` (the folder is not changed).

The card is the one `hf-bahdanau publish` writes into the folder as README.md: made from the folder's config,
weights, corpus settings, trainer state, recorded command and `eval_results.json`, for the given repo id.

    python scripts/make_model_cards.py --model runs/multi30k-de-en --repo-id OWNER/bahdanau-multi30k-de-en
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from hf_bahdanau.choices import DEFAULT_LICENSE
from hf_bahdanau.publishing.card import make_card

REPO_ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("make_model_cards")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a trained (and evaluated) model folder")
    parser.add_argument("--repo-id", required=True, help="OWNER/NAME the card is written for")
    parser.add_argument("--license", default=DEFAULT_LICENSE)
    parser.add_argument("--output", type=Path, help="default: model_cards/<NAME>.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    output = args.output or REPO_ROOT / "model_cards" / f"{args.repo_id.split('/')[-1]}.md"
    make_card(args.model, args.repo_id, args.license).save(output)
    logger.info("wrote %s", output)
    return output


if __name__ == "__main__":
    main()
