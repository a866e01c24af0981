"""File errors name the real reason: missing, a directory, not a regular file, empty, not UTF-8."""

from __future__ import annotations

import os

import pytest

from pipeplan._files import check_output_path, read_text
from pipeplan.errors import InvalidInputError
from pipeplan.layers import LayerProfile


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda d: d / "missing.csv", "does not exist"),
        (lambda d: (d / "dir.csv").mkdir() or d / "dir.csv", "is a directory"),
        (lambda d: "/dev/null", "is not a regular file"),
        (lambda d: (d / "empty.csv").write_text("") and d / "empty.csv" or d / "empty.csv", "is empty"),
        (lambda d: (d / "bin.csv").write_bytes(b"name,forward\n\xff\xfe,1\n") and d / "bin.csv",
         r"is not UTF-8 text \(byte 0xff at offset 13\)"),
    ],
)
def test_profile_loader_names_the_reason(tmp_path, make, reason):
    path = make(tmp_path)
    with pytest.raises(InvalidInputError, match=reason):
        LayerProfile.from_file(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file(tmp_path):
    path = tmp_path / "locked.csv"
    path.write_text("name,forward\na,1\n")
    path.chmod(0)
    with pytest.raises(InvalidInputError, match="permission denied"):
        read_text(path, "profile file")


def test_byte_order_mark_is_fine(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffname,forward\na,1\nb,2\n".encode())
    assert LayerProfile.from_file(path).num_layers == 2


@pytest.mark.parametrize("target, reason", [("nodir/out.png", "does not exist"), (".", "is a directory"),
                                            ("", "needs a file name")])
def test_output_paths_are_checked_before_work(tmp_path, target, reason):
    with pytest.raises(InvalidInputError, match=reason):
        check_output_path(str(tmp_path / target) if target else target, "--plot")
    assert check_output_path(tmp_path / "ok.png", "--plot") == tmp_path / "ok.png"
