"""The `hf-bahdanau` console script's entry point (`python -m hf_bahdanau.cli` runs the same command).

It lives beside the package, not in it, so that it is imported first: `hf_bahdanau/__init__.py` finds it in
`sys.modules` and leaves the registration of the model types to `main`, which registers once the arguments are
parsed, so that `--help` and usage errors answer without importing torch (and never for `translate --engine
ctranslate2`, which needs neither torch nor transformers). Any other `import hf_bahdanau` registers at once.
"""

from hf_bahdanau.cli import main

__all__ = ["main"]
