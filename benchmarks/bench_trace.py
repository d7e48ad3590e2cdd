"""Benchmark: reading a 100 MB PyTorch profiler trace and measuring its steps.

Run: python benchmarks/bench_trace.py [MB]

A synthetic trace of one rank of a GPU job is written first (Kineto's format, as
tests/data/traces/nccl-excerpt: per step a ProfilerStep annotation, CPU operators with
their arguments, compute kernels, NCCL kernels with the collective's arguments), until
the file is about MB megabytes (default 100). Then, timed apart (wall and CPU seconds):
the JSON parse alone with the standard library's ``json`` (with the garbage collector
running and paused, as ``read_trace`` pauses it) and, where installed, with
``orjson``; ``read_trace`` (parse and events to records); ``measure_traces`` (the
steps' compute, exposed communication and wait, the collectives' busbw).
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from topomodel.calibrate.tracesteps import measure_traces
from topomodel.inputs.measured.kineto import read_trace

KERNELS_PER_STEP = 2000  # compute kernels: a transformer step launches thousands
OPS_PER_KERNEL = 1  # a CPU operator launching each
COLLECTIVES_PER_STEP = 64  # data-parallel buckets and tensor-parallel collectives


def fixed_allreduce(number: int, k: int, t: float) -> dict[str, Any]:
    """The NCCL kernel of the ``k``-th compute kernel's slot: a 40 MiB ring LL128
    all-reduce of 55 us."""
    return {"ph": "X", "cat": "kernel", "name":
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL128(ncclDevKernelArgsStorage<4096ul>)",
            "pid": 0, "tid": 20, "ts": round(t + 10, 3), "dur": 55.0, "args": {
                "External id": number * 10000 + k, "device": 0, "stream": 20,
                "Collective name": "allreduce", "dtype": "BFloat16",
                "In msg nelems": 20971520, "Out msg nelems": 20971520,
                "Group size": 8, "Process Group Name": "0",
                "Process Group Description": "default_pg"}}


Collective = Callable[[int, int, float], dict[str, Any]]


def _step(number: int, t0: float, collective: Collective) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    t = t0
    for k in range(KERNELS_PER_STEP):
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7,
                       "ts": round(t - 5.0, 3), "dur": 3.1, "args": {
                           "External id": number * 10000 + k, "Record function id": 0,
                           "Input Dims": [[4096, 4096], [4096, 4096]],
                           "Input type": ["c10::BFloat16", "c10::BFloat16"]}})
        events.append({"ph": "X", "cat": "kernel",
                       "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64",
                       "pid": 0, "tid": 7, "ts": round(t, 3), "dur": 40.0, "args": {
                           "External id": number * 10000 + k, "device": 0, "stream": 7,
                           "correlation": number * 10000 + k, "grid": [132, 1, 1],
                           "block": [384, 1, 1]}})
        if k % (KERNELS_PER_STEP // COLLECTIVES_PER_STEP) == 0:
            events.append(collective(number, k, t))
        t += 42.0
    events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{number}",
                   "pid": 0, "tid": 7, "ts": t0, "dur": round(t - t0, 3), "args": {}})
    return events


def write_trace(path: Path, megabytes: float,
                collective: Collective = fixed_allreduce) -> int:
    """Write a synthetic trace of about ``megabytes`` MB whose NCCL kernels
    ``collective(step, k, t)`` makes; the number of events."""
    one = json.dumps(_step(0, 0.0, collective))
    steps = max(1, int(megabytes * 1e6 / len(one)))
    events: list[dict[str, Any]] = []
    for n in range(steps):
        events += _step(n, n * KERNELS_PER_STEP * 42.0 + 1e6, collective)
    data = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0,
                                                    "world_size": 8},
            "traceEvents": events}
    path.write_text(json.dumps(data))
    return len(events)


def _timed(label: str, run: Any) -> Any:
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    print(f"{label}: {time.perf_counter() - wall:.2f} s wall, {time.process_time() - cpu:.2f}"
          " s CPU")
    return result


def main() -> None:
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else 100.0
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank0.json"
        count = write_trace(path, megabytes)
        raw = path.read_bytes()
        print(f"trace: {len(raw) / 1e6:.0f} MB, {count:,} events")
        _timed("json.loads (standard library)", lambda: json.loads(raw))
        gc.disable()
        _timed("json.loads, garbage collector paused", lambda: json.loads(raw))
        gc.enable()
        try:
            import orjson

            _timed("orjson.loads", lambda: orjson.loads(raw))
            gc.disable()
            _timed("orjson.loads, garbage collector paused", lambda: orjson.loads(raw))
            gc.enable()
        except ImportError:
            print("orjson.loads: not installed")
        trace = _timed("read_trace (parse + records)", lambda: read_trace(path))
        measure = _timed("measure_traces", lambda: measure_traces([trace]))
        print(f"{len(trace.collectives):,} collectives, {len(trace.compute_start_s):,}"
              f" compute spans, {len(measure.steps)} steps; exposed share"
              f" {measure.median('comm_share'):.1%}")


if __name__ == "__main__":
    main()
