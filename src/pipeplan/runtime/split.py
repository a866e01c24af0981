"""Split backward: ``I`` computes input gradients, ``W`` the weight gradients later, exactly.

    split = SplitBackward(roots, inputs, params)     # after F: analyse this microbatch's graph
    input_grads = split.backward_input(root_grads)   # I: gradients of the stage inputs
    split.backward_weight()                          # W: accumulate every parameter's .grad

How it stays exact and does no work twice (the idea of torch.distributed.pipelining's
``stage_backward_input``/``stage_backward_weight`` and of the zero-bubble paper):
in the autograd graph of one stage and microbatch, every path from a parameter
to the stage's outputs eventually meets the path of the stage *input* at a node
(for ``x @ W``: the matmul's backward node). ``I`` runs the backward to the
stage input only, and a pre-hook on each such *meeting node* stores the gradient
flowing into it. ``W`` starts a backward at those nodes with the stored
gradients, restricted to the parameters, so it runs only the weight-gradient
halves of those nodes. Parameters whose paths never meet the input (all of them
on stage 0, whose input is data) are left to ``W`` entirely: a backward from the
stage outputs restricted to them. Parameters that share a meeting node are
grouped; a group that meets the input at several nodes (a weight reused in a
loop, like a denoising head's velocity network, or one used in slices) gets its
gradients in ``I``, in the same traversal, because a ``W`` started from several
chained nodes would repeat the input-gradient work between them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

__all__ = ["SplitBackward"]


def _node_of(tensor: Any) -> Any:
    """The autograd node of ``tensor``: its ``grad_fn``, or a leaf's gradient accumulator."""
    if tensor.grad_fn is not None:
        return tensor.grad_fn
    if not tensor.requires_grad:
        return None
    return tensor.view_as(tensor).grad_fn.next_functions[0][0]


def _accumulate(params: Sequence[Any], grads: Sequence[Any]) -> None:
    """Add each gradient into its parameter's ``.grad`` (``None``: unused, nothing to add)."""
    for param, grad in zip(params, grads):
        if grad is None:
            continue
        if param.grad is None:
            param.grad = grad
        else:
            param.grad += grad


class SplitBackward:
    """The input/weight split of one stage's backward for one microbatch.

    Args:
        roots: the stage's outputs that need gradients (or the loss on the last stage).
        inputs: the stage's input tensors that need gradients (empty on stage 0).
        params: the stage's parameters.
    """

    def __init__(self, roots: Sequence[Any], inputs: Sequence[Any], params: Sequence[Any]) -> None:
        self.roots = list(roots)
        self.inputs = list(inputs)
        self.root_grads: list[Any] = []
        self.groups: list[tuple[list[Any], list[Any]]] = []  # (meeting nodes, parameters)
        self.unmet: list[Any] = []  # parameters whose paths never meet the input: all in W
        self.eager: list[Any] = []  # parameters meeting the input at several nodes: all in B
        self.stored: dict[Any, tuple[Any, ...]] = {}
        if self.inputs:
            self._analyse([p for p in params if p.requires_grad])
        else:  # stage 0: nothing to send upstream, so B has nothing to do and W does it all
            self.unmet = [p for p in params if p.requires_grad]

    def _analyse(self, params: list[Any]) -> None:
        consumers: dict[Any, list[Any]] = {}
        queue = deque(node for node in map(_node_of, self.roots) if node is not None)
        seen = set(queue)
        while queue:
            node = queue.popleft()
            for successor, _index in node.next_functions:
                if successor is None:
                    continue
                consumers.setdefault(successor, []).append(node)
                if successor not in seen:
                    seen.add(successor)
                    queue.append(successor)
        depends_on_input: set[Any] = set()
        queue = deque(node for node in map(_node_of, self.inputs) if node is not None and node in seen)
        depends_on_input.update(queue)
        while queue:
            node = queue.popleft()
            for consumer in consumers.get(node, ()):
                if consumer not in depends_on_input:
                    depends_on_input.add(consumer)
                    queue.append(consumer)
        group_of: dict[Any, int] = {}
        groups: list[tuple[set[Any], list[Any]]] = []
        for param in params:
            start = _node_of(param)
            if start not in seen:
                continue  # not used in this forward: no gradient, as on one process
            meeting: set[Any] = set()
            visited = {start}
            queue = deque([start])
            while queue:
                node = queue.popleft()
                for consumer in consumers.get(node, ()):
                    if consumer in visited:
                        continue
                    visited.add(consumer)
                    if consumer in depends_on_input:
                        meeting.add(consumer)
                    else:
                        queue.append(consumer)
            if not meeting:
                self.unmet.append(param)
                continue
            joined = {group_of[node] for node in meeting if node in group_of}
            if joined:
                target = min(joined)
                for other in sorted(joined - {target}):
                    nodes, members = groups[other]
                    groups[target][0].update(nodes)
                    groups[target][1].extend(members)
                    groups[other] = (set(), [])
                    for node in nodes:
                        group_of[node] = target
            else:
                target = len(groups)
                groups.append((set(), []))
            groups[target][0].update(meeting)
            groups[target][1].append(param)
            for node in meeting:
                group_of[node] = target
        # A group whose parameters meet the input at several nodes (a weight reused in a
        # loop, or sliced) would make W re-run the input-gradient chain between those
        # nodes; B computes such parameters' gradients itself, in the same traversal.
        self.eager = [p for nodes, members in groups if len(nodes) > 1 for p in members]
        self.groups = [(list(nodes), members) for nodes, members in groups if len(nodes) == 1]

    def backward_input(self, root_grads: Sequence[Any]) -> list[Any]:
        """``I``: the gradients of :attr:`inputs` (``None`` where unused); stores the meeting nodes' gradients."""
        import torch

        self.root_grads = list(root_grads)
        if not self.inputs:
            return []
        handles = []

        def keeper(node: Any) -> Any:
            def hook(grad_outputs: tuple[Any, ...]) -> None:
                self.stored[node] = grad_outputs

            return hook

        for nodes, _members in self.groups:
            for node in nodes:
                handles.append(node.register_prehook(keeper(node)))
        try:
            grads = torch.autograd.grad(self.roots, self.inputs + self.eager, self.root_grads, retain_graph=True,
                                        allow_unused=True)
        finally:
            for handle in handles:
                handle.remove()
        _accumulate(self.eager, grads[len(self.inputs):])
        return list(grads[: len(self.inputs)])

    def backward_weight(self) -> None:
        """``W``: accumulate the gradient of every parameter into its ``.grad``."""
        import torch
        from torch.autograd.graph import GradientEdge

        for nodes, members in self.groups:
            edges, grads = [], []
            for node in nodes:
                for index, grad in enumerate(self.stored.get(node, ())):
                    if grad is not None:
                        edges.append(GradientEdge(node, index))
                        grads.append(grad)
            if not edges:
                continue
            results = torch.autograd.grad(edges, members, grads, retain_graph=True, allow_unused=True)
            _accumulate(members, results)
        if self.unmet:
            torch.autograd.backward(self.roots, self.root_grads or None, inputs=self.unmet, retain_graph=True)
        self.stored.clear()
