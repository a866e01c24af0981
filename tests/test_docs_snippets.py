"""The README's and docs' examples run as written.

Every ```python block of README.md and docs/*.md runs, a file's blocks in order in
one fresh interpreter (later blocks may use names earlier ones defined), in a
temporary directory. Every ``pipeplan ...`` line of a ```bash block runs as
``python -m pipeplan ...`` (``pipeplan/__main__.py`` under that ``sys.argv``) and must exit 0 with no
traceback; a block's lines run in order, in one interpreter per block with a timeout, in one directory
that also holds the repository's ``examples/``. A block right after a
line ``<!-- docs-test: skip REASON -->`` is not run (torchrun, a GPU, your own
package, many processes); the reason is required.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_SKIP = re.compile(r"<!-- docs-test: skip (\S.*?) -->\s*$")
TIMEOUT_S = 180


def blocks(path: Path) -> list[tuple[str, str, int]]:
    """``(language, code, line)`` of each fenced block not marked to skip."""
    text = path.read_text()
    out = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if _SKIP.search(before):
            continue
        out.append((match.group(1), match.group(2), text.count("\n", 0, match.start()) + 1))
    return out


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MPLBACKEND": "Agg", "COLUMNS": "200"}


def test_skip_markers_give_a_reason():
    for path in DOCS:
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("<!-- docs-test"):
                assert _SKIP.search(line), f"{path.name}: malformed marker {line!r}"


def test_extractor_finds_the_examples():
    found = {path.name: [lang for lang, _, _ in blocks(path)] for path in DOCS}
    assert "python" in found["README.md"] and "bash" in found["README.md"]
    assert sum(langs.count("python") for langs in found.values()) >= 8


@pytest.mark.parametrize("path", [p for p in DOCS if any(lang == "python" for lang, _, _ in blocks(p))],
                         ids=lambda p: p.name)
def test_python_blocks_run(path, tmp_path):
    code = "\n\n".join(code for lang, code, _ in blocks(path) if lang == "python")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(),
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, f"{path.name}:\n{result.stderr[-3000:]}"


def _bash_blocks() -> list[tuple[str, list[str]]]:
    """``(where, lines)``: the ``pipeplan ...`` lines of each bash block, in order."""
    out = []
    for path in DOCS:
        for lang, code, first in blocks(path):
            joined = code.replace("\\\n", " ")  # shell line continuations
            lines = [line for line in joined.splitlines() if line.startswith("pipeplan ")]
            if lang == "bash" and lines:
                out.append((f"{path.name}:{first}", lines))
    return out


#: Runs a block's ``pipeplan`` lines in one fresh interpreter, each as ``python -m pipeplan ARGS``
#: would (``runpy`` executes ``pipeplan/__main__.py`` with that ``sys.argv``), and prints one JSON
#: ``[exit status, stderr]`` per line. One interpreter per block, not per line: the interpreter's
#: start and pipeplan's import were most of this test's time (about 1 CPU s a line, 50 lines).
_DRIVER = """
import contextlib, io, json, runpy, sys, traceback
results = []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["pipeplan", *argv]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            runpy.run_module("pipeplan", run_name="__main__", alter_sys=True)
            status = 0
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # what the shell would see: a traceback and exit 1
            traceback.print_exc()
            status = 1
    results.append([status, err.getvalue()])
    if status != 0:
        break  # a later line may need what this one should have written
print(json.dumps(results))
"""


@pytest.mark.parametrize("where, lines", _bash_blocks(), ids=[w for w, _ in _bash_blocks()])
def test_pipeplan_lines_run(where, lines, tmp_path):
    """A block's lines run in order in one directory (a later line may read what an earlier wrote),
    next to the repository's examples/."""
    import json

    (tmp_path / "examples").symlink_to(ROOT / "examples")
    argvs = [shlex.split(line, comments=True)[1:] for line in lines]
    done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(argvs)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=TIMEOUT_S * len(lines))
    assert done.returncode == 0, f"{where}: the driver failed\n{done.stderr[-3000:]}"
    results = json.loads(done.stdout.strip().rsplit("\n", 1)[-1])
    for line, (status, stderr) in zip(lines, results):
        assert status == 0, f"{where}: {line}\n{stderr[-3000:]}"
        assert "Traceback" not in stderr, f"{where}: {line}\n{stderr[-3000:]}"
    assert len(results) == len(lines), f"{where}: ran {len(results)} of {len(lines)} lines"


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_no_table_cell_has_an_unescaped_pipe_in_code(doc: Path) -> None:
    """A ``|`` inside a table row ends the cell, in backticks too: tables write ``\\|`` (``block\\|uniform``)."""
    bad = [f"{doc.name}:{number}: `{code}`" for number, line in enumerate(doc.read_text().splitlines(), 1)
           if line.startswith("|") for code in re.findall(r"`([^`]*)`", line) if re.search(r"(?<!\\)\|", code)]
    assert not bad, bad
