"""The ``pipeplan`` console script: Ctrl-C from the first moment exits 130 with one line.

    [project.scripts]
    pipeplan = "pipeplan_entry:main"

A module outside the ``pipeplan`` package, so importing it imports nothing heavy: the
package (numpy, rich, every verb's parser) is imported inside :func:`main`'s handler, and a
Ctrl-C during that import, the parsing or the work prints ``pipeplan: interrupted`` and
returns 130 (128 + SIGINT) instead of a traceback. (A Ctrl-C before Python installs its own
handler ends the process by the signal, which a shell also reports as 130.)
"""

from __future__ import annotations

import sys

__all__ = ["main", "INTERRUPTED"]

#: The exit status of an interrupted command: 128 + SIGINT, as a shell reports a process ended by Ctrl-C.
INTERRUPTED = 130


def main() -> int:
    """Import the command line and run it; a KeyboardInterrupt anywhere in that is one line and 130."""
    try:
        from pipeplan.cli import main as run

        return run()
    except KeyboardInterrupt:
        try:
            print("pipeplan: interrupted", file=sys.stderr)
        except KeyboardInterrupt:  # a second Ctrl-C while saying so: the status is what matters
            pass
        return INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
