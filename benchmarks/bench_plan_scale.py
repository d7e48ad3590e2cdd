"""Benchmark: ``topomodel plan`` with its default space on the 98k examples, whole
processes.

Run: python benchmarks/bench_plan_scale.py [--runs 3] [--before TREE ...] [--cap 600]
     [--only 8gpu-llama3-70b superpod-llama3-70b-at-128 ...] [--save DIR]

Each case runs ``python -m topomodel plan EXAMPLE --model M --no-progress`` (every
searched dimension at its default limits) as a child process of the package in this
checkout and in each ``--before`` checkout (another worktree), alternating trees run by
run so load on the shared cores falls on both alike, and prints the child's CPU time
(user + system) as min and median of ``--runs`` processes, with the best layout it
found. A child is stopped at ``--cap`` CPU seconds (``RLIMIT_CPU``, so a loaded machine
does not cut it short) and reported as "> cap". Cases: Llama 3 70B and DeepSeek-V3 on
the 98k HGX B200 servers (``examples/100k-8gpu-3tier.yaml``) and on the 4K supernodes
(``examples/100k-4k-supernodes.yaml``); and jobs smaller than the design
(``--accelerators N``, as the review's scorecard plans them): Llama 3 70B on 128 of the
DGX H100 SuperPOD's GPUs (``examples/dgx-h100-superpod.yaml``) and on 1,024 and 4,096 of
the 98k servers'.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {"8gpu": "examples/100k-8gpu-3tier.yaml",
            "supernodes": "examples/100k-4k-supernodes.yaml"}
MODELS = ("llama3-70b", "deepseek-v3")
NPU_EFFICIENCY = ["--compute-efficiency", "0.7"]
"""The Ascend 910C has no measured GEMM sweep in the catalog (the step refuses to guess
one): the supernodes' cases run at a flat 70 %, as docs/worked-example.md does."""
JOBS = {"superpod-llama3-70b-at-128": ("examples/dgx-h100-superpod.yaml", "llama3-70b", 128),
        "8gpu-llama3-70b-at-1024": (EXAMPLES["8gpu"], "llama3-70b", 1024),
        "8gpu-llama3-70b-at-4096": (EXAMPLES["8gpu"], "llama3-70b", 4096)}
"""Jobs on part of a design: (example, model, accelerators)."""


def run(arguments: list[str], tree: Path, cap_s: float, save: Path | None = None
        ) -> tuple[float | None, str]:
    """(CPU s of one child process or None when stopped at ``cap_s`` CPU seconds, how
    many steps it modelled and its best layout); ``save``: a file the child's JSON
    output is copied to (to compare trees' outputs after)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (int(cap_s), int(cap_s) + 5))

    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([sys.executable, "-m", "topomodel", *arguments], cwd=tree,
                                 env=env, stdout=out, stderr=subprocess.DEVNULL,
                                 preexec_fn=limit)
        _, status, usage = os.wait4(child.pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
        if os.waitstatus_to_exitcode(status):
            return None, ""
        out.seek(0)
        if save is not None:
            save.parent.mkdir(parents=True, exist_ok=True)
            save.write_text(out.read())
            out.seek(0)
        found = json.load(out)
        best = found["layouts"][0]
    return cpu, (f"{found['search']['evaluated']:,} steps modelled; TP {best['tp']}"
                 f" PP {best['pp']} DP {best['dp']} CP {best['cp']} EP"
                 f" {best['ep']} mb {best['micro_batch']} v {best['interleave']}"
                 f" {best['schedule']} {best['recompute']} ZeRO {best['zero']} SP"
                 f" {best['sequence_parallel']} {best['order']}: {best['step_time_s']!r} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", nargs="*", default=[], help="other checkouts")
    parser.add_argument("--only", nargs="*", default=None, help="e.g. 8gpu-llama3-70b")
    parser.add_argument("--cap", type=float, default=600.0, help="CPU seconds per process")
    parser.add_argument("--save", type=Path, default=None,
                        help="a folder for each run's JSON output (TREE-CASE-RUN.json)")
    args = parser.parse_args()
    trees = [ROOT, *(Path(t).resolve() for t in args.before)]
    print(f"load average {os.getloadavg()[0]:.2f}")
    cases = {f"{example}-{model}": (path, model, 0) for example, path in EXAMPLES.items()
             for model in MODELS} | JOBS
    for name, (path, model, accelerators) in cases.items():
        if args.only and name not in args.only:
            continue
        arguments = ["plan", path, "--model", model, "--no-progress", "--format", "json",
                     *(["--accelerators", str(accelerators)] if accelerators else []),
                     *(NPU_EFFICIENCY if path == EXAMPLES["supernodes"] else [])]
        times: dict[Path, list[float | None]] = {tree: [] for tree in trees}
        bests: dict[Path, set[str]] = {tree: set() for tree in trees}
        for i in range(args.runs):
            for tree in trees:
                cpu, best = run(arguments, tree, args.cap, args.save and (
                    args.save / f"{tree.name}-{name}-{i}.json"))
                times[tree].append(cpu)
                if best:
                    bests[tree].add(best)
        for tree in trees:
            done = [t for t in times[tree] if t is not None]
            text = (f"> {args.cap:g} CPU s (stopped)" if len(done) < len(times[tree])
                    else f"min {min(done):.1f}  median {statistics.median(done):.1f}")
            print(f"{name:28} {tree.name:16} CPU s {text};"
                  f" best {' | '.join(sorted(bests[tree])) or '-'}", flush=True)


if __name__ == "__main__":
    main()
