"""Benchmark: every verb of the CLI on the ~100k-accelerator examples, one process each.

Run: python benchmarks/bench_verbs.py [--only step-sensitivity compare] [--example 8gpu]
     [--before TREE]   # also the package of another checkout, verb by verb
     [--no-goodput]    # step and step --sensitivity without the goodput section
     [--worked-example]  # docs/worked-example.md's job (DeepSeek-V3) instead of Llama's
     [--runs N]        # each verb N times (with --before: alternating the trees)

Each line runs ``topomodel VERB ...`` as a child process (interpreter start-up, imports,
loading the design, building the fabric and the verb's own work included) and prints
its wall time, the child's CPU time (user + system, every worker process it waited for
included) and its peak resident memory (the largest of its processes). The job is
Llama 3 70B at TP 8 x PP 4 (DP fills the fabric) on the three ~100k examples:
``examples/100k-8gpu-3tier.yaml`` (98,304 B200 in 8-GPU servers),
``examples/100k-8npu-servers.yaml`` and ``examples/100k-4k-supernodes.yaml`` (98,304
Ascend-class NPUs in servers or in supernodes of 4,096). The load average is printed
first: other jobs on the cores inflate both figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "8gpu": "examples/100k-8gpu-3tier.yaml",
    "8npu": "examples/100k-8npu-servers.yaml",
    "supernodes": "examples/100k-4k-supernodes.yaml",
}
JOB = ["--model", "llama3-70b", "--tp", "8", "--pp", "4"]
COMPARE = ["--compute-efficiency", "0.7"]
"""The NPUs have no measured GEMM rates: the NPU examples, and compare, run at a flat
70 % (as docs/worked-example.md does)."""
WORKED_EXAMPLE = ["--model", "deepseek-v3", "--pp", "16", "--ep", "64", "--global-batch",
                  "49152", "--compute-efficiency", "0.7", "--zero", "0"]
"""docs/worked-example.md's job (its ``compare``), for every verb with ``--worked-example``
(issue #42 item 3: ``goodput`` and ``review`` on each 100k example, and ``compare``)."""


def verbs(design: str, other: str, out: str, *, goodput: bool = True,
          worked: bool = False) -> dict[str, list[str]]:
    """Each benchmarked verb's arguments on ``design`` (``other``: compare's second
    design; ``out``: a scratch folder; ``goodput=False``: step and step --sensitivity
    with ``--no-goodput``; ``worked``: :data:`WORKED_EXAMPLE`'s job for every verb)."""
    job = [*JOB, *COMPARE] if "npu" in design or "supernodes" in design else JOB
    if worked:
        job = WORKED_EXAMPLE
    step = ["step", design, *job] + ([] if goodput else ["--no-goodput"])
    return {
        "build": ["build", design],
        "route": ["route", design, "--collective", "allreduce", "--size", "1GiB"],
        "step": step,
        "step-sensitivity": [*step, "--sensitivity"],
        "compare": ["compare", design, other, *(job if worked else [*JOB, *COMPARE])],
        "goodput": ["goodput", design, *job],
        "review": ["review", design, *job, "-o", f"{out}/review"],
        "draw-route": ["draw", design, "-o", f"{out}/draw.png", "--route", "allreduce",
                       "--size", "1GiB"],
    }


def run(arguments: list[str], tree: str | None = None
        ) -> tuple[float, tuple[float, float], float, int]:
    """(wall s, (user, system) CPU s, peak RSS MiB, exit status) of one ``topomodel``
    process (of the package in ``tree``, another checkout, if given)."""
    env = {**os.environ, "PYTHONPATH": tree} if tree else None
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errors:
        # ``-m`` puts the working directory first on the path: the other tree's package
        # is imported only when the child runs in it (it has the same examples)
        child = subprocess.Popen([sys.executable, "-m", "topomodel", *arguments],
                                 cwd=tree or ROOT,
                                 stdout=subprocess.DEVNULL, stderr=errors, text=True,
                                 env=env)
        _, wait_status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(wait_status)
        if child.returncode:
            errors.seek(0)
            print(errors.read().strip().splitlines()[-1], file=sys.stderr)
    # the child's own usage and that of the workers it waited for
    return (wall, (usage.ru_utime, usage.ru_stime), usage.ru_maxrss / 1024,
            child.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", nargs="+", choices=sorted(EXAMPLES), default=["8gpu"])
    parser.add_argument("--only", nargs="+", help="verbs to run (default: all)")
    parser.add_argument("--no-goodput", action="store_true",
                        help="step and step --sensitivity without the goodput section")
    parser.add_argument("--before", metavar="TREE",
                        help="also time the package of this checkout (e.g. an export of the"
                        " commit before a change), each verb right before this tree's")
    parser.add_argument("--worked-example", action="store_true",
                        help="docs/worked-example.md's DeepSeek-V3 job for every verb")
    parser.add_argument("--runs", type=int, default=1, metavar="N",
                        help="run each verb N times (with --before, alternating the trees)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    trees = [(args.before, "before "), (None, "")] if args.before else [(None, "")]
    print("| example | verb | wall s | CPU s (user + sys) | peak RSS MiB | load |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as out:
        for name in args.example:
            other = EXAMPLES["8npu" if name != "8npu" else "supernodes"]
            for verb, arguments in verbs(EXAMPLES[name], other, out,
                                         goodput=not args.no_goodput,
                                         worked=args.worked_example).items():
                if args.only and verb not in args.only:
                    continue
                for tree, label in [pair for _ in range(args.runs) for pair in trees]:
                    wall, (user, system), rss, status = run(arguments, tree)
                    failed = f" (exit {status})" if status else ""
                    cpu = f"{user + system:.1f} ({user:.1f} + {system:.1f})"
                    print(f"| {name} | {label}{verb}{failed} | {wall:.1f} | {cpu} |"
                          f" {rss:.0f} | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
