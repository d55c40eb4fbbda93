"""A Space: the demo page (`hf_bahdanau.serving.demo`) of a model published on the Hub, written and uploaded; or a
static Space of the page that translates in the browser (`export --format web`).

`publish_space` writes `app.py`, `requirements.txt`, a `README.md` with the `sdk: gradio` header, and a copy of this
package, which `app.py` imports. `publish_web_space` uploads a web export's files with a `README.md` whose header
says `sdk: static`: the Hub serves them as they are.
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hf_bahdanau.json_files import read_json

from . import upload
from .upload import check_repo_id

logger = logging.getLogger(__name__)

SPACE_SDK_VERSION = "6.31.0"  # a Space's gradio where none is installed here (else the installed one)
SPACE_APP = '''"""A demo of the translation model {model_repo} (written by `hf-bahdanau publish --space`).

The hf_bahdanau/ folder beside this file is the package that serves the page; it loads the model by its repo id.
"""

from hf_bahdanau.serving.demo import build_demo, launch

demo = build_demo({model_repo!r})

if __name__ == "__main__":
    launch(demo, host=None)  # the Space's host and port
'''
SPACE_README = """# {title}

A page to try the translation model [{model_repo}](https://huggingface.co/{model_repo}): a translation (greedy, beam
search or sampling), the n-best list with each translation's score (its mean token log-probability) and the attention
between the words of the source and of a chosen translation.

Written by `hf-bahdanau publish --space`: `hf_bahdanau/` is a copy of the package that serves the page. A private
model needs the Space's secret `HF_TOKEN`.
"""


@dataclass
class Space:
    """A Space's files: `texts` (`app.py`, `requirements.txt`, `README.md`) and the package's files copied beside
    them (`package`: paths in the Space); `url` once uploaded."""

    space_id: str
    texts: dict[str, str]
    package: list[str]
    url: str | None = None

    @property
    def files(self) -> list[str]:
        return sorted([*self.texts, *self.package])


def _package_files() -> dict[str, Path]:
    """This package's source files (Python, the card template) by their path in a Space, `hf_bahdanau/...`."""
    root = Path(__file__).resolve().parents[1]
    found = [path for path in root.rglob("*") if path.suffix in (".py", ".md") and "__pycache__" not in path.parts]
    return {f"hf_bahdanau/{path.relative_to(root).as_posix()}": path for path in sorted(found)}


def space_texts(space_id: str, model_repo: str, license: str | None = None) -> dict[str, str]:
    """`app.py`, `requirements.txt` (the package's dependencies) and `README.md` (the Space's YAML header) of a
    Space `space_id` that serves the demo of the published model `model_repo`."""
    import yaml

    try:
        sdk_version = importlib.metadata.version("gradio")
    except importlib.metadata.PackageNotFoundError:
        sdk_version = SPACE_SDK_VERSION
    requires = importlib.metadata.requires("hf_bahdanau") or []
    title = space_id.split("/")[-1]
    header = {"title": title, "emoji": "🔤", "colorFrom": "indigo", "colorTo": "gray", "sdk": "gradio",
              "sdk_version": sdk_version, "app_file": "app.py", "models": [model_repo], "pinned": False,
              **({"license": license} if license else {})}  # fmt: skip
    readme = f"---\n{yaml.safe_dump(header, sort_keys=False, allow_unicode=True)}---\n\n"
    return {
        "app.py": SPACE_APP.format(model_repo=model_repo),
        "requirements.txt": "".join(f"{line}\n" for line in requires if "extra ==" not in line),
        "README.md": readme + SPACE_README.format(title=title, model_repo=model_repo),
    }


def write_space(folder: str | Path, space: Space) -> list[str]:
    """Write the Space's files into `folder`; their paths."""
    folder = Path(folder)
    for name, text in space.texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    for name, path in _package_files().items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, folder / name)
    return space.files


def publish_space(
    space_id: str,
    model_repo: str,
    *,
    private: bool = False,
    dry_run: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
    license: str | None = None,
) -> Space:
    """Write the Space that serves the demo of `model_repo` and upload it as the Space `space_id` (created with the
    Gradio SDK if needed); a `dry_run` only says what it would upload. Errors as `upload.publish`'s."""
    check_repo_id(space_id)
    check_repo_id(model_repo)
    space = Space(space_id, space_texts(space_id, model_repo, license), list(_package_files()))
    if dry_run:
        return space
    message = commit_message or f"Demo of {model_repo} with hf-bahdanau publish --space"
    with tempfile.TemporaryDirectory() as folder:
        files = write_space(folder, space)
        space.url = upload.upload_files(Path(folder), space_id, files, private, None, message, token, repo_type="space")
    logger.info("uploaded the Space %s (%d files)", space.url, len(space.files))
    return space


STATIC_README = """# {title}

Translation {source_language} → {target_language} in the browser: `{name}`, a {model_type} model (ONNX,
{quantization}), run by ONNX Runtime Web on the visitor's device; nothing is sent to a server. Another page can use it
through `window.hfBahdanau.translate(text, {{numBeams: 1}})`, a Promise of the translation.

Written by `hf-bahdanau publish --format web` from the folder `hf-bahdanau export --format web` writes.
"""
EXPORT_MARKER = "hf_bahdanau_export.json"  # the export's own record: not part of the Space


@dataclass
class StaticSpace:
    """A static Space: its `README.md` (`readme`) and the page's files (`files`, paths in the Space, the README
    among them); `url` once uploaded."""

    space_id: str
    readme: str
    files: list[str]
    url: str | None = None


def static_readme(space_id: str, page: dict, license: str | None = None) -> str:
    """The `README.md` of a static Space `space_id` serving a web export whose `model/page.json` is `page`."""
    import yaml

    title = space_id.split("/")[-1]
    header = {"title": title, "emoji": "🔤", "colorFrom": "indigo", "colorTo": "gray", "sdk": "static",
              "app_file": "index.html", "pinned": False, **({"license": license} if license else {})}  # fmt: skip
    return f"---\n{yaml.safe_dump(header, sort_keys=False, allow_unicode=True)}---\n\n" + STATIC_README.format(
        title=title, **page
    )


def publish_web_space(
    model_or_page: str | Path,
    space_id: str,
    *,
    private: bool = False,
    dry_run: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
    license: str | None = None,
    runtime: str | None = None,
) -> StaticSpace:
    """Upload the web export `model_or_page` (or, given a model folder or Hub repo, its int8 web export, made in a
    temporary folder) as the static Space `space_id`, with a `README.md` (`static_readme`); a `dry_run` only says
    what it would upload. `runtime`: as `export_web`'s. Errors as `upload.publish`'s."""
    from hf_bahdanau.decoding.export.web import export_web, is_web_folder

    check_repo_id(space_id)
    with tempfile.TemporaryDirectory(prefix="hf_bahdanau_space_") as scratch:
        page = Path(model_or_page)
        if not is_web_folder(page):
            page = export_web(model_or_page, Path(scratch) / "page", runtime=runtime)
        folder = Path(scratch) / "space"
        shutil.copytree(page, folder, ignore=shutil.ignore_patterns(EXPORT_MARKER))
        readme = static_readme(space_id, read_json(page / "model" / "page.json"), license)
        files = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())
        space = StaticSpace(space_id, readme, sorted({*files, "README.md"}))
        if dry_run:
            return space
        (folder / "README.md").write_text(readme, encoding="utf-8")
        message = commit_message or "Translation in the browser with hf-bahdanau publish --format web"
        space.url = upload.upload_files(folder, space_id, space.files, private, None, message, token,
                                        repo_type="space", space_sdk="static")  # fmt: skip
    logger.info("uploaded the static Space %s (%d files)", space.url, len(space.files))
    return space
