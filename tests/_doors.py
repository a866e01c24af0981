"""Close the doors through which a CLI verb would start processes or time real kernels.

    from _doors import Door, close_doors
    close_doors(monkeypatch)          # in a fixture: such a call now raises Door once its arguments passed

A test that runs every verb in-process (the fuzzers) checks the arguments, not the work behind
them: ``run`` would spawn ranks, ``profile`` and ``calibrate`` would time torch kernels,
``dual-rate`` would run a study.
"""

from __future__ import annotations

import pytest


class Door(BaseException):
    """Raised where a verb would start processes or time real kernels: its arguments passed.

    A BaseException, so no ``except Exception`` in the verb turns it into an error line.
    """


def close_doors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace every process-starting or kernel-timing entry with one that raises :class:`Door`.

    Without torch nothing is replaced: those verbs refuse in one line before reaching a door.
    """

    def stop(*args: object, **kwargs: object) -> None:
        raise Door()

    try:
        import pipeplan.dualrate.study as study
        import pipeplan.lessons.pipeline as seed
        import pipeplan.runtime as runtime
        import pipeplan.runtime.device_calibration as calibration
        import pipeplan.runtime.launch as launch
        import pipeplan.runtime.loop as loop
    except ImportError:
        return
    for module in (runtime, launch):
        if hasattr(module, "spawn"):
            monkeypatch.setattr(module, "spawn", stop)
    monkeypatch.setattr(seed, "run_demo", stop)
    monkeypatch.setattr(loop, "profile_model", stop)
    monkeypatch.setattr(calibration, "time_device", stop)
    monkeypatch.setattr(study, "run_study", stop)
