"""Replace the text between two marker comments in a docs file (shared by the benchmarks).

    from _markers import replace_between
    replace_between("docs/simulator.md", "simulate-speed", table_markdown)
"""

from __future__ import annotations

from pathlib import Path


def replace_between(path: str | Path, name: str, body: str) -> None:
    """Put ``body`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``.

    The markers are appended to the file if missing.
    """
    path = Path(path)
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else ""
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
