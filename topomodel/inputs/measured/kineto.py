"""Read PyTorch profiler traces (Kineto's Chrome-trace JSON): collectives, compute, steps.

``torch.profiler`` writes one file per rank (``export_chrome_trace``,
``tensorboard_trace_handler``: ``*.json`` or ``*.json.gz``). The fields read are the ones
PyTorch and Kineto write (checked against ``torch/profiler/_trace_validator.py``'s
``_NCCL_REQUIRED_FIELDS`` and ``ProcessGroupNCCL``'s ``RECORD_PARAM_COMMS_DATA``):

- the top level: ``traceEvents`` (required) and ``distributedInfo`` (``rank``,
  ``world_size``, ``backend``, ``pg_config`` with ``pg_name`` and ``pg_size``);
- complete events (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds and ``cat``:
  ``kernel`` (GPU kernels: NCCL's ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` and
  older ``ncclKernel_*`` are communication, every other kernel compute; an NCCL kernel's
  ``args`` carry ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group
  size``, ``dtype``, ``Process Group Name`` (``pg_name`` in some releases) and
  ``stream``; where a kernel carries none of them, as in older releases, those of the
  ``record_param_comms`` CPU op with the same ``External id``), ``cpu_op``
  (operators: compute on a trace without GPU kernels, except ``c10d::*`` and
  ``record_param_comms``, which launch communication),
  ``user_annotation`` (``ProfilerStep#N``, the step boundaries; gloo's
  ``gloo:all_reduce`` and its siblings, the CPU collectives, whose ``Input Dims`` and
  ``Input type`` give the size when the profiler recorded shapes) and
  ``gpu_user_annotation`` (``ProfilerStep#N`` on the GPU's clock, preferred on a GPU
  trace).

A collective's size follows nccl-tests (``max(In msg nelems, Out msg nelems)`` x the
element's bytes: an all-gather's whole output, a reduce-scatter's whole input). A trace
that cannot be read (not JSON, no ``traceEvents``, an event without a number where one is
needed) raises :class:`TraceError`, one line naming the file and the key; what is only
missing (sizes of kernels recorded without their arguments, a data type not known here,
step annotations) leaves the field empty and says so in the trace's ``warnings``.
"""

from __future__ import annotations

import gc
import gzip
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topomodel.errors import InputError, Problem

US = 1e-6
"""Seconds per microsecond: Kineto writes ``ts`` and ``dur`` in microseconds."""

DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "long": 8, "int64": 8, "longint": 8, "int": 4, "int32": 4, "short": 2,
    "int16": 2, "shortint": 2, "char": 1, "int8": 1, "signedchar": 1, "byte": 1,
    "uint8": 1, "unsignedchar": 1, "bool": 1, "float8e4m3fn": 1, "float8e5m2": 1,
    "float8e4m3fnuz": 1, "float8e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16,
    "uint16": 2, "uint32": 4, "uint64": 8,
}
"""Bytes per element by data type name, as PyTorch spells them in ``dtype`` (``Float``,
``BFloat16``: c10's ScalarType names) and in ``Input type`` (``float``,
``c10::BFloat16``, ``long int``), lower case with ``c10::``, spaces and ``_`` removed."""

KIND_PREFIXES = (("allreduce", "allreduce"), ("allgather", "allgather"),
                 ("reducescatter", "reducescatter"), ("alltoall", "alltoall"),
                 ("broadcast", "broadcast"), ("reduce", "reduce"),
                 ("sendrecv", "sendrecv"), ("send", "sendrecv"), ("recv", "sendrecv"))
"""A collective's name in a trace (``allreduce``, ``_allgather_base``,
``reduce_scatter_tensor_coalesced``, ``all_to_all``, an NCCL kernel's ``AllGather``)
to the model's, by its first letters once lower-cased without ``_``; other names
(``barrier``, ``gather``, ``scatter``) are kept as they are."""

NCCL_ALGORITHMS = ("NVLS_TREE", "NVLS", "COLLNET_DIRECT", "COLLNET_CHAIN", "TREE", "RING",
                   "PAT")
NCCL_PROTOCOLS = ("LL128", "LL", "SIMPLE")

_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NOT_COMPUTE_OPS = ("c10d::", "record_param_comms", "nccl:", "gloo:")
_GLOO_SIZED = ("allreduce", "broadcast", "reduce")  # the input is the buffer


class TraceError(InputError):
    """A profiler trace that cannot be read."""


def _problem(file: str, key: str, message: str) -> TraceError:
    return TraceError([Problem(file, None, key, message)])


@dataclass(frozen=True)
class TraceCollective:
    """One collective as a rank ran it: seconds on the trace's clock, bytes."""

    kind: str  # the model's name (allreduce, ...) or the trace's (barrier, gather)
    size_bytes: float | None  # nccl-tests convention; None when the trace does not say
    group: str  # the process group's name ('' unknown)
    group_size: int | None
    stream: str  # the GPU stream, or the CPU thread, it ran on
    start_s: float
    duration_s: float
    dtype: str
    source: str  # 'nccl kernel' or 'gloo'
    algorithm: str = ""  # NCCL's, from the kernel's name (RING, TREE, NVLS, ...)
    protocol: str = ""  # LL, LL128, SIMPLE


@dataclass(frozen=True)
class TraceStep:
    """One ``ProfilerStep#N``: its number and its span, seconds."""

    number: int
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        """The step's length, seconds."""
        return self.end_s - self.start_s


@dataclass(frozen=True, eq=False)
class RankTrace:
    """What one rank's trace says: its collectives, its compute spans and its steps.

    ``compute_start_s`` and ``compute_end_s`` are the spans of compute (GPU kernels on a
    GPU trace, CPU operators on one without), as recorded: they may nest and overlap.
    """

    file: str
    rank: int | None
    world_size: int | None
    backend: str
    device: str  # 'gpu' (NCCL kernels or compute kernels seen) or 'cpu'
    collectives: tuple[TraceCollective, ...]
    compute_start_s: np.ndarray
    compute_end_s: np.ndarray
    steps: tuple[TraceStep, ...]
    warnings: tuple[str, ...]


def kind_of(name: str) -> str:
    """The model's name of a collective named ``name`` in a trace.

    Examples
    --------
    >>> kind_of("_allgather_base"), kind_of("reduce_scatter_tensor_coalesced")
    ('allgather', 'reducescatter')
    >>> kind_of("AllReduce"), kind_of("send"), kind_of("barrier")
    ('allreduce', 'sendrecv', 'barrier')
    """
    plain = name.lower().replace("_", "").replace("-", "")
    for prefix, kind in KIND_PREFIXES:
        if plain.startswith(prefix):
            return kind
    return plain


def dtype_bytes(name: str) -> int | None:
    """Bytes per element of the data type ``name`` (None if unknown).

    Examples
    --------
    >>> dtype_bytes("BFloat16"), dtype_bytes("c10::Half"), dtype_bytes("long int")
    (2, 2, 8)
    """
    plain = re.sub(r"[\s_]", "", name.lower().replace("c10::", ""))
    return DTYPE_BYTES.get(plain)


def nccl_kernel(name: str) -> tuple[str, str, str] | None:
    """The collective, NCCL algorithm and protocol an NCCL kernel's name gives, or None
    for a kernel that is not NCCL's.

    Examples
    --------
    >>> nccl_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    ('allreduce', 'RING', 'LL')
    >>> nccl_kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)")
    ('sendrecv', '', '')
    >>> nccl_kernel("ampere_bf16_s16816gemm") is None
    True
    """
    found = _NCCL_KERNEL.match(name)
    if not found:
        return None
    bare = name.split("(", 1)[0]
    algorithm = next((a for a in NCCL_ALGORITHMS if f"_{a}_" in f"{bare}_"), "")
    protocol = next((p for p in NCCL_PROTOCOLS if bare.endswith(f"_{p}")), "")
    return kind_of(found.group(1)), algorithm, protocol


def trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """The trace files ``paths`` name: files as given, folders as the ``*.json`` and
    ``*.json.gz`` files in them, sorted by name.

    Raises
    ------
    TraceError
        For a path that does not exist or a folder with no trace in it.
    """
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            inside = sorted(p for p in path.iterdir()
                            if p.is_file() and p.name.endswith((".json", ".json.gz")))
            if not inside:
                raise _problem(str(path), "", "no *.json or *.json.gz trace in this folder")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise _problem(str(path), "", "no such file or folder")
    return found


def load_trace_json(path: str | Path) -> dict[str, Any]:
    """The JSON object of a trace file (gzip'd when its name ends ``.gz``).

    Raises
    ------
    TraceError
        For a file that cannot be read, is not JSON or is not a JSON object.
    """
    file = str(path)
    try:
        raw = Path(path).read_bytes()
        if file.endswith(".gz") or raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:  # gzip's errors are OSErrors (BadGzipFile)
        raise _problem(file, "", f"cannot read: {getattr(exc, 'strerror', None) or exc}"
                       ) from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _problem(file, "", f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _problem(file, "", "not a Chrome trace: the file is not a JSON object")
    return data


def read_trace(path: str | Path) -> RankTrace:
    """Read one rank's profiler trace.

    Raises
    ------
    TraceError
        ``FILE: KEY: what is wrong`` for a file that is not a trace or an event without
        the numbers it needs.
    """
    # The parse makes millions of containers and none is garbage: the cyclic collector
    # would walk them again and again (bench_trace: 4x the CPU time at 100 MB). Paused
    # for the read, as it was after.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return parse_trace(load_trace_json(path), file=str(path))
    finally:
        if was_enabled:
            gc.enable()


def read_traces(paths: Sequence[str | Path]) -> tuple[RankTrace, ...]:
    """Read the traces of a job (files or folders of them), in rank order.

    Raises
    ------
    TraceError
        For an unreadable trace, or two traces of the same rank.
    """
    traces = [read_trace(p) for p in trace_files(paths)]
    seen: dict[int, str] = {}
    for trace in traces:
        if trace.rank is not None:
            if trace.rank in seen:
                raise _problem(trace.file, "distributedInfo.rank",
                               f"rank {trace.rank} again (also {seen[trace.rank]})")
            seen[trace.rank] = trace.file
    return tuple(sorted(traces, key=lambda t: (t.rank is None, t.rank or 0, t.file)))


def _number(value: Any, file: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:  # some exporters write numbers as strings
            return float(value)
        except (TypeError, ValueError):
            raise _problem(file, key, f"not a number: {value!r}") from None
    return float(value)


@dataclass(frozen=True)
class _Info:
    """What ``distributedInfo`` says."""

    rank: int | None
    world_size: int | None
    backend: str
    default_group: str
    default_size: int | None
    groups: int


def _info(data: dict[str, Any], file: str) -> _Info:
    info = data.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise _problem(file, "distributedInfo", "not an object")
    ints: dict[str, int | None] = {}
    for key in ("rank", "world_size"):
        value = info.get(key)
        ints[key] = None if value is None else int(_number(value, file,
                                                            f"distributedInfo.{key}"))
    configs = info.get("pg_config") or []
    first = configs[0] if isinstance(configs, list) and configs and isinstance(
        configs[0], dict) else {}
    size = first.get("pg_size", ints["world_size"])
    return _Info(ints["rank"], ints["world_size"], str(info.get("backend", "")),
                 str(first.get("pg_name", "")),
                 None if size is None else int(_number(size, file,
                                                       "distributedInfo.pg_config[0].pg_size")),
                 len(configs) if isinstance(configs, list) else 0)


def _gloo_size(args: dict[str, Any], kind: str) -> tuple[float | None, str]:
    """A gloo collective's bytes from its recorded input shapes (first input tensor)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if kind not in _GLOO_SIZED or not isinstance(dims, list) or not dims or not isinstance(
            types, list) or not types:
        return None, str(types[0]) if isinstance(types, list) and types else ""
    shape, dtype = dims[0], str(types[0])
    word = dtype_bytes(dtype)
    if word is None or not isinstance(shape, list) or not all(
            isinstance(d, int) for d in shape):
        return None, dtype
    return float(np.prod(shape, dtype=np.float64)) * word, dtype


def _kernel_collective(event: dict[str, Any], args: dict[str, Any], named: tuple[str, str, str],
                       start_s: float, file: str, key: str) -> TraceCollective:
    kind = kind_of(str(args["Collective name"])) if "Collective name" in args else named[0]
    dtype = str(args.get("dtype", ""))
    size: float | None = None
    if "In msg nelems" in args or "Out msg nelems" in args:
        nelems = max(_number(args.get("In msg nelems", 0), file, f"{key}.args.In msg nelems"),
                     _number(args.get("Out msg nelems", 0), file,
                             f"{key}.args.Out msg nelems"))
        word = dtype_bytes(dtype)
        size = None if word is None else nelems * word
    group_size = args.get("Group size")
    return TraceCollective(
        kind, size, str(args.get("Process Group Name", args.get("pg_name", ""))),
        None if group_size is None else int(_number(group_size, file,
                                                    f"{key}.args.Group size")),
        f"stream {args.get('stream', event.get('tid', ''))}", start_s,
        _number(event.get("dur"), file, f"{key}.dur") * US, dtype, "nccl kernel",
        named[1], named[2])


# C901: one pass over the events; each branch is one kind of event the trace holds
def parse_trace(data: dict[str, Any], *, file: str = "<trace>") -> RankTrace:  # noqa: C901
    """Read a trace already loaded from JSON (see :func:`read_trace`).

    Examples
    --------
    >>> trace = parse_trace({"distributedInfo": {"rank": 0, "world_size": 2},
    ...     "traceEvents": [
    ...     {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    ...      "ts": 10, "dur": 5, "args": {"Collective name": "allreduce", "dtype": "Float",
    ...      "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "stream": 7}},
    ...     {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 12}]})
    >>> c = trace.collectives[0]
    >>> c.kind, c.size_bytes, c.group_size, round(c.duration_s * 1e6), c.algorithm, trace.device
    ('allreduce', 4096.0, 2, 5, 'RING', 'gpu')
    """
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise _problem(file, "traceEvents", "missing or not a list: not a Kineto trace")
    info = _info(data, file)
    warnings: list[str] = []
    collectives: list[TraceCollective] = []
    kernels: list[tuple[float, float]] = []
    ops: list[tuple[float, float, Any]] = []
    steps: dict[str, dict[int, tuple[float, float]]] = {"user_annotation": {},
                                                        "gpu_user_annotation": {}}
    gloo_threads: set[Any] = set()
    unsized = 0
    pending: list[tuple[dict[str, Any], dict[str, Any], tuple[str, str, str], float, str]] = []
    launched: dict[Any, dict[str, Any]] = {}  # record_param_comms' args by External id
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise _problem(file, f"traceEvents[{index}]", "not an object")
        if event.get("ph") != "X":
            continue
        cat, name = event.get("cat"), str(event.get("name", ""))
        if cat not in ("kernel", "cpu_op", "user_annotation", "gpu_user_annotation"):
            continue
        key = f"traceEvents[{index}]"
        start_s = _number(event.get("ts"), file, f"{key}.ts") * US
        end_s = start_s + _number(event.get("dur"), file, f"{key}.dur") * US
        args = event.get("args") or {}
        if not isinstance(args, dict):
            raise _problem(file, f"{key}.args", "not an object")
        if cat == "kernel":
            named = nccl_kernel(name)
            if named is None:
                kernels.append((start_s, end_s))
                continue
            pending.append((event, args, named, start_s, key))
        elif cat == "cpu_op":
            if name == "record_param_comms":
                launched[args.get("External id")] = args
            elif not name.startswith(_NOT_COMPUTE_OPS):
                ops.append((start_s, end_s, event.get("tid")))
        elif (step := _STEP.match(name)) is not None:
            steps[cat][int(step.group(1))] = (start_s, end_s)
        elif cat == "user_annotation" and name.startswith("gloo:"):
            kind = kind_of(name[5:])
            size, dtype = _gloo_size(args, kind)
            unsized += size is None
            gloo_threads.add(event.get("tid"))
            collectives.append(TraceCollective(
                kind, size, info.default_group, info.default_size or info.world_size,
                f"thread {event.get('tid', '')}", start_s, end_s - start_s, dtype, "gloo"))
    for event, args, named, start_s, key in pending:
        if "Collective name" not in args and args.get("External id") in launched:
            # older PyTorch puts the collective's arguments on the CPU op only
            args = {**launched[args["External id"]], **args}
        collective = _kernel_collective(event, args, named, start_s, file, key)
        unsized += collective.size_bytes is None
        collectives.append(collective)
    device = "gpu" if kernels or any(c.source == "nccl kernel" for c in collectives) else "cpu"
    spans = kernels if device == "gpu" else [(s, e) for s, e, tid in ops
                                             if tid not in gloo_threads]
    chosen = steps["gpu_user_annotation"] if device == "gpu" and steps[
        "gpu_user_annotation"] else steps["user_annotation"]
    if unsized:
        warnings.append(f"{file}: {unsized} collective(s) without a size (no 'In msg"
                        " nelems'/'dtype' on NCCL kernels, or no recorded shapes on gloo's:"
                        " profile with record_shapes=True); they count in time, not in busbw")
    if not chosen:
        warnings.append(f"{file}: no ProfilerStep#N annotations (profile with a schedule and"
                        " call prof.step()); the whole trace is taken as one step")
    if device == "cpu" and info.groups > 1 and any(c.source == "gloo" for c in collectives):
        warnings.append(f"{file}: {info.groups} process groups; gloo's collectives name"
                        " none, so each is taken as the default group's")
    if info.rank is None:
        warnings.append(f"{file}: no distributedInfo.rank; ranks follow the file order")
    array = np.array(spans, dtype=np.float64).reshape(-1, 2)
    return RankTrace(file, info.rank, info.world_size, info.backend, device,
                     tuple(sorted(collectives, key=lambda c: c.start_s)), array[:, 0],
                     array[:, 1],
                     tuple(TraceStep(n, s, e) for n, (s, e) in sorted(chosen.items())),
                     tuple(warnings))
