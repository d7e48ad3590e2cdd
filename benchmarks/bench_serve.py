"""Benchmark: a serving job (`topomodel serve`) on a ~1,000-accelerator design.

Run: python benchmarks/bench_serve.py [--repeat 3] [--cli 2]

Builds examples/dgx-h100-superpod.yaml (1,016 H100s, 127 DGX servers, rail-optimized
NDR fat-tree) once, then times, each repeat on a fresh copy of the fabric (no routing
view kept from the last one), ``serve`` of Llama 3 70B with 40 prefill and 80 decode
instances of TP 8 (960 accelerators): the prefill's collectives, the decode step's
fixed point over the batch, and the hand-offs of every busy prefill replica routed at
once. Wall (``time.perf_counter``) beside CPU (``time.process_time``). ``--cli`` times
the whole `topomodel serve` process N times (wall, and CPU from the child's rusage).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = "examples/dgx-h100-superpod.yaml"
JOB = {"prefill_instances": 40, "decode_instances": 80}


def measure(repeat: int) -> dict[str, object]:
    """Wall and CPU seconds of each repeat of the serving job, in this process."""
    from topomodel.analysis.serving.serve import serve
    from topomodel.analysis.serving.serve_assumptions import ServeAssumptions
    from topomodel.fabric.build import build_fabric
    from topomodel.inputs.design import load_design
    from topomodel.inputs.parts import Model

    start = time.perf_counter()
    fabric = build_fabric(*load_design(ROOT / DESIGN))
    built = time.perf_counter() - start
    model = fabric.catalog.get("llama3-70b", Model)
    walls, cpus = [], []
    result = None
    for _ in range(repeat):
        copy = replace(fabric)
        w, c = time.perf_counter(), time.process_time()
        result = serve(copy, model, serving=ServeAssumptions(**JOB))
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    assert result is not None
    return {"accelerators": fabric.accelerator_count, "build_s": built,
            "serve_wall_s": walls, "serve_cpu_s": cpus,
            "pools": result.accelerators, "rate_rps": result.rate_rps,
            "decode_batch": result.decode.batch, "handoffs": result.kv.concurrent,
            "ttft_s": result.ttft_s, "tpot_s": result.tpot_s}


def cli(times: int) -> list[tuple[float, float]]:
    """(wall, CPU) of whole `topomodel serve` processes."""
    out = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in JOB.items()]
    for _ in range(times):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "topomodel", "serve", DESIGN, "--model",
                        "llama3-70b", *flags, "--format", "json"], cwd=ROOT, env=env,
                       check=True, capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out.append((wall, cpu))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cli", type=int, default=0, metavar="N")
    args = parser.parse_args()
    got = measure(args.repeat)
    got["serve_wall_median_s"] = statistics.median(got["serve_wall_s"])  # type: ignore[arg-type]
    if args.cli:
        got["cli_wall_cpu_s"] = cli(args.cli)
    print(json.dumps(got, indent=2))


if __name__ == "__main__":
    main()
