"""torchtitan's own code reads the torchtitan exports as written: its config manager, its splitter, its stage placement.

Proves torchtitan 0.3.0 (PyPI; the ``engines`` extra, ``pip install .[engines]``), a Python-config
release with batches in samples: ``ConfigManager().parse_args(["--module", "torchtitan_config",
"--config", "pipeplan_config"])`` loads the written ``torchtitan_config.py`` and rebuilds
``Trainer.Config`` with tyro, which runs torchtitan's checks (``Trainer.Config.__post_init__``:
CUDA graphs refused with a pipeline, the local batch divisible by the microbatch). The module
lists are split by torchtitan's own ``_split_module`` (a GPT, in torchtitan's decoder names, on
the llama3 model torchtitan builds) or by the written ``split_model_part`` (nested paths, on a
torch model with the preset's own paths), and torchtitan's ``_get_pp_rank_to_stage_indices_mapping``
places the stages where the plan did; π0's export runs one interleaved step through torchtitan's
``_pipeline_module_split`` and ``_build_pipeline_schedule`` on 2 gloo processes. torchtitan HEAD
(b5bcd76c, batches in tokens; not on PyPI) is run from a checkout named by
``$PIPEPLAN_TORCHTITAN_HEAD`` (its config manager, grain stubbed), skipped without one. The TOML
release (e347b1e5e) is torchtitan 0.2.2's config and pipeline code, installed beside 0.3.0
(``pip install --no-deps --target .venv/torchtitan-toml torchtitan==0.2.2``, tests/_torchtitan_toml.py)
and run in subprocesses: its ``ConfigManager`` loads every ``torchtitan.toml`` as written, and its
``pipeline_module_split`` and ``build_pipeline_schedule`` run one interleaved, one ZB-V and one ZB-H1
(from ``schedule.csv``) step of the written file on 2 gloo processes with one process's gradients;
skipped without it, failed under ``PIPEPLAN_REQUIRE_ENGINES=1``.

Skipped where torchtitan is not installed (the main venv); run with the engines venv:
``PYTHONPATH=src /work/engvenv/bin/python -m pytest -q tests/test_engines_torchtitan.py``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path

import pytest

torchtitan = pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install .[engines])")
torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torchtitan.config.manager import ConfigManager  # noqa: E402
from torchtitan.distributed import pipeline_parallel  # noqa: E402

from pipeplan import presets  # noqa: E402
from pipeplan.engines import export_files, layer_names_in_reference  # noqa: E402
from pipeplan.engines.torchtitan import nested_paths, torchtitan_parts  # noqa: E402
from pipeplan.errors import InvalidInputError  # noqa: E402
from pipeplan.plan import Plan  # noqa: E402
from pipeplan.schedules.patterns import loop_placement, v_placement  # noqa: E402

from _torchtitan_toml import toml_release  # noqa: E402


# ----------------------------------------------------------------- plans
def _sizes(layers: int, stages: int) -> tuple[int, ...]:
    """An uneven split of ``layers`` into ``stages`` (the first stages one layer larger)."""
    base, extra = divmod(layers, stages)
    return tuple(base + (s < extra) for s in range(stages))


#: (schedule, pp, stages per rank, dp, dp mode, b, m, recompute): every placement torchtitan runs.
LAYOUTS = [
    ("1f1b", 2, 1, 4, "fsdp", 2, 8, "none"),
    ("gpipe", 4, 1, 2, "ddp", 1, 8, "full"),
    ("interleaved", 2, 2, 2, "hsdp", 4, 4, "selective"),
    ("zb-v", 2, 2, 4, "zero1", 2, 4, "none"),
    ("zb-h1", 4, 1, 1, "zero2", 1, 8, "full"),  # no torch class: runs from schedule.csv
]
PRESETS = ["pi0", "gpt-1.5b", "openvla-7b", "gr00t-n1", "smolvla"]


def _plan(preset: str, layout: tuple) -> Plan:
    schedule, pp, v, dp, mode, micro, m, recompute = layout
    layers = len(layer_names_in_reference(presets.get(preset)))
    stages = pp * v
    placement = v_placement(pp, 2) if schedule == "zb-v" else loop_placement(pp, v)
    return Plan(pp=pp, dp=dp, layers_per_stage=_sizes(layers, stages), placement=placement, schedule=schedule,
                micro_batch_size=micro, num_microbatches=m, dp_mode=mode, recompute=(recompute,) * stages,
                tokens_per_sample=256)


def _write(files, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for file in files:
        (folder / file.name).write_text(file.text)
    return folder


def _load_written(folder: Path, monkeypatch: pytest.MonkeyPatch):
    """Import the written ``torchtitan_config.py`` as torchtitan's --module does (fresh each time)."""
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "torchtitan_config", raising=False)
    spec = importlib.util.spec_from_file_location("torchtitan_config", folder / "torchtitan_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parse(folder: Path, monkeypatch: pytest.MonkeyPatch):
    """torchtitan's ConfigManager on the written file: --module torchtitan_config --config pipeplan_config."""
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "torchtitan_config", raising=False)
    return ConfigManager().parse_args(["--module", "torchtitan_config", "--config", "pipeplan_config"])


# ----------------------------------------------------------------- the config manager
@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout[0] for layout in LAYOUTS])
@pytest.mark.parametrize("preset", PRESETS)
def test_config_manager_accepts_every_pipeline_export_as_written(preset, layout, tmp_path, monkeypatch):
    plan = _plan(preset, layout)
    names = layer_names_in_reference(presets.get(preset))
    folder = _write(export_files(plan, "torchtitan", names, gpus_per_node=4), tmp_path / "out")
    config = _parse(folder, monkeypatch)
    par, training = config.parallelism, config.training
    assert par.pipeline_parallel_degree == plan.pp and par.tensor_parallel_degree == plan.tp
    assert training.disable_cuda_graphs  # torchtitan refuses CUDA graphs beside a pipeline
    # the batch in torchtitan 0.3.0's samples: one step, no accumulation, m microbatches of b
    assert training.local_batch_size // par.pipeline_parallel_microbatch_size == plan.num_microbatches
    assert par.pipeline_parallel_microbatch_size == plan.micro_batch_size
    assert training.global_batch_size == plan.global_batch and training.seq_len == 256
    parts = par.module_fqns_per_model_part
    assert parts == torchtitan_parts(plan, names) and len(parts) == plan.num_stages
    # torchtitan's own placement of the stages on the pipeline ranks is the plan's
    schedule = par.pipeline_parallel_schedule
    placed = {stage: rank for rank in range(plan.pp) for stage in
              pipeline_parallel._get_pp_rank_to_stage_indices_mapping(rank, plan.pp, schedule, plan.num_stages)}
    assert tuple(placed[s] for s in range(plan.num_stages)) == plan.placement
    if par.pipeline_parallel_schedule_csv:
        assert Path(par.pipeline_parallel_schedule_csv).is_file()
    expected_ac = {"none": type(None), "full": "FullAC", "selective": "SelectiveAC"}[layout[-1]]
    assert (config.activation_checkpoint is None) if expected_ac is type(None) else \
        type(config.activation_checkpoint).__qualname__.startswith(expected_ac)
    wrapped = config.model_spec.pipelining_fn is not pipeline_parallel.pipeline_llm
    assert wrapped == bool(nested_paths(parts))  # the nested paths' own splitter, and only for them


def test_the_export_as_it_stood_is_refused_by_torchtitan(tmp_path, monkeypatch, capsys):
    """The check the export now passes is torchtitan's: without disable_cuda_graphs its config refuses pp > 1."""
    plan = _plan("gpt-1.5b", LAYOUTS[0])
    folder = _write(export_files(plan, "torchtitan", layer_names_in_reference(presets.get("gpt-1.5b"))), tmp_path)
    text = (folder / "torchtitan_config.py").read_text()
    (folder / "torchtitan_config.py").write_text(text.replace("training.disable_cuda_graphs = True", "pass"))
    with pytest.raises(SystemExit):  # tyro prints the config's ValueError and exits 2
        _parse(folder, monkeypatch)
    assert "CUDA graphs do not support pipeline parallelism" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--pp", "2"],
    ["--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "64", "--pp", "4"],
    ["--preset", "openvla-7b", "--gpus", "8", "--global-batch", "64", "--pp", "4", "--schedules", "zb-h1"],
    ["--preset", "pi0", "--gpus", "4", "--global-batch", "32", "--pp", "1"],
], ids=["pi0-pp2", "gpt-pp4", "openvla-zbh1", "pi0-pp1"])
def test_cli_export_loads_in_torchtitan(argv, run_cli, tmp_path, monkeypatch):
    out = tmp_path / "out"
    status, _, err = run_cli("plan", *argv, "--export", "torchtitan", "--out", str(out))
    assert status == 0, err
    text = (out / "torchtitan_config.py").read_text()
    written = _load_written(out, monkeypatch)
    config = _parse(out, monkeypatch)
    assert config.parallelism.pipeline_parallel_degree == written.PARALLELISM["pipeline_parallel_degree"]
    assert config.training.global_batch_size == written.GLOBAL_BATCH_SIZE
    pp = written.PARALLELISM["pipeline_parallel_degree"]
    # what one step is, said in the file and set in torchtitan: global = local x dp x accumulation
    dp = written.GLOBAL_BATCH_SIZE // (written.MICRO_BATCH_SIZE * written.MICROBATCHES)
    assert f"one optimizer step is {written.GLOBAL_BATCH_SIZE} samples (global batch): {dp} data-parallel" in text
    if pp == 1:
        assert config.training.local_batch_size == written.MICRO_BATCH_SIZE
        assert f"{written.MICROBATCHES} accumulation steps" in text
    else:
        assert config.training.local_batch_size == written.MICRO_BATCH_SIZE * written.MICROBATCHES
    assert "plan: split " in text and "predicted step " in text and "llama3 debugmodel, a stand-in" in text


# ----------------------------------------------------------------- the split
def _tree(paths: list[str]) -> nn.Module:
    """A torch model that has exactly ``paths``, each with one parameter of its own (``PATH.weight``).

    Numbered children sit in ModuleLists, as HF models hold their layers; a module on the way to a
    path holds no parameter of its own.
    """
    root = nn.Module()
    for path in paths:
        module = root
        parts = path.split(".")
        for depth, part in enumerate(parts):
            following = parts[depth + 1] if depth + 1 < len(parts) else ""
            if part.isdigit():
                assert isinstance(module, nn.ModuleList)
                while len(module) <= int(part):
                    module.append(nn.Module())
                module = module[int(part)]
                continue
            if getattr(module, part, None) is None:
                module.add_module(part, nn.ModuleList() if following.isdigit() else nn.Module())
            module = getattr(module, part)
        if "weight" not in module._parameters:
            module.register_parameter("weight", nn.Parameter(torch.zeros(1)))
    return root


def _owned(model: nn.Module, paths: list[str]) -> set[str]:
    """The parameters that ``paths`` hold in ``model`` (a path's own and those below it)."""
    return {name for name, _ in model.named_parameters()
            if any(name == p + ".weight" or name.startswith(p + ".") for p in paths)}


@pytest.mark.parametrize("preset", ["pi0", "openvla-7b", "gr00t-n1", "smolvla"])
def test_written_split_gives_each_stage_its_planned_modules(preset, tmp_path, monkeypatch):
    plan = _plan(preset, LAYOUTS[3])  # zb-v: 4 stages in a V
    names = layer_names_in_reference(presets.get(preset))
    parts = torchtitan_parts(plan, names)
    assert nested_paths(parts)
    written = _load_written(_write(export_files(plan, "torchtitan", names), tmp_path / "out"), monkeypatch)
    paths = [path for part in parts for path in part if "*" not in path]
    whole = _tree(paths)
    everything = {name for name, _ in whole.named_parameters()}
    kept_by_stage = []
    for stage, part in enumerate(parts):
        split = written.split_model_part(whole, part)
        kept = {name for name, _ in split.named_parameters()}
        own = {p for p in part if "*" not in p}
        # torchtitan's own splitter keeps nothing of a nested path (the bug the written splitter fixes)
        assert not {name for name, _ in pipeline_parallel._split_module(whole, part).named_parameters()} & \
            _owned(whole, [p for p in own if "." in p.partition(".")[2]])
        assert kept and kept == _owned(whole, sorted(own)), f"stage {stage}"
        kept_by_stage.append(kept)
    assert set().union(*kept_by_stage) == everything
    assert sum(map(len, kept_by_stage)) == len(everything)  # no parameter in two stages
    with pytest.raises(ValueError, match="the model has no 'no.such.module'"):
        written.split_model_part(whole, ["no.such.module"])


def test_nested_pipelining_function_routes_torchtitans_split_through_the_written_one(tmp_path, monkeypatch):
    plan = _plan("pi0", LAYOUTS[0])
    names = layer_names_in_reference(presets.get("pi0"))
    written = _load_written(_write(export_files(plan, "torchtitan", names), tmp_path / "out"), monkeypatch)
    parts = written.PARALLELISM["module_fqns_per_model_part"]
    whole = _tree([p for part in parts for p in part])

    def inner(model, **kwargs):  # stands for pipeline_llm: its split goes through pipeline_parallel._split_module
        return [pipeline_parallel._split_module(model, part) for part in kwargs["parts"]]

    chunks = written.nested_pipelining_fn(inner)(whole, parts=parts)
    assert [bool(list(chunk.parameters())) for chunk in chunks] == [True] * len(parts)
    assert pipeline_parallel._split_module is not written.split_model_part  # restored afterwards


def _llama3(decoder_layers: int) -> nn.Module:
    """torchtitan's llama3 debugmodel with ``decoder_layers`` blocks, built on the meta device."""
    from torchtitan.models.llama3 import model_registry

    config = model_registry("debugmodel").model
    config.layers = [config.layers[0]] * decoder_layers
    with torch.device("meta"):
        return config.build()


@pytest.mark.parametrize("layout", [LAYOUTS[0], LAYOUTS[2], LAYOUTS[3]], ids=["1f1b", "interleaved", "zb-v"])
def test_gpt_splits_with_torchtitans_own_splitter(layout, tmp_path, monkeypatch):
    names = layer_names_in_reference(presets.get("gpt-1.5b"))
    plan = _plan("gpt-1.5b", layout)
    config = _parse(_write(export_files(plan, "torchtitan", names), tmp_path / "out"), monkeypatch)
    parts = config.parallelism.module_fqns_per_model_part
    assert not nested_paths(parts) and config.model_spec.pipelining_fn is pipeline_parallel.pipeline_llm
    decoders = sum(name.role == "decoder" for name in names)
    model = _llama3(decoders)
    seen = []
    for stage, (part, span) in enumerate(zip(parts, plan.layer_ranges)):
        chunk = pipeline_parallel._split_module(model, part)
        blocks = [int(key) for key in chunk.layers.keys()]
        seen += blocks
        roles = [names[i].role for i in span]
        assert len(blocks) == roles.count("decoder"), f"stage {stage}"
        assert (chunk.tok_embeddings is not None) == ("embedding" in roles)
        assert (chunk.lm_head is not None) == (chunk.norm is not None) == ("loss" in roles)
        assert list(chunk.parameters()), f"stage {stage} is empty"
    assert seen == list(range(decoders))


def test_toml_release_refuses_a_pipeline_over_nested_paths():
    names = layer_names_in_reference(presets.get("pi0"))
    with pytest.raises(InvalidInputError, match="TOML release splits top-level modules only"):
        export_files(_plan("pi0", LAYOUTS[0]), "torchtitan-toml", names)
    gpt = layer_names_in_reference(presets.get("gpt-1.5b"))
    toml = export_files(_plan("gpt-1.5b", LAYOUTS[0]), "torchtitan-toml", gpt)[0].text
    assert '"tok_embeddings"' in toml and '"output"]' in toml and "lm_head" not in toml


# ----------------------------------------------------------------- one step on 2 gloo processes
_WIDTH = 4


class _Chain(nn.Module):
    """A model with π0's module paths (a Linear each) whose forward runs every one left, in layer order.

    It tolerates the modules a split removed, as torchtitan requires of a model it pipelines.
    """

    def __init__(self, paths: list[str]) -> None:
        super().__init__()
        torch.manual_seed(0)
        tree = _tree(paths)
        for name, child in tree.named_children():
            self.add_module(name, child)
        for path in paths:  # each path's module becomes a Linear with the path's name
            parent, _, leaf = path.rpartition(".")
            owner = self.get_submodule(parent) if parent else self
            linear = nn.Linear(_WIDTH, _WIDTH)
            for name, child in owner._modules[leaf].named_children():
                linear.add_module(name, child)
            owner._modules[leaf] = linear
        self.order = list(paths)

    def forward(self, x):
        for path in self.order:
            module = self
            for part in path.split("."):
                module = None if module is None else module._modules.get(part)
            if module is not None:
                x = torch.tanh(module(x))
        return x


def _loss(output, target):
    return torch.nn.functional.mse_loss(output, target, reduction="sum")


def _data(samples: int):
    generator = torch.Generator().manual_seed(1)
    return torch.randn(samples, _WIDTH, generator=generator), torch.randn(samples, _WIDTH, generator=generator)


def _gloo_worker(rank: int, world: int, folder: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    # a file rendezvous in the test's folder: no port another test (or xdist worker) could take first
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world)
    try:
        sys.path.insert(0, folder)
        sys.modules.pop("torchtitan_config", None)  # forked: a config the test process imported is not this one
        config = ConfigManager().parse_args(["--module", "torchtitan_config", "--config", "pipeplan_config"])
        written = sys.modules["torchtitan_config"]
        par, training = config.parallelism, config.training
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("pp",))

        def pipeline(model, **kwargs):  # pipeline_llm's split and schedule, without its parallelize_fn
            stages, parts = pipeline_parallel._pipeline_module_split(
                model, mesh, par.pipeline_parallel_schedule, torch.device("cpu"), par.module_fqns_per_model_part)
            schedule = pipeline_parallel._build_pipeline_schedule(
                parallelism=par, local_batch_size=training.local_batch_size, stages=stages,
                loss_fn=lambda output, target: (_loss(output, target), None))
            return schedule, parts, any(s.is_first for s in stages), any(s.is_last for s in stages)

        paths = [path for part in par.module_fqns_per_model_part for path in part]
        schedule, parts, first, last = written.nested_pipelining_fn(pipeline)(_Chain(paths))
        inputs, target = _data(training.local_batch_size)
        schedule.step(inputs if first else None, target=target if last else None)
        grads = {name: p.grad for part in parts for name, p in part.named_parameters()}
        torch.save(grads, os.path.join(folder, f"grads{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_pi0_export_runs_one_step_in_torchtitans_pipeline_with_one_process_gradients(tmp_path):
    """torchtitan's stage split (through the written splitter) and schedule builder, interleaved on 2 ranks."""
    import torch.multiprocessing as mp

    plan = _plan("pi0", ("interleaved", 2, 2, 1, "ddp", 2, 4, "none"))
    names = layer_names_in_reference(presets.get("pi0"))
    folder = _write(export_files(plan, "torchtitan", names), tmp_path / "out")
    # forked, not spawned: a spawned rank imported torch, torchtitan and this module again (about 9 CPU s each)
    mp.start_processes(_gloo_worker, args=(plan.pp, str(folder)), nprocs=plan.pp, start_method="fork", join=True)
    got: dict = {}
    for rank in range(plan.pp):
        got.update(torch.load(folder / f"grads{rank}.pt"))
    paths = [path for part in torchtitan_parts(plan, names) for path in part]
    model = _Chain(paths)
    inputs, target = _data(plan.micro_batch_size * plan.num_microbatches)
    for x, y in zip(inputs.chunk(plan.num_microbatches), target.chunk(plan.num_microbatches)):
        _loss(model(x), y).backward()
    expected = {name: p.grad for name, p in model.named_parameters()}
    assert set(got) == set(expected)  # every parameter on exactly the stage the plan gave it, names kept
    assert max(float((got[k] - expected[k]).abs().max()) for k in expected) < 1e-5


# ----------------------------------------------------------------- torchtitan HEAD, from a checkout
_HEAD_SCRIPT = r'''
import json, sys, types

class _Stub(types.ModuleType):
    """grain (HEAD's data loader, not installed): any attribute a plain class; config parsing never loads data."""
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = type(attr, (), {"__init__": lambda self, *a, **k: None, "__class_getitem__": classmethod(lambda c, i: c)})
        setattr(self, attr, value)
        return value

grain = _Stub("grain"); grain.python = _Stub("grain.python")
sys.modules["grain"], sys.modules["grain.python"] = grain, grain.python
head, folders = sys.argv[1], sys.argv[2:]
sys.path.insert(0, head)
from torchtitan.config.manager import ConfigManager
from torchtitan.distributed import pipeline_parallel
assert pipeline_parallel.__file__.startswith(head), pipeline_parallel.__file__
out = []
for folder in folders:
    sys.path.insert(0, folder)
    sys.modules.pop("torchtitan_config", None)
    c = ConfigManager().parse_args(["--module", "torchtitan_config", "--config", "pipeplan_config"])
    sys.path.remove(folder)
    out.append({"pp": c.parallelism.pipeline_parallel_degree, "m": c.parallelism.num_pp_microbatches,
                "micro_tokens": c.training.num_tokens_per_microbatch_per_dp_rank,
                "step_tokens": c.training.num_tokens_per_train_step, "no_graphs": c.training.disable_cuda_graphs,
                "wrapped": c.model_spec.pipelining_fn is not pipeline_parallel.pipeline_llm})
print(json.dumps(out))
'''


def test_torchtitan_head_config_manager_accepts_the_exports(tmp_path):
    """torchtitan HEAD (b5bcd76c: batches in tokens) from a checkout named by $PIPEPLAN_TORCHTITAN_HEAD.

    HEAD is not on PyPI and needs grain for its data loader; the config manager is run with grain stubbed.
    """
    import json
    import subprocess

    head = os.environ.get("PIPEPLAN_TORCHTITAN_HEAD")
    if not head:
        pytest.skip("set PIPEPLAN_TORCHTITAN_HEAD to a pytorch/torchtitan checkout (HEAD is not on PyPI)")
    cases = [("gpt-1.5b", LAYOUTS[3]), ("pi0", LAYOUTS[0]), ("pi0", ("1f1b", 1, 1, 8, "fsdp", 2, 4, "none"))]
    folders, plans = [], []
    for index, (preset, layout) in enumerate(cases):
        plan = _plan(preset, layout)
        names = layer_names_in_reference(presets.get(preset))
        folders.append(str(_write(export_files(plan, "torchtitan", names), tmp_path / str(index))))
        plans.append(plan)
    result = subprocess.run([sys.executable, "-c", _HEAD_SCRIPT, head, *folders], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    for plan, wrapped, got in zip(plans, (False, True, False), json.loads(result.stdout.splitlines()[-1])):
        assert got["pp"] == plan.pp and got["m"] == plan.num_microbatches
        assert got["micro_tokens"] == plan.micro_batch_size * 256  # tokens_per_sample 256
        assert got["step_tokens"] == plan.global_batch * 256  # the whole step, with or without a pipeline
        assert got["no_graphs"] == (plan.pp > 1)
        assert got["wrapped"] == wrapped  # π0 with a pipeline: its nested paths split by split_model_part


# ----------------------------------------------------------------- the TOML release (0.2.2 = e347b1e5e)
_TOML_LOAD = r'''
import json, sys
root, paths = sys.argv[1], sys.argv[2:]
sys.path.insert(0, root)
from torchtitan.config import manager
assert manager.__file__.startswith(root), manager.__file__
out = []
for path in paths:
    c = manager.ConfigManager().parse_args(["--job.config_file", path])
    par, training = c.parallelism, c.training
    out.append({"pp": par.pipeline_parallel_degree, "tp": par.tensor_parallel_degree,
                "dp": par.data_parallel_shard_degree * par.data_parallel_replicate_degree,
                "micro": par.pipeline_parallel_microbatch_size, "csv": par.pipeline_parallel_schedule_csv,
                "parts": par.module_fqns_per_model_part, "local": training.local_batch_size,
                "global": training.global_batch_size, "seq": training.seq_len, "ac": c.activation_checkpoint.mode,
                "async": par.enable_async_tensor_parallel, "compile": c.compile.enable})
print(json.dumps(out))
'''

#: (preset, layout): every placement with a GPT (the TOML release splits top-level modules only), and
#: plans without a pipeline (a VLA's nested paths are then no split's business)
_TOML_CASES = [("gpt-1.5b", layout) for layout in LAYOUTS] + [
    ("gpt-1.5b", ("1f1b", 1, 1, 8, "fsdp", 2, 4, "full")), ("pi0", ("1f1b", 1, 1, 8, "ddp", 2, 4, "selective"))]


def test_toml_release_config_manager_loads_every_toml_export_as_written(tmp_path):
    """torchtitan 0.2.2's ``ConfigManager`` (e347b1e5e's) on each written ``torchtitan.toml`` (--job.config_file)."""
    import json
    import subprocess

    root = toml_release()
    plans, names, paths = [], [], []
    for index, (preset, layout) in enumerate(_TOML_CASES):
        plans.append(_plan(preset, layout))
        names.append(layer_names_in_reference(presets.get(preset)))
        folder = _write(export_files(plans[-1], "torchtitan-toml", names[-1]), tmp_path / str(index))
        paths.append(str(folder / "torchtitan.toml"))
    result = subprocess.run([sys.executable, "-c", _TOML_LOAD, str(root), *paths], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.splitlines()[-1])
    for plan, layer_names, path, got, (_, layout) in zip(plans, names, paths, loaded, _TOML_CASES):
        assert (got["pp"], got["tp"], got["micro"], got["seq"]) == (plan.pp, plan.tp, plan.micro_batch_size, 256)
        assert got["global"] == plan.global_batch and got["ac"] == layout[-1]
        # the TOML release's train.py: accumulation = global // (local × dp); the pipeline takes local // micro
        accumulation = got["global"] // (got["local"] * got["dp"])
        microbatches = got["local"] // got["micro"] if plan.pp > 1 else accumulation
        assert got["dp"] == plan.dp and microbatches == plan.num_microbatches, path
        assert accumulation == (1 if plan.pp > 1 else plan.num_microbatches), path
        if plan.pp > 1:
            assert got["parts"] == torchtitan_parts(plan, layer_names, toml=True)
            assert len(got["parts"]) == plan.num_stages
        assert (Path(path).parent / got["csv"]).is_file() if got["csv"] else layout[0] != "zb-h1"


def test_async_tp_is_written_where_each_release_reads_it(tmp_path, monkeypatch):
    """A plan priced with async TP (--async-tp on, --compile on): the TOML release's ConfigManager reads
    ``parallelism.enable_async_tensor_parallel`` from the TOML export and 0.3.0's reads
    ``compile.enable_async_tensor_parallel`` from the Python export; without async TP neither is set."""
    import json
    import subprocess

    root = toml_release()
    base = _plan("gpt-1.5b", ("1f1b", 1, 1, 4, "fsdp", 2, 4, "full"))
    paths, expected = [], []
    for index, overlap in enumerate(("async", "off")):
        plan = dataclasses.replace(base, tp=2, tp_comm_overlap=overlap)
        files = export_files(plan, "torchtitan-toml", knobs={"compile": "on"})
        paths.append(str(_write(files, tmp_path / f"toml{index}") / "torchtitan.toml"))
        expected.append(overlap == "async")
        config = _parse(_write(export_files(plan, "torchtitan", knobs={"compile": "on"}), tmp_path / f"py{index}"),
                        monkeypatch)
        assert config.compile.enable and config.compile.enable_async_tensor_parallel == (overlap == "async")
    result = subprocess.run([sys.executable, "-c", _TOML_LOAD, str(root), *paths], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert [(got["async"], got["compile"], got["tp"]) for got in loaded] == [(e, True, 2) for e in expected]


_TOML_STEP = r"""
import os, sys
root, tests, rank, world, rendezvous, *folders = sys.argv[1:]
rank, world = int(rank), int(world)
sys.path[:0] = [root, tests]
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torchtitan.config.manager import ConfigManager
from torchtitan.distributed import pipeline_parallel
assert pipeline_parallel.__file__.startswith(root), pipeline_parallel.__file__
from _torchtitan_toml import WIDTH, llama3_shaped

dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
try:
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("pp",))
    for folder in folders:
        os.chdir(folder)  # the file's schedule.csv is a path from where torchtitan starts
        config = ConfigManager().parse_args(["--job.config_file", "torchtitan.toml"])
        par = config.parallelism
        layers = sum(path.startswith("layers.") for part in par.module_fqns_per_model_part for path in part)
        stages, parts = pipeline_parallel.pipeline_module_split(llama3_shaped(layers), mesh,
            par.pipeline_parallel_schedule, torch.device("cpu"), par.module_fqns_per_model_part)
        loss = lambda output, target: torch.nn.functional.mse_loss(output, target, reduction="sum")
        schedule = pipeline_parallel.build_pipeline_schedule(config, stages, loss)
        generator = torch.Generator().manual_seed(1)
        samples = config.training.local_batch_size
        inputs = torch.randn(samples, WIDTH, generator=generator)
        target = torch.randn(samples, WIDTH, generator=generator)
        first, last = any(s.is_first for s in stages), any(s.is_last for s in stages)
        schedule.step(inputs if first else None, target=target if last else None)
        grads = {name: p.grad for part in parts for name, p in part.named_parameters()}
        torch.save({"stages": [s.stage_index for s in stages], "grads": grads, "runtime": type(schedule).__name__},
                   f"grads{rank}.pt")
finally:
    dist.destroy_process_group()
"""

#: (schedule, pp, stages per rank, dp, dp mode, b, m, recompute) on 2 ranks: a loop, a V, and an order
#: torch has no class for, which the TOML release runs from the written schedule.csv
_TOML_STEPS = [("interleaved", 2, 2, 1, "ddp", 2, 4, "none"), ("zb-v", 2, 2, 1, "ddp", 1, 4, "none"),
               ("zb-h1", 2, 1, 1, "ddp", 1, 4, "none")]


@pytest.mark.slow
def test_toml_export_runs_one_step_in_the_toml_releases_pipeline_with_one_process_gradients(tmp_path):
    """The TOML release's ``pipeline_module_split`` and ``build_pipeline_schedule`` on 2 gloo processes, from the file.

    One pair of processes runs every layout in turn (one import of torch and torchtitan each).
    """
    import subprocess

    from _torchtitan_toml import WIDTH, llama3_shaped

    root = toml_release()
    names = layer_names_in_reference(presets.get("gpt-1.5b"))
    plans = [_plan("gpt-1.5b", layout) for layout in _TOML_STEPS]
    folders = [_write(export_files(plan, "torchtitan-toml", names), tmp_path / layout[0])
               for plan, layout in zip(plans, _TOML_STEPS)]
    rendezvous = tmp_path / "rendezvous"  # a file, not a port: no race with a parallel test worker
    ranks = [subprocess.Popen([sys.executable, "-c", _TOML_STEP, str(root), str(Path(__file__).parent), str(rank), "2",
                               str(rendezvous), *map(str, folders)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for rank in range(2)]
    try:
        outputs = [process.communicate(timeout=300)[0] for process in ranks]
    finally:
        for process in ranks:
            process.kill()
    assert all(process.returncode == 0 for process in ranks), "\n".join(out[-2000:] for out in outputs)
    layers = sum(name.role == "decoder" for name in names)
    for plan, folder, layout in zip(plans, folders, _TOML_STEPS):
        got: dict = {}
        placed = {}
        for rank in range(plan.pp):
            saved = torch.load(folder / f"grads{rank}.pt")
            got.update(saved["grads"])
            placed.update({stage: rank for stage in saved["stages"]})
        assert tuple(placed[s] for s in range(plan.num_stages)) == plan.placement, layout[0]
        assert (saved["runtime"] == "_PipelineScheduleRuntime") == (layout[0] == "zb-h1")  # the CSV's order ran
        model = llama3_shaped(layers)
        generator = torch.Generator().manual_seed(1)
        samples = plan.micro_batch_size * plan.num_microbatches
        inputs = torch.randn(samples, WIDTH, generator=generator)
        target = torch.randn(samples, WIDTH, generator=generator)
        for x, y in zip(inputs.chunk(plan.num_microbatches), target.chunk(plan.num_microbatches)):
            _loss(model(x), y).backward()
        expected = {name: p.grad for name, p in model.named_parameters()}
        assert set(got) == set(expected), layout[0]  # every parameter on exactly the stage the plan gave it
        assert max(float((got[k] - expected[k]).abs().max()) for k in expected) < 1e-5, layout[0]
