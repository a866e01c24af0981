"""A new GPU is one record in one module and one registry line: proved on a scratch copy of the package.

The copy gains ``hardware/fakegpu.py`` (one :class:`~pipeplan.hardware.DeviceRecord`) and one line in
``hardware/registry.py`` (plus the module's name in its import); nothing else is edited. In a fresh
interpreter on that copy, ``pipeplan plan --gpu fakegpu`` plans on it, a cluster of it takes its own
intra-node link (not the NVLink 4 a device no record names gets), and the calibration's fit maps the
name torch reports for it back to it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeplan import hardware
from pipeplan.planner import Cluster

ROOT = Path(__file__).resolve().parent.parent

FAKE_MODULE = '''"""A fake GPU for the registry test."""

from __future__ import annotations

from .record import DeviceRecord
from .roofline import Device

__all__ = ["FAKEGPU"]

FAKEGPU = DeviceRecord(
    Device("fakegpu", 24 * 2**30, 150e12, memory_bandwidth=1.2e12, num_sms=84, gemm_efficiency=0.7,
           description="a GPU that does not exist"),
    intra_node="pcie-gen4", torch_names=(r"FakeGPU\\s*9000",))
'''

CHECK = '''
import contextlib, io, json, sys
import pipeplan
from pipeplan import hardware
from pipeplan.cli import main
from pipeplan.hardware.fit import GemmTiming, MemoryTiming, Timings, device_from_timings
from pipeplan.planner import Cluster

def plan(*extra):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["plan", "--spec", sys.argv[1], "--gpus", "8", "--gpu", "fakegpu", "--global-batch", "64",
                     "--json", *extra])
    return code, json.loads(out.getvalue())["plans"] if code == 0 else None

default_code, default = plan()
_, pcie = plan("--intra-link", "pcie-gen4")
_, nvlink = plan("--intra-link", "nvlink-h100")
gemm = GemmTiming(1024, 1024, 1024, 2 * 1024**3 / 75e12 + 1e-5)           # half the fake's 150 TFLOP/s
timings = Timings("FakeGPU 9000 PCIe", memory_bytes=24 * 2**30, num_sms=84, gemms=(gemm,),
                  memory=(MemoryTiming("copy", 1e9, 1e9 / 0.6e12 + 1e-5),), launch=(1e-5,))
fitted = device_from_timings(timings)
print(json.dumps({
    "package": pipeplan.__file__,
    "names": hardware.device_names(),
    "plan_exit": default_code,
    "plan_device_default_link_is_its_own": default == pcie,
    "plan_differs_on_nvlink": default != nvlink,
    "cluster_intra_node": Cluster.of("fakegpu", 16).intra_node.name,
    "intra_node_link": hardware.intra_node_link("fakegpu").name,
    "torch_name": hardware.match_torch_name("FakeGPU 9000 PCIe").name,
    "fitted": [fitted.name, fitted.peak_flops, fitted.gemm_efficiency],
}))
'''


def _add_fake_gpu(src: Path) -> None:
    """The two edits a new GPU takes: its module, and its line (and module name) in the registry."""
    (src / "pipeplan" / "hardware" / "fakegpu.py").write_text(FAKE_MODULE)
    registry = src / "pipeplan" / "hardware" / "registry.py"
    text = registry.read_text()
    import_line, last_entry = "from . import ada, ampere, cpu, hopper\n", "    cpu.CPU,\n"
    assert text.count(import_line) == 1 and text.count(last_entry) == 1
    text = text.replace(import_line, "from . import ada, ampere, cpu, fakegpu, hopper\n")
    registry.write_text(text.replace(last_entry, last_entry + "    fakegpu.FAKEGPU,\n"))


def test_a_new_gpu_is_one_record_and_one_registry_line(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _add_fake_gpu(src)
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, str(script), str(ROOT / "examples" / "model_spec.json")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["package"]).is_relative_to(src)
    assert result["names"][-1] == "fakegpu"
    assert result["plan_exit"] == 0
    assert result["plan_device_default_link_is_its_own"]  # --gpu fakegpu plans on PCIe, as its record says
    assert result["plan_differs_on_nvlink"]  # ... and the link matters to the plan: no silent NVLink 4
    assert result["cluster_intra_node"] == result["intra_node_link"] == "pcie-gen4"
    assert result["torch_name"] == "fakegpu"
    name, peak, gemm_efficiency = result["fitted"]
    assert (name, peak) == ("fakegpu", 150e12)  # the fit takes the record's spec peak
    assert gemm_efficiency == pytest.approx(0.5, rel=0.01)


@pytest.mark.parametrize("name", hardware.device_names())
def test_every_cluster_defaults_to_its_records_intra_node_link(name: str) -> None:
    record = hardware.get(name)
    assert Cluster.of(name, 16).intra_node is record.intra_node_link is hardware.intra_node_link(name)


def test_the_intra_node_links_of_the_records() -> None:
    assert {name: hardware.get(name).intra_node for name in hardware.device_names()} == {
        "a100-40g": "nvlink-a100", "a100-80g": "nvlink-a100", "h100-80g": "nvlink-h100",
        "h100-96g": "nvlink-h100", "h200-141g": "nvlink-h100", "l40s": "pcie-gen4", "cpu": "pcie-gen4"}
    # A device no record names (a device file of another GPU) keeps NVLink 4.
    assert hardware.intra_node_link("amd-instinct-mi300x").name == hardware.FALLBACK_INTRA_NODE == "nvlink-h100"
