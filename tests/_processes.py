"""The child processes of the test process, for tests that no rank is left behind."""

from __future__ import annotations

import os
from pathlib import Path


def live_children() -> set[int]:
    """Live (not zombie) child processes of this process, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else []
        except OSError:
            continue
        if fields and fields[0] != "Z" and int(fields[1]) == os.getpid():
            found.add(int(entry.name))
    return found
