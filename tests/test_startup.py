"""What `hf-bahdanau translate` imports to start: the model's libraries, not the corpus ones (`datasets`, pandas,
pyarrow), which cost a second or more of start-up on a busy machine."""

import subprocess
import sys

import pytest
from helpers import make_model

HEAVY_UNUSED = ("datasets", "pandas", "pyarrow")


@pytest.fixture(scope="module")
def model(tokenizer):
    return make_model("d2l_transformer", vocab_size=len(tokenizer))


@pytest.mark.slow  # starts two processes
def test_translating_one_sentence_imports_no_corpus_library(folder, tmp_path):
    script = tmp_path / "hf-bahdanau"  # as pip's console script, which names the process
    script.write_text(
        "import sys\nfrom hf_bahdanau_cli import main\nstatus = main()\n"
        f"print('imported:', sorted(set({HEAVY_UNUSED!r}) & set(sys.modules)), status)\n"
    )
    for source in (["a dog runs ."], []):  # an argument, then standard input
        result = subprocess.run([sys.executable, str(script), "translate", "--model", str(folder), "--num-beams", "1",
                                 "--max-new-tokens", "3", *source], input="a cat .\n", capture_output=True, text=True,
                                timeout=300)  # fmt: skip
        *translations, imported = result.stdout.splitlines()
        assert imported == "imported: [] 0", result.stderr[-3000:]
        assert len(translations) == 1
