"""Messages between ranks on the wire: which packets, in which order, and how they are posted.

Which messages exist and their order on every directed link come from
:meth:`~pipeplan.schedule.Schedule.messages` (the *sender's* order); the receiver knows that order
too (every rank holds the whole schedule) and posts its receives for the link in
exactly that sequence, up to ``window`` ahead of need. Sends are eager
(``isend``) and waited for at the end of the step. Nothing relies on tags, so the
same code is deadlock-free on gloo and NCCL as long as the schedule is::

    plan = MessagePlan(schedule, rank=1)
    plan.incoming[0]      # [Packet('hdr', 0, 0), Packet('act', 0, 0), ...] from rank 0
    plan.needs[Action("F", 1, 0)]   # (0, Packet('act', 0, 0))

Packets: ``act(s, mb)`` is stage ``s``'s output for microbatch ``mb`` (a tensor
or a tuple of tensors), ``grad(s, mb)`` the gradient of stage ``s``'s input (one
tensor per floating-point input tensor), and ``hdr(s, mb)`` a small int64 header
with the dtypes and exact shapes of ``act(s, mb)``, sent just before it in the
first step with a given batch signature (the runtime then passes the decoded
headers as ``known_headers`` and later steps with the same signature send none).
Every microbatch has its own header, so microbatches of different shapes (an
uneven last microbatch, 1 to 4 cameras, prompts of different lengths) are
received into buffers of their own shape; a gradient's shape is that of the
activation the receiver sent for the same microbatch, so it needs no header.

:class:`LinkTransport` is the wire under it: it sends and receives one rank's
packets on its link groups, marks every wait for the fault monitor and words a
failed receive. :class:`LinkExchange` sequences one step of a schedule on it, the
dual-rate pipeline (:mod:`pipeplan.dualrate.worker`) its stream of frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import InvalidInputError
from ..schedule import Action, Message, Payload, Schedule

__all__ = ["Packet", "MessagePlan", "TensorSpec", "LinkExchange", "LinkTransport", "HEADER_LENGTH"]

HEADER_LENGTH = 64


class Packet(NamedTuple):
    """One transfer on a link: ``kind`` is ``"hdr"``, ``"act"`` or ``"grad"``; ``stage`` is the sender's."""

    kind: str
    stage: int
    microbatch: int


def _packet(message: Message) -> Packet:
    """The packet that carries a schedule :class:`~pipeplan.schedule.Message`'s tensors."""
    producer = message.producer
    kind = "act" if message.payload is Payload.ACTIVATION else "grad"
    return Packet(kind, producer.stage, producer.microbatch)


@dataclass
class MessagePlan:
    """Every packet one rank sends and receives in one step, in link order.

    Built from :meth:`Schedule.messages` (sender order), plus a header before
    every activation (skipped on the wire in a step whose headers are known).

    Args:
        schedule: the schedule every rank runs.
        rank: this rank's index in the pipeline (0 .. ``schedule.num_ranks - 1``).

    Attributes:
        outgoing: ``outgoing[dst]`` is the sequence this rank sends to ``dst``.
        incoming: ``incoming[src]`` is the sequence ``src`` sends to this rank.
        needs: for each action of this rank that consumes a message, ``(src, packet)``.
        produces: for each action of this rank that produces a message, ``(dst, packet)``.
    """

    schedule: Schedule
    rank: int
    outgoing: dict[int, list[Packet]] = field(init=False)
    incoming: dict[int, list[Packet]] = field(init=False)
    needs: dict[Action, tuple[int, Packet]] = field(init=False)
    produces: dict[Action, tuple[int, Packet]] = field(init=False)

    def __post_init__(self) -> None:
        sends = _packets_by_link(self.schedule)
        self.outgoing = {dst: packets for (src, dst), packets in sends.items() if src == self.rank}
        self.incoming = {src: packets for (src, dst), packets in sends.items() if dst == self.rank}
        self.needs = {}
        self.produces = {}
        for message in self.schedule.messages():
            if message.dst == self.rank:
                self.needs[message.consumer] = (message.src, _packet(message))
            if message.src == self.rank:
                self.produces[message.producer] = (message.dst, _packet(message))

    def links(self) -> set[tuple[int, int]]:
        """Every directed link ``(src, dst)`` of the whole schedule, in pipeline ranks."""
        return {(message.src, message.dst) for message in self.schedule.messages()}


def _packets_by_link(schedule: Schedule) -> dict[tuple[int, int], list[Packet]]:
    """Per link ``(src, dst)``, the packets in the sender's order: a header before every activation."""
    out: dict[tuple[int, int], list[Packet]] = {}
    for message in schedule.messages():
        packets = out.setdefault((message.src, message.dst), [])
        packet = _packet(message)
        if packet.kind == "act":
            packets.append(Packet("hdr", packet.stage, packet.microbatch))
        packets.append(packet)
    return out


class TensorSpec(NamedTuple):
    """Shape and dtype of one tensor of a message; ``batched``: dim 0 is the microbatch."""

    shape: tuple[int, ...]
    dtype: Any
    batched: bool


def _dtypes() -> list[Any]:
    import torch

    return [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
            torch.int16, torch.int8, torch.uint8, torch.bool]


def encode_header(tensors: Sequence[Any], device: Any, *, is_tuple: bool = False) -> Any:
    """The int64 header describing ``tensors``.

    Layout: a tuple flag (1 when the stage returned a tuple), the count, then
    dtype code, ndim and dims of each tensor.
    """
    import torch

    codes = _dtypes()
    values = [int(is_tuple), len(tensors)]
    for tensor in tensors:
        if tensor.dtype not in codes:
            raise InvalidInputError(f"a stage output has dtype {tensor.dtype}, which the runtime cannot send")
        values += [codes.index(tensor.dtype), tensor.dim(), *tensor.shape]
    if len(values) > HEADER_LENGTH:
        raise InvalidInputError(
            f"a stage output needs a {len(values)}-number header, more than {HEADER_LENGTH}: "
            "pass fewer tensors or fewer dimensions between stages"
        )
    header = torch.zeros(HEADER_LENGTH, dtype=torch.int64)
    header[: len(values)] = torch.tensor(values, dtype=torch.int64)
    return header.to(device)


def decode_header(header: Any, batch_size: int) -> tuple[list[TensorSpec], bool]:
    """Specs (and the tuple flag) from a header received for a microbatch of ``batch_size``."""
    values = header.cpu().tolist()
    codes = _dtypes()
    specs = []
    index = 2
    for _ in range(values[1]):
        code, ndim = values[index], values[index + 1]
        shape = tuple(values[index + 2: index + 2 + ndim])
        index += 2 + ndim
        specs.append(TensorSpec(shape, codes[code], bool(shape) and shape[0] == batch_size))
    return specs, bool(values[0])


def resize(specs: Sequence[TensorSpec], batch_size: int) -> list[TensorSpec]:
    """The same specs for a microbatch of ``batch_size`` samples."""
    return [TensorSpec((batch_size, *s.shape[1:]) if s.batched else s.shape, s.dtype, s.batched) for s in specs]


class _Pending(NamedTuple):
    works: list[Any]
    buffers: list[Any]


def _waiting_on(peer: int) -> Any:
    """The fault monitor's note that this rank now blocks on global rank ``peer``."""
    from contextlib import nullcontext

    from .faults import FaultMonitor

    monitor = FaultMonitor.current_monitor()
    return nullcontext() if monitor is None else monitor.waiting(peer)


class LinkTransport:
    """The wire of one rank: packets sent and received on its link groups, failures worded.

    :class:`LinkExchange` sequences a schedule's step on it; the dual-rate pipeline
    (:mod:`pipeplan.dualrate.worker`) its stream of frames::

        transport = LinkTransport(rank, groups, to_global)
        transport.send(1, [encode_header(tensors, device)])      # a packet's tensors, kept until finish()
        pending = transport.post(0, specs, device)                # irecv into fresh buffers
        tensors = transport.wait(0, Packet("act", 0, 3), pending)  # a failure names the packet and the peer

    Args:
        rank: this rank in the pipeline.
        groups: ``groups[(src, dst)]``, the process group of that directed link (pipeline ranks).
        to_global: ``to_global[r]``, the global rank of pipeline rank ``r``.
    """

    def __init__(self, rank: int, groups: dict[tuple[int, int], Any], to_global: Sequence[int]) -> None:
        self.rank = rank
        self.groups = groups
        self.to_global = to_global
        self._send_works: list[tuple[Any, Any]] = []

    def send(self, dst: int, tensors: Sequence[Any], *, header: Any = None) -> None:
        """``isend`` ``header`` (if any) then ``tensors`` to ``dst``; each is kept until :meth:`finish`."""
        import torch.distributed as dist

        group = self.groups[(self.rank, dst)]
        peer = self.to_global[dst]
        if header is not None:
            self._send_works.append((dist.isend(header, dst=peer, group=group), header))
        with _waiting_on(peer):  # isend raises at once on a pair its peer closed
            for tensor in tensors:
                tensor = tensor.contiguous()
                self._send_works.append((dist.isend(tensor, dst=peer, group=group), tensor))

    def post(self, src: int, specs: Sequence[TensorSpec], device: Any) -> _Pending:
        """``irecv`` one buffer per spec from ``src`` (never blocks)."""
        import torch
        import torch.distributed as dist

        group = self.groups[(src, self.rank)]
        peer = self.to_global[src]
        buffers = [torch.empty(s.shape, dtype=s.dtype, device=device) for s in specs]
        with _waiting_on(peer):
            works = [dist.irecv(buffer, src=peer, group=group) for buffer in buffers]
        return _Pending(works, buffers)

    def wait(self, src: int, packet: Packet, pending: _Pending) -> list[Any]:
        """Wait for the receives of ``packet`` from ``src``; its tensors.

        Raises:
            RuntimeError: ``"receiving act(stage 0, mb 3) from rank 0 failed: ..."``.
        """
        peer = self.to_global[src]
        try:
            with _waiting_on(peer):
                for work in pending.works:
                    work.wait()
        except RuntimeError as error:
            detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise RuntimeError(
                f"receiving {packet.kind}(stage {packet.stage}, mb {packet.microbatch}) from rank {peer} "
                f"failed: {detail}"
            ) from error
        return pending.buffers

    def receive_header(self, src: int, packet: Packet, device: Any, batch_size: int) -> tuple[list[TensorSpec], bool]:
        """Wait for the ``hdr`` packet from ``src``: the specs (and the tuple flag) of the ``act`` it announces."""
        import torch

        pending = self.post(src, [TensorSpec((HEADER_LENGTH,), torch.int64, False)], device)
        return decode_header(self.wait(src, packet, pending)[0], batch_size)

    def finish(self) -> None:
        """Wait until every send has gone (their buffers may then be freed)."""
        for work, _tensor in self._send_works:
            work.wait()
        self._send_works.clear()

    def prune(self) -> None:
        """Forget the sends that have completed (a long stream keeps only those in flight)."""
        self._send_works = [(work, kept) for work, kept in self._send_works if not work.is_completed()]


Headers = dict[tuple[int, int, int], list[TensorSpec]]
"""Decoded headers of one step: ``(src, stage, microbatch)`` -> the specs of that activation."""
TupleFlags = dict[tuple[int, int, int], bool]
"""``(src, stage, microbatch)`` -> whether that stage returned a tuple for that microbatch."""


class LinkExchange:
    """Posts, matches and waits the messages of one rank for one step.

    Args:
        plan: this rank's :class:`MessagePlan`.
        groups: ``groups[(src, dst)]`` is the process group of that directed link
            (pipeline ranks), and ``to_global[r]`` the global rank of pipeline rank ``r``.
        microbatch_sizes: samples per microbatch (the ``batched`` flag of decoded specs).
        device: where receive buffers live.
        window: receives posted ahead of need per link (>= 1; a header counts as one).
        known_headers: the ``(headers, tuple_flags)`` of an earlier step with the
            same batch signature (every microbatch's input shapes): no header is
            sent or received this step, and every receive can be posted ahead
            from the start.
    """

    def __init__(
        self,
        plan: MessagePlan,
        groups: dict[tuple[int, int], Any],
        to_global: Sequence[int],
        microbatch_sizes: Sequence[int],
        device: Any,
        *,
        window: int = 2,
        known_headers: tuple[Headers, TupleFlags] | None = None,
    ) -> None:
        self.plan = plan
        self.transport = LinkTransport(plan.rank, groups, to_global)
        self.sizes = microbatch_sizes
        self.device = device
        self.window = window
        self.sent_specs: dict[tuple[int, int], list[TensorSpec]] = {}
        self.with_headers = known_headers is None
        self.headers: Headers = {} if known_headers is None else dict(known_headers[0])
        self.tuple_flags: TupleFlags = {} if known_headers is None else dict(known_headers[1])
        self.incoming = {
            src: [m for m in sequence if self.with_headers or m.kind != "hdr"]
            for src, sequence in plan.incoming.items()
        }
        self._posted = {src: 0 for src in self.incoming}
        self._consumed = {src: 0 for src in self.incoming}
        self._pending: dict[tuple[int, int], _Pending] = {}
        self._index = {
            (src, message): i for src, seq in self.incoming.items() for i, message in enumerate(seq)
        }

    # ------------------------------------------------------------------ send
    def send(self, dst: int, message: Packet, tensors: Sequence[Any], *, is_tuple: bool = False) -> None:
        """``isend`` the tensors of ``message`` (after its header, for an activation in a step with headers).

        ``is_tuple`` (activations only): the stage returned a tuple, not a tensor.
        """
        header = None
        if message.kind == "act":
            self.sent_specs[(message.stage, message.microbatch)] = [
                TensorSpec(tuple(t.shape), t.dtype, False) for t in tensors
            ]
            if self.with_headers:
                header = encode_header(tensors, self.device, is_tuple=is_tuple)
        self.transport.send(dst, tensors, header=header)

    # --------------------------------------------------------------- receive
    def _specs(self, src: int, message: Packet) -> list[TensorSpec] | None:
        """Buffer specs of ``message`` from ``src``, or ``None`` if not known yet."""
        import torch

        if message.kind == "hdr":
            return [TensorSpec((HEADER_LENGTH,), torch.int64, False)]
        if message.kind == "act":
            return self.headers.get((src, message.stage, message.microbatch))
        sent = self.sent_specs.get((message.stage - 1, message.microbatch))
        if sent is None:
            return None
        return [s for s in sent if s.dtype.is_floating_point]

    def _post(self, src: int, *, force: bool = False) -> bool:
        """Post the next receive on the link from ``src``; False if its shape is unknown yet.

        An activation's shape is known once its header has arrived: a header that
        has (checked without blocking) is decoded here; with ``force`` this waits for it.
        """
        index = self._posted[src]
        message = self.incoming[src][index]
        specs = self._specs(src, message)
        if specs is None and message.kind == "act" and self.with_headers:
            header_index = index - 1  # the header is sent just before its activation
            pending = self._pending.get((src, header_index))
            if pending is not None and (force or all(work.is_completed() for work in pending.works)):
                self._resolve_header(src, header_index)
                specs = self._specs(src, message)
        if specs is None:
            if not force:
                return False
            raise RuntimeError(f"no shape for {message} from rank {src}")  # cannot happen: a grad's act was sent
        self._pending[(src, index)] = self.transport.post(src, specs, self.device)
        self._posted[src] = index + 1
        return True

    def _resolve_header(self, src: int, index: int) -> None:
        """Wait for the header at ``index`` on the link from ``src`` and keep its specs."""
        header_message = self.incoming[src][index]
        self.transport.wait(src, header_message, self._pending[(src, index)])
        pending = self._pending.pop((src, index))
        specs, is_tuple = decode_header(pending.buffers[0], self.sizes[header_message.microbatch])
        key = (src, header_message.stage, header_message.microbatch)
        self.headers[key] = specs
        self.tuple_flags[key] = is_tuple
        self._consumed[src] += 1

    def _wait_index(self, src: int, index: int) -> None:
        while self._posted[src] <= index:
            self._post(src, force=True)
        self.transport.wait(src, self.incoming[src][index], self._pending[(src, index)])

    def post_ahead(self) -> None:
        """Top up every incoming link to ``window`` outstanding receives (never blocks)."""
        for src, sequence in self.incoming.items():
            while (
                self._posted[src] < len(sequence)
                and self._posted[src] - self._consumed[src] < self.window
                and self._post(src)
            ):
                pass

    def receive(self, src: int, message: Packet) -> list[Any]:
        """Wait for ``message`` from ``src`` and return its tensors."""
        index = self._index[(src, message)]
        self._wait_index(src, index)
        pending = self._pending.pop((src, index))
        self._consumed[src] += 1
        return pending.buffers

    def is_tuple(self, src: int, stage: int, microbatch: int) -> bool:
        """Whether stage ``stage`` (received from ``src``) returned a tuple for ``microbatch``."""
        return self.tuple_flags[(src, stage, microbatch)]

    def finish(self) -> None:
        """Wait until every send of the step has gone (their buffers may then be freed)."""
        self.transport.finish()
