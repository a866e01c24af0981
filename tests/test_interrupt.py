"""Ctrl-C at any moment of the ``pipeplan`` command exits 130 with one line, never a traceback.

The console script is :mod:`pipeplan_entry` (pyproject's ``[project.scripts]``): a module outside
the package, so the package's own import runs inside its handler. Two kinds of check: a
KeyboardInterrupt raised at a chosen point (deterministic: inside the package's import, inside
parsing), and real SIGINTs sent to a running command at several moments after it starts (the
timing varies with the machine). A process ended by SIGINT before Python installs its handler
has no Python to print anything: its status is ``-SIGINT``, which a shell reports as 130 too. A
SIGINT while Python imports its own ``site`` module (a few milliseconds, before any of pipeplan's
code) is Python's fatal startup error, exit 1: outside what pipeplan can guard, so not counted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

#: What the console script pip writes does: import the entry's main and exit with its status.
CONSOLE_SCRIPT = "import sys; from pipeplan_entry import main; sys.exit(main())"

#: A command that runs for seconds (so every signal lands before it is done) and prints little.
LONG_COMMAND = ["simulate", "--forward", "1,1,1,1", "-m", "100000", "--json"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _run(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=_env(),
                          timeout=120)


def _when_the_package_imports_numpy(*action: str) -> str:
    """The console script, run with ACTION (lines of Python) done once where the package imports numpy."""
    return ("import builtins, os, signal, sys, time\n"
            "real = builtins.__import__\n"
            "done = []\n"
            "def fake(name, *args, **kwargs):\n"
            "    if name == 'numpy' and 'pipeplan' in sys.modules and not done:\n"
            "        done.append(True)\n"
            + "".join(f"        {line}\n" for line in action) +
            "    return real(name, *args, **kwargs)\n"
            "builtins.__import__ = fake\n" + CONSOLE_SCRIPT)


def test_interrupt_while_the_package_imports_is_one_line_and_130() -> None:
    # KeyboardInterrupt where the package imports numpy: deep inside `import pipeplan`, before main exists
    done = _run(_when_the_package_imports_numpy("raise KeyboardInterrupt"), "simulate", "--forward", "1,1")
    assert done.returncode == 130, done.stderr
    assert done.stderr == "pipeplan: interrupted\n"
    assert done.stdout == ""


def test_a_sigint_inside_a_c_extensions_import_waits_for_the_import_to_end() -> None:
    # numpy's C code imports `datetime` through PyCapsule_Import, which turns a KeyboardInterrupt
    # raised there into an ImportError (seen in CI: a SIGINT 0.03 s after start gave a traceback).
    # The fake import does the same: if the SIGINT became a KeyboardInterrupt during the import,
    # an ImportError would come out; held back until the import ends, it is one line and 130.
    code = _when_the_package_imports_numpy(
        "try:",
        "    os.kill(os.getpid(), signal.SIGINT)",
        "    time.sleep(0.05)",
        "except KeyboardInterrupt:",
        "    raise ImportError('PyCapsule_Import could not import module \"datetime\"') from None")
    done = _run(code, "simulate", "--forward", "1,1")
    assert done.returncode == 130, done.stderr
    assert done.stderr == "pipeplan: interrupted\n"
    assert done.stdout == ""


def test_interrupt_while_parsing_is_one_line_and_130() -> None:
    code = ("import argparse\n"
            "def fake(self, *args, **kwargs):\n"
            "    raise KeyboardInterrupt\n"
            "argparse.ArgumentParser.parse_known_args = fake\n" + CONSOLE_SCRIPT)
    done = _run(code, "simulate", "--forward", "1,1")
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("interrupted")


def test_the_entry_runs_the_command_line() -> None:
    done = _run(CONSOLE_SCRIPT, "simulate", "--forward", "1,1", "-m", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert '"makespan"' in done.stdout


def test_sigint_at_any_moment_exits_130_without_a_traceback() -> None:
    """SIGINT right after start, while importing, while parsing and while working: 130, no traceback.

    (``python -m pipeplan`` is not checked from its first moment: Python's runpy imports the package
    before any of its code runs, so only the console script guards that import.)
    """
    command = [sys.executable, "-c", CONSOLE_SCRIPT, *LONG_COMMAND]
    delays = (0.0, 0.01, 0.03, 0.08, 0.15, 0.3, 0.5, 0.8, 1.5, 3.0)
    endings = []
    for delay in delays:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   env=_env())
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        try:
            _out, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            pytest.fail(f"SIGINT after {delay} s: the process was still running 60 s later")
        endings.append((delay, process.returncode, err))
    for delay, status, err in endings:
        if status == 1 and "Fatal Python error: init_" in err:
            continue  # Python's own startup (init_import_site, init_sys_streams), before any code of pipeplan's
            # runs: not ours to guard
        assert status in (130, -signal.SIGINT), f"SIGINT after {delay} s: exit {status}, stderr {err!r}"
        assert "Traceback" not in err, f"SIGINT after {delay} s printed a traceback:\n{err}"
        if status == 130:
            assert err.strip().endswith("interrupted"), f"SIGINT after {delay} s: {err!r}"
    # each delay is a new process, whose start is slower or faster with the machine's load: only the
    # last SIGINT, seconds into the work, surely lands in pipeplan's code
    assert endings[-1][1] == 130, [(delay, status) for delay, status, _err in endings]
    print("SIGINT after (s) -> exit:", [(delay, status) for delay, status, _err in endings])


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks on this platform")
def test_the_import_restores_the_callers_mask_and_leaves_a_blocked_sigint_blocked() -> None:
    from pipeplan_entry import _import_with_sigint_held

    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        _import_with_sigint_held()
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    _import_with_sigint_held()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
