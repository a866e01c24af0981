"""torchtitan's last TOML release for the engine tests: where it is, and a model its splitter can split.

torchtitan 0.2.2 (PyPI, 2026-02-20) is the TOML release e347b1e5e (2026-02-15) plus five commits that
touch neither ``torchtitan/config`` nor ``torchtitan/distributed`` (``git log e347b1e5e..v0.2.2``:
``train.py``'s logging, ``experiments/``, CI; its ``config/job_config.py``, ``config/manager.py`` and
``distributed/pipeline_parallel.py`` are byte for byte e347b1e5e's). It is named ``torchtitan`` like
0.3.0 in the engines venv, so it is installed beside it, not in it, and imported only by a
subprocess whose ``sys.path`` starts with its folder (the scripts assert the module they got)::

    pip install --no-deps --target .venv/torchtitan-toml torchtitan==0.2.2

``$PIPEPLAN_TORCHTITAN_TOML`` names another copy instead (that folder, or a checkout of
e347b1e5e: either holds ``torchtitan/config/manager.py``). Without one the TOML tests skip, but
under ``PIPEPLAN_REQUIRE_ENGINES=1`` (CI) they fail.

Usage::

    root = toml_release()  # the folder to put first on a subprocess's sys.path
    model = llama3_shaped(22)  # tok_embeddings, layers.0..21, norm, output: the TOML export's names
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["INSTALL", "SIDE_INSTALL", "WIDTH", "llama3_shaped", "toml_release"]

#: The side install the tests find without ``$PIPEPLAN_TORCHTITAN_TOML`` (the repository's ``.venv``).
SIDE_INSTALL = Path(__file__).resolve().parents[1] / ".venv" / "torchtitan-toml"
#: The command that makes it, from the repository root, with the engines venv's pip.
INSTALL = "pip install --no-deps --target .venv/torchtitan-toml torchtitan==0.2.2"


def _is_release(root: Path) -> bool:
    return (root / "torchtitan" / "config" / "manager.py").is_file()


def toml_release() -> Path:
    """The folder holding the TOML release's ``torchtitan`` package; skips without one (fails in CI).

    ``$PIPEPLAN_TORCHTITAN_TOML`` wins where it is set, and must then name such a folder.
    """
    named = os.environ.get("PIPEPLAN_TORCHTITAN_TOML")
    if named:
        if not _is_release(Path(named)):
            pytest.fail(f"$PIPEPLAN_TORCHTITAN_TOML={named} holds no torchtitan/config/manager.py")
        return Path(named)
    if _is_release(SIDE_INSTALL):
        return SIDE_INSTALL
    reason = f"torchtitan's TOML release (0.2.2 = e347b1e5e) is not installed beside the engines: {INSTALL}"
    if os.environ.get("PIPEPLAN_REQUIRE_ENGINES") == "1":
        pytest.fail(f"PIPEPLAN_REQUIRE_ENGINES=1 and {reason}")
    pytest.skip(reason)


#: The width of every module of :func:`llama3_shaped` (features per sample).
WIDTH = 4


def llama3_shaped(layers: int) -> object:
    """A small torch model with the module names of torchtitan's llama3, as the TOML export writes them.

    ``tok_embeddings``, ``layers`` (an ``nn.ModuleDict`` keyed ``"0"`` … as torchtitan's ``Transformer``
    holds its blocks, so a split keeps their names), ``norm`` and ``output``, each a Linear (a
    LayerNorm for ``norm``) of :data:`WIDTH` features, seeded the same in every process. Its forward
    runs what a split left, as torchtitan requires of a model it pipelines (a removed module is None).
    """
    import torch
    from torch import nn

    class Llama3Shaped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.tok_embeddings = nn.Linear(WIDTH, WIDTH)
            self.layers = nn.ModuleDict({str(i): nn.Linear(WIDTH, WIDTH) for i in range(layers)})
            self.norm = nn.LayerNorm(WIDTH)
            self.output = nn.Linear(WIDTH, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = torch.tanh(self.tok_embeddings(x)) if self.tok_embeddings is not None else x
            for layer in self.layers.values():
                x = torch.tanh(layer(x))
            x = self.norm(x) if self.norm is not None else x
            return self.output(x) if self.output is not None else x

    return Llama3Shaped()
