"""`hf-bahdanau publish`: write a model's card and upload the model to the Hub, and its demo Space (`--space`); or
the model as a standard transformers folder (`--format transformers`), or its page that translates in the browser
as a static Space (`--format web`, or a web export as `--model`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from hf_bahdanau.choices import DEFAULT_LICENSE

from .arguments import UsageError, add_command

PUBLISHED_FORMATS = ("model", "transformers", "web")  # `publish --format`

SUMMARY = "write the model card and upload the model to the Hub"
EPILOG = """\
examples:
  hf-bahdanau publish --model runs/de-en --repo-id OWNER/bahdanau-de-en --dry-run
  hf-bahdanau publish --model runs/de-en --repo-id OWNER/bahdanau-de-en --private
  hf-bahdanau publish --repo-id OWNER/bahdanau-de-en --space OWNER/bahdanau-de-en-demo --dry-run  # the demo Space
  hf-bahdanau publish --model runs/quick-de-en --format transformers --repo-id OWNER/quick-de-en-marian --dry-run
  hf-bahdanau publish --model runs/quick-de-en --format web --repo-id OWNER/quick-de-en-browser --dry-run
  hf-bahdanau publish --model runs/quick-de-en-web --repo-id OWNER/quick-de-en-browser  # a web export: its Space
The token is HF_TOKEN or the one saved by `hf auth login`. A README.md you wrote is kept (--overwrite-card replaces
it); the card publish wrote earlier is refreshed. --format transformers uploads the standard MarianMT or Blenderbot
folder (a Transformer), which loads with no remote code; --format web uploads the page of `export --format web`
(int8) as a static Space named by --repo-id.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `publish` and its options to the command line's subparsers."""
    parser = add_command(commands, "publish", SUMMARY, EPILOG)
    parser.add_argument(
        "--model",
        help="A saved model folder (from `train`), or a web export (`export --format web`); leave it out with --space "
        "for a model already published.",
    )
    parser.add_argument("--repo-id", "--repo_id", required=True, help="OWNER/NAME on the Hub.")
    parser.add_argument(
        "--format",
        choices=PUBLISHED_FORMATS,
        default="model",
        help="model: the folder as saved (its code comes with it); transformers: its standard MarianMT or "
        "Blenderbot folder, no remote code; web: its page that translates in the browser, as a static Space (the "
        "form of a --model that is a web export).",
    )
    parser.add_argument("--private", action="store_true", help="Create the repo private.")
    parser.add_argument("--revision", help="Upload to this branch (created if needed; default: main).")
    parser.add_argument("--commit-message", "--commit_message", help="Commit message (default: the Hub's).")
    parser.add_argument("--license", default=DEFAULT_LICENSE, help="License id for the card.")
    parser.add_argument(
        "--dry-run", "--dry_run", action="store_true", help="Show the card and the files; write and upload nothing."
    )
    parser.add_argument(
        "--overwrite-card",
        "--overwrite_card",
        action="store_true",
        help="Replace a README.md not made by hf-bahdanau (default: keep it and upload it as it is).",
    )
    parser.add_argument(
        "--with-ctranslate2",
        "--with_ctranslate2",
        action="store_true",
        help="Also upload the model's CTranslate2 export (float32) in the repo's ctranslate2/ folder.",
    )
    parser.add_argument(
        "--space",
        metavar="OWNER/NAME",
        help="Also write and upload a Gradio Space that serves `hf-bahdanau demo` for the model --repo-id (app.py, "
        "requirements.txt, its README.md, and a copy of this package); with --dry-run, show those files.",
    )


def run(args: argparse.Namespace) -> None:
    """Publish the model (`--model`), its demo Space (`--space`), or both; or another form of the model."""
    from hf_bahdanau.decoding.export.web import is_web_folder

    if not args.model and not args.space:
        raise UsageError("publish needs --model (or --space for the demo Space of a model already published)")
    form = "web" if args.model and is_web_folder(args.model) else args.format
    if form != "model":
        if not args.model or args.space or args.with_ctranslate2:
            raise UsageError(f"publish --format {form} takes --model, without --space or --with-ctranslate2")
        if form == "web":
            _publish_web(args)
        else:
            _publish_standard(args)
        return
    if args.model:
        _publish_model(args)
    if args.space:
        _publish_space(args)


def _wrote_url(done: Any, args: argparse.Namespace) -> bool:
    """Write the URL `done` was published at, and True; False for a dry run (whose caller shows what it holds)."""
    if args.dry_run:
        return False
    sys.stdout.write(f"{done.url}\n")
    return True


def _write_files(heading: str, names: Iterable[str]) -> None:
    """`heading`, then each name on a line of its own, indented."""
    sys.stdout.write(heading + "\n" + "".join(f"  {name}\n" for name in names))


def _publish_space(args: argparse.Namespace) -> None:
    """`publish --space`: the demo Space of the model `--repo-id`; a dry run shows its files."""
    from hf_bahdanau.publishing.space import publish_space

    done = publish_space(args.space, args.repo_id, private=args.private, dry_run=args.dry_run,
                         commit_message=args.commit_message, license=args.license)  # fmt: skip
    if _wrote_url(done, args):
        return
    for name, text in done.texts.items():
        sys.stdout.write(f"==> {name} <==\n{text.rstrip()}\n\n")
    _write_files(f"dry run: would upload to the Space {done.space_id}:", done.texts)
    sys.stdout.write(f"  and {len(done.package)} files of the package (hf_bahdanau/*.py), which app.py imports\n")


def _publish_model(args: argparse.Namespace) -> None:
    """`publish --model`: the model, its card and files; a dry run shows them."""
    from hf_bahdanau.decoding.export.ctranslate2 import check_ctranslate2
    from hf_bahdanau.publishing.upload import publish

    if args.with_ctranslate2:
        check_ctranslate2()
    options = dict(private=args.private, revision=args.revision, commit_message=args.commit_message)
    done = publish(args.model, args.repo_id, license=args.license, dry_run=args.dry_run,
                   overwrite_card=args.overwrite_card, with_ctranslate2=args.with_ctranslate2,
                   **options)  # fmt: skip
    if _wrote_url(done, args):
        return
    if not done.card_kept:  # the card that would be written, then what would happen
        sys.stdout.write(done.card_text.rstrip("\n") + "\n\n")
    _write_files(f"dry run: would upload to {done.repo_id}:", done.files)
    if done.card_kept:
        sys.stdout.write(f"model card: {done.card} is kept (not made by hf-bahdanau; --overwrite-card replaces it)\n")
    else:
        sys.stdout.write(f"model card: would be written to {done.card} (shown above; nothing written)\n")


def _publish_standard(args: argparse.Namespace) -> None:
    """`publish --format transformers`: the standard folder of `--model` and its card; a dry run shows them."""
    from hf_bahdanau.publishing.upload import publish_standard

    done = publish_standard(args.model, args.repo_id, private=args.private, revision=args.revision,
                            commit_message=args.commit_message, license=args.license, dry_run=args.dry_run)  # fmt: skip
    if _wrote_url(done, args):
        return
    sys.stdout.write(done.card_text.rstrip("\n") + "\n\n")
    _write_files(f"dry run: would upload to {done.repo_id}:", done.files)


def _publish_web(args: argparse.Namespace) -> None:
    """`publish --format web` (or a web export as `--model`): the page as a static Space; a dry run shows it."""
    from hf_bahdanau.publishing.space import publish_web_space

    done = publish_web_space(args.model, args.repo_id, private=args.private, dry_run=args.dry_run,
                             commit_message=args.commit_message, license=args.license)  # fmt: skip
    if _wrote_url(done, args):
        return
    sys.stdout.write(f"==> README.md <==\n{done.readme.rstrip()}\n\n")
    _write_files(f"dry run: would upload to the static Space {done.space_id}:", done.files)


# ---- demo -------------------------------------------------------------------------------------------------
