"""`python -m hf_bahdanau.cli`: the `hf-bahdanau` command."""

import sys

from hf_bahdanau.cli import main

sys.exit(main())
