"""SplitBackward on one process: B then W gives exactly the full backward's gradients."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
nn = torch.nn

from pipeplan.runtime.split import SplitBackward  # noqa: E402


class Loop(nn.Module):
    """A velocity network applied in a loop, plus a weight used outside its module."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.velocity = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 6))
        self.out = nn.Linear(6, 6)
        self.offset = nn.Parameter(torch.randn(6))  # never meets the input: W does it from the outputs

    def forward(self, x: Any) -> Any:
        for _ in range(self.steps):
            x = x + self.velocity(x) / self.steps
        return self.out(x) + nn.functional.linear(x, self.out.weight) + self.offset


def _models() -> dict[str, Any]:
    return {
        "mlp": lambda: nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.LayerNorm(6), nn.Linear(6, 6)),
        "attention": lambda: nn.TransformerEncoderLayer(6, 2, dim_feedforward=12, dropout=0.0, batch_first=True),
        "loop": lambda: Loop(3),
    }


def kind_has_loop(model: Any) -> bool:
    return isinstance(model, Loop) and model.steps > 1 and bool(list(model.parameters()))


def _check(model: Any, x: Any, needs_input_grad: bool) -> None:
    x = x.detach().requires_grad_(needs_input_grad)
    upstream = torch.randn_like(model(x))
    model.zero_grad(set_to_none=True)
    full_out = model(x)
    full_out.backward(upstream)
    expected = [p.grad.clone() for p in model.parameters()]
    expected_input = x.grad.clone() if needs_input_grad else None
    model.zero_grad(set_to_none=True)
    x.grad = None
    out = model(x)
    split = SplitBackward([out], [x] if needs_input_grad else [], list(model.parameters()))
    input_grads = split.backward_input([upstream])
    # B touched only the parameters it keeps (those meeting the input at several nodes)
    eager = {id(p) for p in split.eager}
    assert all((p.grad is not None) == (id(p) in eager) for p in model.parameters())
    if needs_input_grad and kind_has_loop(model):
        assert eager  # the loop's velocity weights
    split.backward_weight()
    for got, want in zip(model.parameters(), expected):
        torch.testing.assert_close(got.grad, want, rtol=0, atol=1e-6)
    if needs_input_grad:
        torch.testing.assert_close(input_grads[0], expected_input, rtol=0, atol=1e-6)
    else:
        assert input_grads == []


@pytest.mark.parametrize("kind", sorted(_models()))
@pytest.mark.parametrize("needs_input_grad", [True, False], ids=["middle-stage", "first-stage"])
def test_split_equals_full_backward(kind: str, needs_input_grad: bool) -> None:
    torch.manual_seed(0)
    model = _models()[kind]()
    x = torch.randn(5, 4, 6) if kind == "attention" else torch.randn(5, 6)
    _check(model, x, needs_input_grad)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**16))
def test_split_is_exact_for_any_loop_length(steps: int, batch: int, seed: int) -> None:
    torch.manual_seed(seed)
    _check(Loop(steps), torch.randn(batch, 6), True)
