"""Benchmark: the command line's start-up and ``advise`` on one rack, whole processes.

Run: python benchmarks/bench_startup.py [--runs 5] [--before TREE ...] [--only route units]

Each case runs ``python -m topomodel ...`` as a child process of the package in this
checkout and in each ``--before`` checkout (another worktree), alternating trees run by
run so load on the shared cores falls on both alike, and prints the child's CPU time
(user + system) as min and median of ``--runs`` processes. Bytecode is written and one
warm-up run fills the unit store (``TOPOMODEL_CACHE_DIR``, a scratch folder per tree),
as on a user's machine after the first command. A case over ``--cap`` seconds is killed
and reported as "> cap". Cases:

- ``route``: a 1 GiB AllReduce (auto) on 4,096 B200 GPUs (512 HGX B200 servers,
  ConnectX-8, Q3400 fat-tree: bench_build.py's design);
- ``help`` and ``units``: ``topomodel --help``, ``topomodel units "900 GB/s" --to Gb/s``;
- ``advise``: Llama 3 70B at TP 8 on one GB200 NVL72 rack (72 GPUs, its rail-optimized
  QM9700 fat-tree of the gb200-nvl72-cluster example).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROUTE_DESIGN = ("name: benchmark 4096 GPUs\nsystem: hgx-b200\nsystems: 512\nscaleout:\n"
                "  kind: fat_tree\n  nic: connectx-8\n  switch: q3400\n")
RACK_DESIGN = ("name: GB200 NVL72, 1 rack\nsystem: gb200-nvl72\nsystems: 1\nscaleout:\n"
               "  kind: fat_tree\n  switch: qm9700\n  rail_optimized: true\n")


def cases(scratch: Path) -> dict[str, list[str]]:
    """Each case's arguments (designs written to ``scratch``)."""
    (scratch / "b4096.yaml").write_text(ROUTE_DESIGN)
    (scratch / "nvl72.yaml").write_text(RACK_DESIGN)
    return {
        "route": ["route", str(scratch / "b4096.yaml"), "--collective", "allreduce",
                  "--size", "1GiB"],
        "help": ["--help"],
        "units": ["units", "900 GB/s", "--to", "Gb/s"],
        "advise": ["advise", str(scratch / "nvl72.yaml"), "--model", "llama3-70b",
                   "--tp", "8"],
    }


def cpu_s(arguments: list[str], tree: Path, store: Path, cap_s: float) -> float | None:
    """CPU s (user + system) of one child process, None when killed at ``cap_s``."""
    env = {**os.environ, "PYTHONPATH": str(tree), "TOPOMODEL_CACHE_DIR": str(store)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    child = subprocess.Popen([sys.executable, "-m", "topomodel", *arguments], cwd=tree,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + cap_s
    while True:
        pid, _, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            child.kill()
            os.wait4(child.pid, 0)
            return None
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", nargs="*", default=[], help="other checkouts")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--cap", type=float, default=120.0, help="seconds per process")
    args = parser.parse_args()
    trees = [ROOT, *(Path(t).resolve() for t in args.before)]
    print(f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        for name, arguments in cases(scratch).items():
            if args.only and name not in args.only:
                continue
            times: dict[Path, list[float | None]] = {tree: [] for tree in trees}
            for tree in trees:  # warm-up: bytecode and the unit store
                cpu_s(arguments, tree, scratch / f"store-{trees.index(tree)}", args.cap)
            for _ in range(args.runs):
                for tree in trees:
                    times[tree].append(cpu_s(arguments, tree, scratch
                                             / f"store-{trees.index(tree)}", args.cap))
            for tree in trees:
                done = [t for t in times[tree] if t is not None]
                text = (f"> {args.cap:g} s (killed)" if len(done) < len(times[tree]) else
                        f"min {min(done):.2f}  median {statistics.median(done):.2f}")
                print(f"{name:7} {tree.name:22} CPU s {text}")


if __name__ == "__main__":
    main()
