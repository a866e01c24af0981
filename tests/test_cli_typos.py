"""Issue 24 item 9: no abbreviations, and a misspelt flag is named with the closest real one."""

from __future__ import annotations

import pytest

from pipeplan.cli import main


@pytest.mark.parametrize(("argv", "line"), [
    # the misspelt flag used to surface as "the following arguments are required: --global-batch"
    ("plan --preset pi0 --gpus 8 --global-bach 256",
     "pipeplan plan: error: unrecognized argument --global-bach (did you mean --global-batch?)"),
    ("plan --preset pi0 --gpus 8 --global-batch 256 --memroy 40GB",
     "pipeplan plan: error: unrecognized argument --memroy (did you mean --memory?)"),
    # an abbreviation used to be accepted silently
    ("plan --preset pi0 --gpus 8 --global 256",
     "pipeplan plan: error: unrecognized argument --global (did you mean --global-batch?)"),
    ("simulate --forward 1,2 --frobnicate", "pipeplan simulate: error: unrecognized argument --frobnicate (see"),
    ("simulate --forward 1,2 stray", "pipeplan simulate: error: unrecognized arguments: stray"),
    # a prefix names every flag it starts; a renamed flag (hidden) is never suggested
    ("simulate --forward 1,2 --step",
     "pipeplan simulate: error: unrecognized argument --step (did you mean --step-table or --step-boundary?)"),
    ("run --checkpointing", "pipeplan run: error: unrecognized argument --checkpointing (see"),
])
def test_unknown_flags_get_one_line_with_the_closest_flag(argv: str, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv.split())
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(line), err
    assert err.count("\n") == 1
