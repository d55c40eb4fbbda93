"""The `hf-bahdanau` command line: `build_parser` assembles each command's parser from its module, `main` runs the
command asked for and turns a bad input into a one-line error.

Each command is a module with `add_parser(commands)` and `run(args)`: `train`, `distill`, `evaluate`, `calibrate`,
`translate`, `publish`, `demo`, `export`, `serve`; `arguments` holds what they share. Arguments are parsed before torch
and transformers are imported: each command imports what it needs when it runs, so `--help` and usage errors answer at
once. `train` and `distill` take transformers' training options, which `HfArgumentParser` parses from what argparse
leaves over; they ready the libraries once those are parsed. `translate --engine ctranslate2` leaves them be: it
reads a CTranslate2 export as data, with neither torch nor transformers.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import logging
import os
import sys
from collections.abc import Iterator, Sequence

from hf_bahdanau.decoding.folder_data import check_model_folder
from hf_bahdanau.errors import InputError
from hf_bahdanau.redaction import redact_message

from . import calibrate, demo, distill, evaluate, export, publish, serve, train, translate
from .arguments import UsageError, option_names
from .streams import SIGPIPE_STATUS, drop_stdout

logger = logging.getLogger("hf_bahdanau")
# Each command's module, in the order `--help` lists them.
COMMANDS = {"train": train, "distill": distill, "evaluate": evaluate, "calibrate": calibrate, "translate": translate,
            "publish": publish, "demo": demo, "export": export, "serve": serve}  # fmt: skip
TRAINING_COMMANDS = ("train", "distill")  # they parse the options argparse leaves over


def build_parser() -> argparse.ArgumentParser:
    """The `hf-bahdanau` parser, with a sub-parser for each command."""
    parser = argparse.ArgumentParser(
        prog="hf-bahdanau",
        description="Train, evaluate, translate with, export, publish and demonstrate d2l's attention translation "
        "models as Hugging Face models.",
        epilog="Each command has its own help, e.g. hf-bahdanau train --help.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(commands)
    parser.description += f" Commands: {', '.join(commands.choices)}."
    return parser


def _disable_datasets_progress_bars() -> None:
    """Turn off `datasets`' progress bars without importing it (a second of start-up that `translate` never uses):
    through the variable it reads at import, or directly where it is already imported."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()


@contextlib.contextmanager
def _uncollected_imports() -> Iterator[None]:
    """The garbage collector paused while torch and transformers are first imported, and what is then alive frozen
    (`gc.freeze`): its full collections would otherwise go through their growing heap (some 400,000 objects) about
    six times, a second of CPU, to find a few thousand objects of garbage, which stay. Where they are imported
    already (a process that ran a command before), or the collector is off, nothing changes."""
    if "transformers.modeling_utils" in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # later collections pass over the libraries' objects
        gc.enable()


def _prepare_libraries() -> None:
    """Register the model types and the pipeline; the libraries' progress bars only on a terminal."""
    with _uncollected_imports():
        import huggingface_hub
        from transformers.utils import logging as transformers_logging

        from hf_bahdanau import register

        register()  # the model types and the pipeline (`hf_bahdanau_cli` skipped it at import to answer --help fast)
    if not sys.stderr.isatty():
        _disable_datasets_progress_bars()
        huggingface_hub.utils.disable_progress_bars()
        transformers_logging.disable_progress_bar()


def _needs_libraries(args: argparse.Namespace) -> bool:
    """Whether the command needs the model types registered: all but `translate --engine ctranslate2`, which reads an
    export as data (an export made on first use registers them itself)."""
    return not (args.command == "translate" and args.engine == "ctranslate2")


def _uncollected_exit() -> None:
    """At exit, once the exit functions registered after this one have run, freeze what the garbage collector
    tracks: the collections the interpreter makes as it shuts down then pass over torch's and transformers'
    objects (two seconds of CPU), whose memory the system takes back anyway. Registered once a process."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (non-zero with a one-line error on bad input)."""
    _uncollected_exit()
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args, rest = build_parser().parse_known_args(argv)
    try:
        command = COMMANDS[args.command]
        if args.command in TRAINING_COMMANDS:
            command.run(args, rest, argv, prepare=_prepare_libraries)
            return 0
        if rest:
            raise UsageError(f"unrecognized arguments: {option_names(rest)}")
        if _needs_libraries(args):
            if args.command in ("translate", "evaluate", "calibrate"):  # a missing folder answers before torch loads
                check_model_folder(args.model)
            _prepare_libraries()
        command.run(args)
    except InputError as error:  # the user's input (UsageError is one); anything else is a bug: traceback
        logger.error("%s", redact_message(str(error)))  # a message may quote an option's value
        return 1
    except KeyboardInterrupt as interrupt:  # Ctrl-C: training has saved a checkpoint to resume from
        logger.error("%s", str(interrupt) or "interrupted")
        return 130
    except BrokenPipeError:  # stdout's reader went away (`... | head -1`): end quietly, as Unix tools end
        drop_stdout()
        return SIGPIPE_STATUS
    return 0
