"""The built-in VLA-shaped model and loading a model from ``package.module:factory``."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch
from torch import nn

from pipeplan.errors import InvalidInputError
from pipeplan.models import DEFAULT_MODEL, build_default_model, load_model, split_sequential
from pipeplan.models.vla import FlowMatchingActionHead, ImageEncoder, TransformerBlock


def small(**options):
    return build_default_model(num_layers=2, hidden=32, image_size=16, **options)


def test_shape_and_children_take_one_tensor_each():
    model, loss_fn, make_batch = small()
    assert isinstance(model, nn.Sequential)
    assert [type(layer) for layer in model] == [ImageEncoder, TransformerBlock, TransformerBlock, FlowMatchingActionHead]
    inputs, targets = make_batch(3)
    assert inputs.shape == (3, 2, 3, 16, 16) and inputs.dtype == torch.float32
    activation = inputs
    for layer in model:  # every cut point carries exactly one tensor
        activation = layer(activation)
        assert isinstance(activation, torch.Tensor)
    assert activation.shape == targets.shape == (3, 8, 7)
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_deterministic_for_a_seed_and_different_across_seeds():
    first, _, make_batch = small(seed=3)
    again, _, _ = small(seed=3)
    other, _, _ = small(seed=4)
    inputs, _ = make_batch(2)
    assert torch.equal(first(inputs), again(inputs))
    assert not torch.equal(first(inputs), other(inputs))
    x1, y1 = make_batch(4, seed=1)
    x2, y2 = make_batch(4, seed=1)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, make_batch(4, seed=2)[0])


def test_building_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    small(seed=7)
    assert torch.equal(state, torch.get_rng_state())


def test_loss_is_a_batch_mean_so_weighted_microbatch_losses_add_up():
    model, loss_fn, make_batch = small()
    inputs, targets = make_batch(5)
    outputs = model(inputs)
    whole = loss_fn(outputs, targets)
    parts = loss_fn(outputs[:2], targets[:2]) * 2 / 5 + loss_fn(outputs[2:], targets[2:]) * 3 / 5
    assert torch.allclose(whole, parts, atol=1e-6)


def test_encoder_is_the_heaviest_block_and_head_the_second_by_flops():
    # Counted, not timed: multiply-accumulates of the Linear/Conv layers per sample.
    model, _, make_batch = build_default_model(num_layers=2)
    counts = []
    inputs, _ = make_batch(1)
    for layer in model:
        macs = 0

        def hook(module, args, output):
            nonlocal macs
            if isinstance(module, nn.Linear):
                macs += args[0].numel() // module.in_features * module.in_features * module.out_features
            elif isinstance(module, nn.Conv2d):
                macs += output.numel() * module.in_channels * module.kernel_size[0] * module.kernel_size[1]

        handles = [m.register_forward_hook(hook) for m in layer.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
        inputs = layer(inputs)
        for handle in handles:
            handle.remove()
        counts.append(macs)
    encoder, *blocks, head = counts
    # the attention's own projection runs through F.multi_head_attention_forward, not nn.Linear
    # forward hooks, so the blocks are undercounted here; the margins below are wide on purpose
    assert encoder > 4 * max(blocks)
    assert head > max(blocks)
    assert encoder > head


def test_head_runs_its_velocity_network_once_per_denoising_step():
    model, _, _ = small(denoising_steps=6)
    head = model[-1]
    calls = []
    head.velocity.register_forward_hook(lambda module, args, output: calls.append(args[0].shape))
    head(torch.randn(2, 16, 32))
    assert len(calls) == 6
    assert calls[0] == (2, 8, 7 + 32 + 16)  # action, context and time features per horizon step


@pytest.mark.parametrize(
    "options, field",
    [
        ({"hidden": 30, "num_heads": 4}, "hidden"),
        ({"image_size": 15}, "image_size"),
        ({"tokens": 7}, "tokens"),
        ({"denoising_steps": 0}, "denoising_steps"),
    ],
)
def test_bad_sizes_are_rejected_naming_the_field(options, field):
    with pytest.raises(InvalidInputError, match=field):
        build_default_model(num_layers=1, **{"image_size": 16, **options})


def test_make_batch_rejects_zero():
    _, _, make_batch = small()
    with pytest.raises(InvalidInputError, match="batch_size"):
        make_batch(0)


def test_load_model_default_and_options():
    model, loss_fn, make_batch = load_model(DEFAULT_MODEL, num_layers=3, hidden=32)
    assert len(model) == 5


def test_load_model_user_factory(tmp_path, monkeypatch):
    (tmp_path / "my_factory_mod.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            def build():
                model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
                return model, nn.functional.mse_loss, lambda n, seed=0: (torch.randn(n, 4), torch.randn(n, 1))
            def bad():
                return nn.Linear(4, 4)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model, _, _ = load_model("my_factory_mod:build")
    assert len(model) == 2
    with pytest.raises(InvalidInputError, match="must return"):
        load_model("my_factory_mod:bad")
    with pytest.raises(InvalidInputError, match="no callable 'missing'"):
        load_model("my_factory_mod:missing")
    sys.modules.pop("my_factory_mod", None)


@pytest.mark.parametrize("spec", ["no_colon", "a:b:c", ":factory", "module:", ""])
def test_load_model_malformed_spec(spec):
    with pytest.raises(InvalidInputError, match="package.module:factory"):
        load_model(spec)


def test_load_model_import_failure_is_one_clear_error():
    with pytest.raises(InvalidInputError, match="cannot import module 'pipeplan_no_such_module'"):
        load_model("pipeplan_no_such_module:build")


def test_split_sequential_shares_modules_and_checks_counts():
    model, _, make_batch = small()
    stages = split_sequential(model, [1, 2, 1])
    assert [len(stage) for stage in stages] == [1, 2, 1]
    assert stages[1][0] is model[1]
    inputs, _ = make_batch(2)
    out = inputs
    for stage in stages:
        out = stage(out)
    assert torch.equal(out, model(inputs))
    with pytest.raises(InvalidInputError, match="adds up to 3"):
        split_sequential(model, [1, 1, 1])
    with pytest.raises(InvalidInputError, match=">= 1"):
        split_sequential(model, [0, 4])


def test_dumbbell_is_a_heavy_front_variant_of_the_default_model():
    from pipeplan.models import BUILTIN_MODELS, load_model

    assert set(BUILTIN_MODELS) >= {"vla", "dumbbell"}
    model, loss_fn, make_batch = load_model("dumbbell", num_layers=4)
    default, _loss, _batch = load_model("vla", num_layers=4)
    assert len(model) == 6
    images, targets = make_batch(2)
    assert images.shape[1] == 4  # four cameras
    assert loss_fn(model(images), targets).ndim == 0
    encoder_params = sum(p.numel() for p in model[0].parameters())
    assert encoder_params > 1.5 * sum(p.numel() for p in default[0].parameters())
    assert model[-1].steps < default[-1].steps  # a lighter head: the weight sits at the front
