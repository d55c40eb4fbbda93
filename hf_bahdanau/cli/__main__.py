"""`python -m hf_bahdanau.cli`: the `hf-bahdanau` command. Python imports the package first, which registers the
model types at once: the console script (`hf_bahdanau_cli`) answers `--help` without that."""

import sys

from hf_bahdanau.cli import main

sys.exit(main())
