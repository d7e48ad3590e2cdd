"""Benchmark: calibrate from a 1,000-row nccl-tests log.

Run: python benchmarks/bench_calibrate.py [--rows 1000]

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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    fabric = build_fabric(*load_design(ROOT / "examples" / "hgx-h100-server.yaml"))
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
