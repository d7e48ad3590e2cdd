"""Benchmark: every export of ``topomodel export`` on a ~100k-accelerator design.

Run: python benchmarks/bench_exports.py [--example examples/100k-8gpu-3tier.yaml]
     [--only infragraph slurm]

Each export runs in its own child process (so its peak memory is its own): load the
design, build the fabric (timed apart), then write the export into a scratch folder.
Printed per export: the export's CPU seconds (user + system, ``time.process_time``
around the export call alone) and wall seconds, the build's CPU seconds, the size of
what was written, and the child's peak resident memory (``ru_maxrss``: the whole
process, interpreter, numpy, pandas and the built fabric included). The Chakra trace
is of Llama 3 8B at TP 8 x PP 4 x DP 512 on the fabric's first 16,384 accelerators
(``MAX_TRACE_RANKS``: a trace has a file per rank). The load average is printed first:
other jobs on the cores inflate the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("graphml", "json", "csv", "parquet", "astra-sim", "calculon", "slurm",
           "slurm-block", "kueue", "infragraph", "chakra")
CHAKRA_JOB = {"tp": 8, "pp": 4, "dp": 512}
"""The traced job: 16,384 ranks, the most a trace may have (``MAX_TRACE_RANKS``)."""


def child(design: str, fmt: str, out: str) -> dict[str, float]:
    """Build ``design`` and write ``fmt`` under ``out``: seconds and bytes written."""
    from topomodel.errors import UsageError
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design

    start = time.process_time()
    loaded, catalog = load_design(design)
    fabric = build_fabric(loaded, catalog)
    built = time.process_time() - start
    target = Path(out) / fmt
    start, wall = time.process_time(), time.perf_counter()
    try:
        if fmt == "chakra":
            from topomodel.export.chakra import chakra_trace, write_chakra
            from topomodel.inputs.parts import Model
            from topomodel.traffic.layout import Layout

            model = catalog.get("llama3-8b", Model)
            files = write_chakra(chakra_trace(fabric, model, Layout(**CHAKRA_JOB)), target)
        else:
            from topomodel.export import export_fabric

            files = export_fabric(fabric, fmt, target)
    except UsageError as error:
        return {"build_cpu_s": built, "refused": str(error)}  # type: ignore[dict-item]
    return {"build_cpu_s": built, "cpu_s": time.process_time() - start,
            "wall_s": time.perf_counter() - wall,
            "bytes": sum(f.stat().st_size for f in files), "files": len(files)}


def run(design: str, fmt: str) -> dict[str, float]:
    """One export in a child process, with its peak RSS (MiB)."""
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile("w+") as result:
        proc = subprocess.Popen([sys.executable, __file__, "--child", fmt, "--example",
                                 design, "--out", out], cwd=ROOT, stdout=result)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status):
            return {"failed": True}  # type: ignore[dict-item]
        result.seek(0)
        figures: dict[str, float] = json.loads(result.read())
    figures["peak_MiB"] = usage.ru_maxrss / 1024
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--example", default="examples/100k-8gpu-3tier.yaml")
    parser.add_argument("--only", nargs="*", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--child", choices=FORMATS)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.example, args.child, args.out)))
        return
    print(f"{args.example}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'export':<12} {'CPU s':>8} {'wall s':>8} {'build CPU s':>12} {'MB':>9}"
          f" {'files':>6} {'peak MiB':>9}")
    for fmt in args.only:
        r = run(args.example, fmt)
        if "refused" in r or "failed" in r:
            print(f"{fmt:<12} {r.get('refused', 'failed')}")
            continue
        print(f"{fmt:<12} {r['cpu_s']:8.2f} {r['wall_s']:8.2f} {r['build_cpu_s']:12.2f}"
              f" {r['bytes'] / 1e6:9.1f} {int(r['files']):6d} {r['peak_MiB']:9.0f}",
              flush=True)


if __name__ == "__main__":
    main()
