"""Read the JSON file nccl-tests writes with ``-J FILE`` (``src/util.cu``, JSON file
version 3), into the same records as the text reader
(:class:`~topomodel.inputs.measured.nccltests.NcclTestsLog`).

The layout, as nccl-tests writes it (rank 0 alone under MPI)::

    {"version": 3, "start_time": "...", "args": [argv...], "env": ["NAME=VALUE", ...],
     "nccl_version": 22807,
     "config": {"nthreads": 1, "ngpus": 8, "minimum_bytes": 8, "maximum_bytes": ...,
                "step_factor": 2 | "step_bytes": ..., "warmup_iters": 5, "iterations": 20,
                ..., "devices": [{"rank": 0, "group": 0, "pid": 1, "hostname": "h",
                                  "device": 0, "device_hex": "0000:1b:00",
                                  "device_info": "NVIDIA H100 80GB HBM3"}, ...]},
     "results": [{"size": 1048576, "count": 262144, "type": "float", "redop": "sum",
                  "root": "    -1",
                  "out_of_place": {"time": 100.0, "alg_bw": 10.49, "bus_bw": 15.73,
                                   "nwrong": 0} | null,
                  "in_place": {...}, "actual_iterations": 20,
                  "experiment_name": ""}, ...],
     "out_of_bounds": {"count": 0, "okay": "true"},
     "average_bus_bandwidth": {"bandwidth": 15.8, "okay": "unchecked"},
     "end_time": "..."}

Times are µs (``cpu_time`` instead of ``time`` under ``-C``), bandwidths GB/s (10^9
bytes/s); a number nccl-tests could not compute is the string ``"nan"``; booleans are the
strings ``"true"``/``"false"``; ``nwrong`` is ``null`` without validation. The test is
named by ``args[0]`` (the binary), the command line is ``args`` and the environment
``env`` (read for ``NCCL_ALGO``/``NCCL_PROTO`` as the text reader reads a log's lines).
A file cut off before its end (a crashed run) is refused: the JSON does not parse. A run
with ``-N k`` lists the sweep k times; the first is ``rows``, the others ``cycles``.

Examples
--------
>>> log = parse_nccl_json('{"args": ["./all_reduce_perf", "-g", "2"], "results": ['
...     '{"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": "-1",'
...     ' "out_of_place": {"time": 10.0, "alg_bw": 0.1, "bus_bw": 0.1, "nwrong": 0},'
...     ' "in_place": {"time": 9.0, "alg_bw": 0.11, "bus_bw": 0.11, "nwrong": null}}]}')
>>> log.test, log.rows[0].size_bytes, log.rows[0].in_place.time_s
('all_reduce_perf', 1024, 9e-06)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from topomodel.errors import Problem
from topomodel.inputs.measured.nccllaunch import read_launch
from topomodel.inputs.measured.nccltests import (
    TESTS,
    LogError,
    NcclTestsLog,
    RankPlace,
    ResultRow,
    Timing,
    check_rows,
    split_cycles,
)


def _problem(file: str, message: str) -> LogError:
    return LogError([Problem(file, None, "", message)])


def read_nccl_json(path: str | Path) -> NcclTestsLog:
    """Read an nccl-tests ``-J`` JSON file (see the module's description).

    Raises
    ------
    LogError
        ``FILE: what is wrong`` for a file that is not nccl-tests JSON, has no results,
        a result without a number where one is needed, or a size twice.
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise _problem(file, f"cannot read: {exc.strerror or exc}") from None
    return parse_nccl_json(text, file=file)


def _number(value: Any) -> float:
    """A finite number (nccl-tests writes NaN as the string "nan")."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(value)
    if not math.isfinite(value):
        raise ValueError(value)
    return float(value)


def _timing(group: Any) -> Timing | None:
    if group is None:
        return None
    if not isinstance(group, Mapping):
        raise ValueError(group)
    time_us = group["time"] if "time" in group else group["cpu_time"]
    wrong = group.get("nwrong")
    return Timing(_number(time_us) * 1e-6, _number(group["alg_bw"]) * 1e9,
                  _number(group["bus_bw"]) * 1e9,
                  None if wrong is None or wrong == "nan" else float(wrong))


def _row(index: int, item: Any) -> ResultRow:
    if not isinstance(item, Mapping):
        raise ValueError(item)
    out, inside = _timing(item.get("out_of_place")), _timing(item.get("in_place"))
    if out is None:  # only in-place (trace replay): it stands for both
        if inside is None:
            raise ValueError(item)
        out, inside = inside, None
    root = str(item.get("root", "-1")).strip()
    return ResultRow(index, int(item["size"]), int(item["count"]), str(item.get("type", "?")),
                     item.get("redop"), int(root) if root.lstrip("-").isdigit() else None,
                     out, inside)


def parse_nccl_json(text: str, *, file: str = "<json>") -> NcclTestsLog:
    """Read nccl-tests JSON from ``text`` (see :func:`read_nccl_json`); a row's ``line``
    is its position in ``results`` (1-based)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _problem(file, f"not JSON (line {exc.lineno}: {exc.msg}): is the file cut"
                       " off? nccl-tests closes it when the run ends") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise _problem(file, "not an nccl-tests JSON file: no 'results' list")
    rows = []
    for index, item in enumerate(data["results"], 1):
        try:
            rows.append(_row(index, item))
        except (KeyError, TypeError, ValueError):
            raise _problem(file, f"results[{index - 1}]: not a result nccl-tests writes"
                           " (size, count, and out_of_place or in_place with time, alg_bw"
                           " and bus_bw as numbers)") from None
    if not rows:
        raise _problem(file, "no results: the run stopped before its first size")
    args = [str(a) for a in data.get("args", []) if isinstance(a, str)]
    env = [str(e) for e in data.get("env", []) if isinstance(e, str)]
    launch = read_launch([" ".join(args), *(f"export {e}" for e in env)])
    try:
        rows, cycles = split_cycles(rows, launch.run_cycles, file)
        check_rows(rows, file)
    except LogError as exc:
        raise _problem(file, exc.problems[0].message.replace("lines", "results")
                       .replace("line", "result")) from None
    binary = args[0].rsplit("/", 1)[-1] if args else ""
    test = binary.removesuffix("_mpi") if binary.removesuffix("_mpi") in TESTS else None
    found = data.get("config")
    config: dict[str, Any] = found if isinstance(found, dict) else {}
    ranks = tuple(RankPlace(int(d["rank"]), str(d["hostname"]), int(d["device"]),
                            str(d.get("device_hex", "")), str(d.get("device_info", "")))
                  for d in config.get("devices", []) if isinstance(d, dict)
                  and {"rank", "hostname", "device"} <= d.keys())
    bounds = data.get("out_of_bounds")
    out_of_bounds = int(bounds["count"]) if isinstance(bounds, dict) and "count" in bounds \
        else None
    average = data.get("average_bus_bandwidth")
    avg = (average or {}).get("bandwidth") if isinstance(average, dict) else None
    warnings = []
    if out_of_bounds is None:
        warnings.append("no 'out_of_bounds' record: the run may have stopped early")
    elif out_of_bounds:
        warnings.append(f"{out_of_bounds} results failed nccl-tests' validation: the"
                        " measured times may not be of correct runs")
    step = (f"{config['step_factor']}(factor)" if "step_factor" in config else
            f"{config['step_bytes']}(bytes)" if "step_bytes" in config else None)
    return NcclTestsLog(file, test, ranks, config.get("nthreads"), config.get("ngpus"),
                        config.get("minimum_bytes"), config.get("maximum_bytes"), step, 0,
                        tuple(rows), out_of_bounds,
                        float(avg) * 1e9 if isinstance(avg, int | float) else None,
                        tuple(warnings + list(launch.conflicts)), launch, cycles)
