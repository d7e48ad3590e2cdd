"""One modelled training step as a Chakra execution trace: a file per rank.

Chakra (MLCommons, https://github.com/mlcommons/chakra, ``schema/protobuf/et_def.proto``)
describes a workload as a graph of nodes per rank: compute nodes with a duration,
collective and point-to-point communication nodes with a size and a process group, and
the dependencies between them. ASTRA-sim and Chakra's own tools (``chakra_jsonizer``,
the feeder) read it. Each file is a ``GlobalMetadata`` message, then one ``Node`` per
message, every message preceded by its size as a varint (Chakra's ``encodeMessage``).
The schema is ``et_def.proto`` beside this module, restated from the published one.

The trace is the step :func:`~topomodel.analysis.training.step.step_time` models, from
the same figures: for each rank, its pipeline stage's operations in the schedule's
order (F, B and, for ZB-H1, W of every microbatch and model chunk):

- a ``COMP_NODE`` per operation, its duration the operation's compute and hot-expert
  imbalance (:class:`~topomodel.analysis.training.stagework.OpWork`), in whole
  microseconds (the schema's unit);
- the operation's collectives (TP, CP, EP, ZeRO-3), as many ``COMM_COLL_NODE`` of each
  as the model issues, chained one after the other: after the compute where the model
  exposes them whole (no overlap), beside it (depending on what the compute depends on)
  where the schedule hides some of them;
- a ``COMM_RECV_NODE`` before an operation whose input comes from another stage and a
  ``COMM_SEND_NODE`` after the one that produces it (``comm_src``, ``comm_dst`` as
  global ranks, ``comm_tag`` the same on both sides), with the TP all-gather that
  follows a scattered send; a send blocks the next operation only with
  ``pp_blocking``;
- the gradient buckets (DP, expert DP) after the last backward pass of the chunks that
  fill them (with ``dp_overlap``) or after the stage's last operation, then the
  optimizer step (a ``COMP_NODE``); ZeRO-1/2 weight gathers first, ahead of the first
  forward (beside it with ``dp_overlap``).

Collective sizes are the step's per-call sizes in nccl-tests' convention (all-gather:
the gathered buffer; reduce-scatter: the input), ``comm_size`` in bytes; ``pg_name``
names the process group, whose ranks ``workload.json`` lists (group name: ranks, the
form of ASTRA-sim's ``--comm-group-configuration``). Files are ``workload.{rank}.et``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from topomodel import limits
from topomodel.analysis.assumptions import StepAssumptions
from topomodel.analysis.training.buckets import stage_buckets
from topomodel.analysis.training.compute import device_model
from topomodel.analysis.training.memory import stage_parameters
from topomodel.analysis.training.pipeline import dependencies
from topomodel.analysis.training.step import optimizer_s, param_gather_calls, step_ops
from topomodel.analysis.training.stepcalls import step_calls
from topomodel.analysis.training.stepshape import ranks_of, shape_of
from topomodel.errors import UsageError
from topomodel.fabric.tables import Fabric
from topomodel.files import atomic_files
from topomodel.inputs.parts import Model
from topomodel.traffic.layout import Layout, rank_groups

SCHEMA = Path(__file__).with_name("et_def.proto")
"""The Chakra schema this export writes (``et_def.proto``, restated from Chakra's)."""

SCHEMA_VERSION = "1.0.0"
"""``GlobalMetadata.version``: the one Chakra's own trace generator writes
(src/generator/generator.py, ``GlobalMetadata(version="1.0.0")``)."""

GRID_OF_CALL = {"tp_ag": "tp", "tp_rs": "tp", "tp_ar": "tp", "pp_sg": "tp", "cp_ag": "cp",
                "cp_rs": "cp", "ep": "ep", "zero3_ag": "grad", "zero3_rs": "grad",
                "dp": "grad", "dp_ag": "grad", "edp": "expert_grad",
                "edp_ag": "expert_grad"}
"""The communicator (:func:`~topomodel.traffic.layout.rank_groups` kind) of each
collective the step issues, by its name in
:func:`~topomodel.analysis.training.stepcalls.step_calls`."""

COMM_TYPES = {"allreduce": "ALL_REDUCE", "allgather": "ALL_GATHER",
              "reducescatter": "REDUCE_SCATTER", "alltoall": "ALL_TO_ALL"}
"""Chakra's ``CollectiveCommType`` of each collective the step issues."""

MICROSECONDS = 1e6
"""Microseconds per second: the schema's ``duration_micros`` unit."""


@dataclass
class _Stage:
    """The trace of one stage, shared by its ranks: nodes as dicts, then filled in per
    rank (peers, process groups)."""

    nodes: list[dict[str, Any]] = field(default_factory=list)

    def add(self, deps: list[int], **node: Any) -> int:
        node["id"] = len(self.nodes)
        node["deps"] = sorted(set(deps))
        self.nodes.append(node)
        return int(node["id"])

    def chain(self, deps: list[int], name: str, call: str, count: int) -> list[int]:
        """``count`` calls of ``call`` one after the other after ``deps``; the last one's
        id (or ``deps`` when none)."""
        for i in range(count):
            deps = [self.add(deps, kind="coll", call=call, name=f"{name}.{call}.{i}")]
        return deps


@dataclass(frozen=True)
class ChakraTrace:
    """What :func:`chakra_trace` made: per stage its nodes (shared by the stage's
    ranks), the step's calls by name, the process groups and each rank's stage and
    pipeline group."""

    stages: list[list[dict[str, Any]]]
    calls: dict[str, Any]
    groups: dict[str, np.ndarray]  # grid kind -> (groups, ranks)
    stage_of_rank: np.ndarray
    pp_groups: np.ndarray
    accelerators: list[str]

    @property
    def nodes(self) -> int:
        """Nodes in all files."""
        return sum(len(self.stages[s]) for s in self.stage_of_rank)


def chakra_trace(fabric: Fabric, model: Model, layout: Layout,
                 assumptions: StepAssumptions | None = None, *, routing: str = "ecmp",
                 seed: int = 0) -> ChakraTrace:
    """The Chakra trace of one step of ``model`` with ``layout`` on ``fabric``, as the
    step model times it.

    Raises
    ------
    UsageError
        Where :func:`~topomodel.analysis.training.step.step_time` raises it, and for more
        ranks than :data:`topomodel.limits.MAX_TRACE_RANKS`.
    """
    refusal = limits.above(layout.world, "MAX_TRACE_RANKS", "trace files (one per rank)",
                           limits.BYTES_PER_TRACE_RANK, doing="to write")
    if refusal:
        raise UsageError(refusal)
    a = assumptions or StepAssumptions()
    shape = shape_of(fabric, model, layout)
    calls, _ = step_calls(fabric, model, layout, a, routing=routing, seed=seed, shape=shape)
    device = device_model(shape.accelerator, a.compute_dtype, override=a.compute_efficiency,
                          hbm_efficiency=a.hbm_efficiency)
    sched, sizes, moe_sizes = shape.schedule, shape.sizes, shape.moe_sizes
    ops = step_ops(device, model, layout, a, shape.seq, sched, calls, sizes - moe_sizes,
                   moe_sizes)
    dense, experts = stage_parameters(model, layout, sizes.sum(axis=1), moe_sizes.sum(axis=1))
    ctx = _Context(layout, sched, calls, ops, optimizer_s(device, layout, dense, experts),
                   param_gather_calls(calls, layout, a, dense, experts),
                   stage_buckets(sched, calls, layout, a, dense, experts, sizes, moe_sizes))
    stages = [ctx.stage(s) for s in range(sched.p)]
    ranks = np.arange(layout.world)
    pp = rank_groups(ranks, layout, "pp")
    stage_of = np.empty(layout.world, dtype=np.int64)
    stage_of[pp] = np.arange(layout.pp)[None, :]
    kinds = sorted({GRID_OF_CALL[name] for name in calls if name != "pp"})
    nodes = ranks_of(fabric)[:layout.world]
    names = fabric.nodes["name"].astype(str).to_numpy()[nodes]
    return ChakraTrace(stages, calls, {k: rank_groups(ranks, layout, k) for k in kinds},
                       stage_of, pp, [str(n) for n in names])


@dataclass
class _Context:
    layout: Layout
    sched: Any
    calls: dict[str, Any]
    ops: Any
    optimizer_s: np.ndarray
    gathers: dict[str, np.ndarray]
    buckets: Any

    # C901: one pass over the stage's operations in schedule order, each kind of node
    # (receive, compute, collectives, send, buckets) added where the schedule puts it
    def stage(self, s: int) -> list[dict[str, Any]]:  # noqa: C901
        """The nodes of stage ``s``, in an order where every dependency comes first."""
        sched, ops, layout = self.sched, self.ops, self.layout
        dep_stage, dep_pos, _ = dependencies(sched)
        st = _Stage()
        name_of = {(c.kind, c.collective): n for n, c in self.calls.items()}
        start: list[int] = []
        for key in sorted(self.gathers):
            start = st.chain(start, "zero", key, int(self.gathers[key][s]))
        # who receives each operation's output: (stage, position) of the receivers
        sends: dict[int, list[tuple[int, int]]] = {}
        for t in range(sched.p):
            for at in np.flatnonzero((dep_stage[t] == s) & (t != s)):
                sends.setdefault(int(dep_pos[t, at]), []).append((t, int(at)))
        ends: list[int] = []
        fill: dict[int, list[tuple[str, int]]] = {}
        for key, count, pos in self.buckets[s]:
            fill.setdefault(pos, []).append((key, count))
        grads: list[int] = []
        for j in range(sched.ops):
            op = f"{'FBW'[sched.kind[s, j]]}{sched.micro[s, j]}.c{sched.chunk[s, j]}"
            deps = list(ends) or ([] if layout.dp_overlap else list(start))
            if dep_stage[s, j] >= 0 and dep_stage[s, j] != s:
                recv = st.add(list(ends), kind="recv", name=f"{op}.recv", peer=int(
                    dep_stage[s, j]), tag=_tag(sched, s, j))
                deps += st.chain([recv], op, "pp_sg", 1) if "pp_sg" in self.calls else [recv]
            comp = st.add(deps, kind="comp", name=op, duration_s=float(
                ops.compute_s[s, j] + ops.imbalance_s[s, j]))
            after, beside = [comp], list(deps)
            for key in sorted(ops.calls):
                count = round(float(ops.calls[key][s, j]))
                if ops.exposed_s[key][s, j] >= ops.issued_s[key][s, j] * (1 - 1e-9):
                    after = st.chain(after, op, name_of[key], count)  # exposed whole
                else:
                    beside = st.chain(beside, op, name_of[key], count)
            ends = sorted(set(after + (beside if beside != deps else [])))
            if j == 0 and layout.dp_overlap:
                ends = sorted(set(ends + start))
            for to, into in sends.get(j, []):
                send = st.add(after, kind="send", name=f"{op}.send", peer=to,
                              tag=_tag(sched, to, into))
                if layout.pp_blocking:
                    ends.append(send)
            if layout.dp_overlap:  # buckets go out once the backward filling them ran
                for key, count in fill.get(j, []):
                    grads = st.chain(sorted({comp, *grads}), "grad", key, count)
        tail = sorted(set(ends + grads))
        if not layout.dp_overlap:
            for pos in sorted(fill):
                for key, count in fill[pos]:
                    tail = st.chain(tail, "grad", key, count)
        st.add(tail, kind="comp", name="optimizer", duration_s=float(self.optimizer_s[s]))
        return st.nodes


def _tag(sched: Any, s: int, j: int) -> int:
    """The tag of the pipeline transfer into operation ``j`` of stage ``s``: the same on
    the sender and the receiver, different for every transfer of the step."""
    return int(((sched.kind[s, j] * sched.m + sched.micro[s, j]) * sched.v
                + sched.chunk[s, j]) * sched.p + s)


def write_chakra(trace: ChakraTrace, folder: str | Path) -> list[Path]:
    """Write ``trace`` into ``folder``: ``workload.{rank}.et`` per rank and
    ``workload.json`` (process group name: its ranks); all or none.

    Raises
    ------
    UsageError
        Without protobuf (the ``export`` extra), and where the folder cannot be written.
    """
    from topomodel.export.protoschema import messages, write_delimited

    m = messages(str(SCHEMA))
    enums = m["enums"]
    pg_of: dict[tuple[str, int], str] = {}
    table: dict[str, list[int]] = {}
    for kind, rows in trace.groups.items():
        for g, row in enumerate(rows):
            name = f"{kind}{g}"
            table[name] = [int(r) for r in row]
            for r in row:
                pg_of[(kind, int(r))] = name

    def rank_file(rank: int) -> Callable[[IO[bytes]], object]:
        def write(stream: IO[bytes]) -> None:
            meta = m["GlobalMetadata"](version=SCHEMA_VERSION)
            meta.attr.add(name="accelerator", string_val=trace.accelerators[rank])
            write_delimited(stream, meta)
            s = int(trace.stage_of_rank[rank])
            pipe = trace.pp_groups[np.flatnonzero((trace.pp_groups == rank).any(axis=1))[0]]
            for node in trace.stages[s]:
                write_delimited(stream, _node(m, enums, node, trace, rank, pipe, pg_of))
        return write

    parts: list[tuple[str, Callable[[IO[bytes]], object]]] = [
        (f"workload.{r}.et", rank_file(r)) for r in range(len(trace.stage_of_rank))]
    body = (json.dumps(table, indent=1) + "\n").encode()
    parts.append(("workload.json", lambda stream: stream.write(body)))
    return atomic_files(folder, parts)


def _node(m: dict[str, Any], enums: dict[str, int], node: dict[str, Any],
          trace: ChakraTrace, rank: int, pipe: np.ndarray,
          pg_of: dict[tuple[str, int], str]) -> Any:
    """The protobuf ``Node`` of one stage node on ``rank`` (``pipe``: its pipeline's
    ranks by stage)."""
    out = m["Node"](id=node["id"], name=node["name"], data_deps=node["deps"])
    out.attr.add(name="is_cpu_op", bool_val=False)
    kind = node["kind"]
    if kind == "comp":
        out.type = enums["COMP_NODE"]
        out.duration_micros = round(node["duration_s"] * MICROSECONDS)
        return out
    if kind == "coll":
        call = trace.calls[node["call"]]
        out.type = enums["COMM_COLL_NODE"]
        out.attr.add(name="comm_type", int64_val=enums[COMM_TYPES[call.collective]])
        out.attr.add(name="comm_size", int64_val=round(call.size_bytes))
        out.attr.add(name="pg_name", string_val=pg_of[(GRID_OF_CALL[node["call"]], rank)])
        return out
    peer = int(pipe[node["peer"]])
    out.type = enums["COMM_SEND_NODE" if kind == "send" else "COMM_RECV_NODE"]
    src, dst = (rank, peer) if kind == "send" else (peer, rank)
    out.attr.add(name="comm_src", int32_val=src)
    out.attr.add(name="comm_dst", int32_val=dst)
    out.attr.add(name="comm_tag", int32_val=node["tag"])
    out.attr.add(name="comm_size", int64_val=round(trace.calls["pp"].size_bytes))
    return out
