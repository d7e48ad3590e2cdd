"""Benchmark: calibrate from a 1,000-row nccl-tests log, or from a 100 MB profiler trace.

Run: python benchmarks/bench_calibrate.py [--rows 1000]
     python benchmarks/bench_calibrate.py --trace-mb 100

With ``--trace-mb``, a synthetic trace of one rank of a GPU job on the same 8 GPUs is
written instead (Kineto's format, as benchmarks/bench_trace.py writes it: per step a
ProfilerStep annotation, 2,000 GEMM kernels each with its CPU operator, and 64 NCCL
all-reduce kernels), whose all-reduces are ring Simple of 128 MiB to 2 GiB timed as the
degraded server runs them (150 GB/s busbw, 26 µs); it is read, measured and calibrated
(:func:`topomodel.calibrate.calibration.calibrate_inputs`: read_inputs, measure_traces,
a curve of 5 sizes, the fit), timed as a whole.

The log is written here in nccl-tests' layout (all_reduce_perf on the 8 GPUs of
examples/hgx-h100-server.yaml, ``-b 8 -e ... -i STEP``: sizes 8 B and then ``rows - 1``
steps of a fixed byte count up to 8 GiB), with times of a degraded server (150 GB/s
busbw, a 26 µs floor); it is read by the text reader and calibrated
(:func:`topomodel.calibrate.nccl.calibrate_nccl`: every least-squares evaluation times
the collective at every size). CPU seconds are printed beside wall seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_trace import write_trace  # noqa: E402

from topomodel.calibrate.calibration import calibrate_inputs  # noqa: E402
from topomodel.calibrate.inputs import read_inputs  # noqa: E402
from topomodel.calibrate.nccl import calibrate_nccl  # noqa: E402
from topomodel.fabric.build import build_fabric  # noqa: E402
from topomodel.inputs.design import load_design  # noqa: E402
from topomodel.inputs.measured.nccltests import read_nccl_tests  # noqa: E402

HEADER = ("#       size         count      type   redop    root     time   algbw   busbw"
          " #wrong     time   algbw   busbw #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
          "            (us)  (GB/s)  (GB/s)\n")


def write_log(path: Path, rows: int) -> None:
    """A degraded 8-GPU all_reduce log of ``rows`` sizes."""
    step = (8 << 30) // (rows - 1) // 32 * 32
    lines = [f"./build/all_reduce_perf -b 8 -e 8G -i {step} -g 8\n", HEADER]
    for i in range(rows):
        size = 32 if i == 0 else i * step
        busbw = 150e9
        t = 26e-6 + size * 2 * 7 / 8 / busbw
        alg = size / t / 1e9
        cell = f"{t * 1e6:7.1f}  {alg:6.2f}  {alg * 1.75:6.2f}       0"
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {cell}"
                     f"  {cell}\n")
    lines.append("# Out of bounds values : 0 OK\n")
    path.write_text("".join(lines))


TRACE_SIZES = [2 ** k for k in range(27, 32)]  # 128 MiB-2 GiB


def _degraded_allreduce(number: int, k: int, t: float) -> dict[str, Any]:
    """The NCCL kernel of a trace slot: ring Simple all-reduces cycling through
    :data:`TRACE_SIZES`, timed as the degraded server runs them (150 GB/s busbw, 26 us)."""
    size = TRACE_SIZES[k % len(TRACE_SIZES)]
    dur = 26.0 + size * 2 * 7 / 8 / 150e9 * 1e6
    return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_SIMPLE",
            "pid": 0, "tid": 20, "ts": round(t + 10, 3), "dur": round(dur, 3), "args": {
                "External id": number * 10000 + k, "device": 0, "stream": 20,
                "Collective name": "allreduce", "dtype": "BFloat16",
                "In msg nelems": size // 2, "Out msg nelems": size // 2,
                "Group size": 8, "Process Group Name": "0"}}


def trace_main(fabric: Any, megabytes: float) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rank0.json"
        count = write_trace(path, megabytes, _degraded_allreduce)
        size_mb = path.stat().st_size / 1e6
        wall, cpu = time.perf_counter(), time.process_time()
        result = calibrate_inputs(fabric, read_inputs([path]))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    figures = ", ".join(f"{f.section}.{f.entry}.{f.key} {f.before:.4g} -> {f.after:.4g}"
                        for f in result.fit.fitted)
    print(f"trace {size_mb:.0f} MB, {count:,} events: read + measure + calibrate"
          f" {wall:.2f} s wall, {cpu:.2f} s CPU; {figures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--trace-mb", type=float, default=None)
    args = parser.parse_args()
    fabric = build_fabric(*load_design(ROOT / "examples" / "hgx-h100-server.yaml"))
    if args.trace_mb is not None:
        trace_main(fabric, args.trace_mb)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.log"
        write_log(path, args.rows)
        wall, cpu = time.perf_counter(), time.process_time()
        log = read_nccl_tests(path)
        result = calibrate_nccl(fabric, [log])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    figures = ", ".join(f"{f.section}.{f.entry}.{f.key} {f.before:.4g} -> {f.after:.4g}"
                        for f in result.fitted)
    print(f"{len(log.rows)} rows: read + calibrate {wall:.2f} s wall, {cpu:.2f} s CPU;"
          f" {figures}")


if __name__ == "__main__":
    main()
