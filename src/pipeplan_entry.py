"""The ``pipeplan`` console script: Ctrl-C from the first moment exits 130 with one line.

    [project.scripts]
    pipeplan = "pipeplan_entry:main"

A module outside the ``pipeplan`` package, so importing it imports nothing heavy: the
package (numpy, rich, every verb's parser) is imported inside :func:`main`'s handler, and a
Ctrl-C during that import, the parsing or the work prints ``pipeplan: interrupted`` and
returns 130 (128 + SIGINT) instead of a traceback. (A Ctrl-C before Python installs its own
handler ends the process by the signal, which a shell also reports as 130.)

While the package imports, SIGINT is held back (blocked, where the platform can) and delivered
as soon as the import is done: a KeyboardInterrupt raised inside a C extension's own import
(numpy importing ``datetime`` through ``PyCapsule_Import``) comes out as an ``ImportError``,
which no handler could tell from a broken install.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: importing typing here would widen the unguarded first moments
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["main", "INTERRUPTED"]

#: The exit status of an interrupted command: 128 + SIGINT, as a shell reports a process ended by Ctrl-C.
INTERRUPTED = 130


def main() -> int:
    """Import the command line and run it; a KeyboardInterrupt anywhere in that is one line and 130."""
    try:
        run = _import_with_sigint_held()
        return run()
    except KeyboardInterrupt:
        try:
            print("pipeplan: interrupted", file=sys.stderr)
        except KeyboardInterrupt:  # a second Ctrl-C while saying so: the status is what matters
            pass
        return INTERRUPTED


def _import_with_sigint_held() -> Callable[[], int]:
    """Import the command line with SIGINT held back; one that came meanwhile is raised when it is done.

    Imports only here, inside :func:`main`'s handler, so that importing this module stays as small
    as its own ``sys``: a Ctrl-C before :func:`main` runs has nothing to catch it.
    """
    import signal

    block = getattr(signal, "pthread_sigmask", None)  # Windows has none: nothing to block with
    held = block(signal.SIG_BLOCK, {signal.SIGINT}) if block is not None else None  # the mask before
    try:
        from pipeplan.cli import main as run
    finally:
        if block is not None and held is not None:
            block(signal.SIG_SETMASK, held)  # as it was: a caller's own block of SIGINT stays
    return run


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
