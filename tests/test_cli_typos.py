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


@pytest.mark.parametrize(("argv", "line"), [
    # newcomer walk: these named internal fields (num_gpus, top, gpu, preset) or no flag at all
    ("plan --preset pi0 --gpus 0 --global-batch 8", "pipeplan plan: error: --gpus must be >= 1, got 0"),
    ("plan --preset pi0 --gpus 8 --global-batch 8 --top 0", "pipeplan plan: error: --top must be >= 1, got 0"),
    ("plan --preset pi0 --gpus 8 --global-batch 8 --budget -1", "pipeplan plan: error: --budget must be > 0, got -1"),
    ("model --preset pi0 --gpu h100", "pipeplan model: error: --gpu 'h100' is not one of a100-40g, a100-80g, "
                                      "h100-80g, h100-96g, h200-141g, l40s, cpu (did you mean h100-80g or h100-96g?)"),
    ("plan --preset openvla --gpus 8 --global-batch 8", "(did you mean openvla-7b or openvla-oft?)"),
    ("plan --preset pi0 --gpus 8 --global-batch 8 --dp-modes zero3", "--dp-modes: zero3 is not a data-parallel mode"),
    ("simulate --forward 1,2 --plot x.txt", "pipeplan simulate: error: --plot 'x.txt' must end in .png, .svg, .pdf"),
])
def test_bad_values_name_their_flag(argv: str, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    from pipeplan.cli import main as run

    try:
        status = run(argv.split())
    except SystemExit as exit_info:
        status = int(exit_info.code or 0)
    assert status == 2
    err = capsys.readouterr().err
    assert line in err and err.count("\n") == 1, err


@pytest.mark.parametrize(("verb", "library", "shown"), [
    # second walk: errors named the library's arguments instead of the flags
    ("partition", "memory_capacity = 20 GiB fits no partition", "--memory = 20 GiB fits no partition"),
    ("partition", "num_stages must be <= the number of layers (4)", "--stages must be <= the number of layers (4)"),
    ("model", "tensor_parallel=3 must divide module 'vision''s heads", "--tp=3 must divide module 'vision''s heads"),
    ("simulate", "forward[2] must be > 0", "--forward[2] must be > 0"),
    # a profile file's own fields stay as the file spells them; so does a configuration's description
    ("simulate", "layer 1 (block.0): weight = 3.0 must be <= backward", "layer 1 (block.0): weight = 3.0 must be <= backward"),
    ("plan", "the smallest memory that fits (pp=4, dp=1)", "the smallest memory that fits (pp=4, dp=1)"),
    ("partition", "no partition fits", "no partition fits"),
])
def test_library_names_become_flags(verb: str, library: str, shown: str) -> None:
    from pipeplan.cli import flag_names

    assert flag_names(verb, library) == shown
