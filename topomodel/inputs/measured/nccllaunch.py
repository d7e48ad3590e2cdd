"""How an nccl-tests run was launched, as its log's command line and environment lines
say: processes, hosts, GPUs per process, and the NCCL algorithm and protocol it forced.

nccl-tests runs ``threads x GPUs`` ranks per process (``-t``, ``-g``; default 1 each), and
a launcher starts the processes: ``mpirun``/``mpiexec`` (``-np``/``-n`` processes; hosts
from ``--host``/``-H`` lists, a ``--hostfile``/``--machinefile``; per host from ``-N``,
``--npernode`` or ``--map-by ppr:K:node``) or Slurm's ``srun`` (``-n``/``--ntasks``,
``-N``/``--nodes``, ``--ntasks-per-node``); the binary's ``-N``/``--run_cycles`` (the
size sweep run and printed that many times). ``NCCL_ALGO`` and ``NCCL_PROTO`` are read
wherever the log sets them: ``-x NAME=VALUE``, ``NAME=VALUE`` before the binary, an
``export`` line, or NCCL's own ``NCCL INFO NAME set by environment to VALUE``.

Examples
--------
>>> launch = read_launch(["$ mpirun --hostfile hosts -np 2 -x NCCL_ALGO=Tree"
...                       " ./all_reduce_perf -b 8 -e 1G -g 1"])
>>> launch.processes, launch.gpus_per_process, launch.multi_host, launch.nccl["NCCL_ALGO"]
(2, 1, True, 'Tree')
>>> slurm = read_launch(["srun -N 2 --ntasks-per-node=8 ./build/all_gather_perf -g 1"])
>>> slurm.processes, slurm.per_host, slurm.nodes, slurm.ranks
(16, 8, 2, 16)
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

_ENV = re.compile(r"\b(NCCL_ALGO|NCCL_PROTO)(?:=|\s+set by environment to\s+)"
                  r"([\^A-Za-z0-9_,]+)")
_BINARY = re.compile(r"(?:^|/)[a-z_]+_perf(?:_mpi)?$")  # every nccl-tests binary
_LAUNCHERS = ("mpirun", "mpiexec", "srun", "orterun", "prterun")
_PROCESS_FLAGS = {"srun": ("-n", "--ntasks"), "mpi": ("-np", "-n", "--np", "-c")}
_PER_HOST_FLAGS = ("-N", "--npernode", "-npernode", "-ppn", "--ntasks-per-node", "-npn")
_HOST_LIST_FLAGS = ("--host", "-H", "-host", "--hosts", "-hosts", "-w", "--nodelist")
_HOST_FILE_FLAGS = ("--hostfile", "-hostfile", "--machinefile", "-machinefile", "-f")


@dataclass(frozen=True)
class Launch:
    """What a log's command line and environment lines say about its run.

    ``processes`` (launcher's ``-np``), ``per_host`` (processes per host), ``hosts``
    (a host list's names), ``nodes`` (``srun -N``), ``multi_host`` (a host file or
    list, or more than one node, was given), ``gpus_per_process`` (``threads x GPUs``
    of the binary's ``-t`` and ``-g``), ``nccl`` (``NCCL_ALGO``/``NCCL_PROTO`` as set),
    ``line`` (the command line's number, 1-based; ``None`` without one).
    """

    line: int | None = None
    launcher: str | None = None
    processes: int | None = None
    per_host: int | None = None
    hosts: tuple[str, ...] = ()
    nodes: int | None = None
    multi_host: bool = False
    gpus_per_process: int | None = None
    nccl: dict[str, str] = field(default_factory=dict)
    conflicts: tuple[str, ...] = ()
    run_cycles: int = 1  # the binary's -N/--run_cycles: the size sweep printed this often

    @property
    def ranks(self) -> int | None:
        """Ranks the command line starts (processes x GPUs per process), if it says."""
        if self.gpus_per_process is None:
            return None
        return (self.processes or 1) * self.gpus_per_process


def read_launch(lines: Sequence[str]) -> Launch:
    """The launch of a log whose lines (tag prefixes removed) are ``lines``."""
    nccl: dict[str, str] = {}
    conflicts: list[str] = []
    command: tuple[int, list[str]] | None = None
    for number, line in enumerate(lines, 1):
        for name, value in _ENV.findall(line):
            if name in nccl and nccl[name] != value:
                conflicts.append(f"{name} is set to {nccl[name]} and to {value} (line"
                                 f" {number}); the first is used")
            nccl.setdefault(name, value)
        if command is None and not line.lstrip().startswith("#"):
            words = _words(line)
            if any(_BINARY.search(w) for w in words):
                command = (number, words)
    if command is None:
        return Launch(nccl=nccl, conflicts=tuple(conflicts))
    number, words = command
    at = next(i for i, w in enumerate(words) if _BINARY.search(w))
    launcher = next((w.rsplit("/", 1)[-1] for w in words[:at]
                     if w.rsplit("/", 1)[-1] in _LAUNCHERS), None)
    before = _options(words[:at])
    after = _options(words[at + 1:])
    hosts = tuple(h.split(":")[0] for h in ",".join(
        before[f] for f in _HOST_LIST_FLAGS if f in before).split(",") if h)
    nodes = _count(before, ("-N", "--nodes")) if launcher == "srun" else None
    per_host = _count(before, ("--ntasks-per-node",) if launcher == "srun"
                      else _PER_HOST_FLAGS) or _ppr(before.get("--map-by", ""))
    gpus = (_count(after, ("-t", "--nthreads")) or 1) * (_count(after, ("-g", "--ngpus")) or 1)
    multi = (len(set(hosts)) > 1 or (nodes or 0) > 1 or any(f in before for f in
                                                              _HOST_FILE_FLAGS))
    processes = _count(before, _PROCESS_FLAGS["srun" if launcher == "srun" else "mpi"])
    if processes is None and per_host and (nodes or len(set(hosts)) > 1):
        processes = per_host * (nodes or len(set(hosts)))  # -np left to the host count
    cycles = _count(after, ("-N", "--run_cycles")) or 1
    return Launch(number, launcher, processes if launcher else None, per_host,
                  tuple(dict.fromkeys(hosts)), nodes, multi, gpus, nccl, tuple(conflicts),
                  cycles)


def _words(line: str) -> list[str]:
    text = line.strip().removeprefix("$").strip()
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _options(words: Sequence[str]) -> dict[str, str]:
    """``-flag value`` and ``--flag=value`` pairs (a flag without a value maps to '')."""
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        if not word.startswith("-"):
            continue
        name, sep, value = word.partition("=")
        if sep:
            out[name] = value
        else:
            nxt = words[i + 1] if i + 1 < len(words) else ""
            out[name] = "" if nxt.startswith("-") else nxt
    return out


def _count(options: dict[str, str], flags: Sequence[str]) -> int | None:
    for flag in flags:
        value = options.get(flag, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def _ppr(map_by: str) -> int | None:
    """Processes per node of Open MPI's ``--map-by ppr:K:node``."""
    found = re.match(r"ppr:(\d+):node", map_by)
    return int(found[1]) if found else None
