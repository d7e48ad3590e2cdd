"""Benchmark: the goodput model's component lines on the three ~100k examples.

Run: python benchmarks/bench_lines.py [--example supernodes 8npu 8gpu]
     [--before TREE]   # also another checkout's goodput.py, alternating, same lines

``component_lines`` runs serially in the parent of every verb with goodput (step,
goodput, compare, review), before the worker pools fork, on the whole fabric (the job
of ``bench_verbs.py`` fills it). Each fabric is built once; the lines are timed
(``time.process_time``, best of ``--repeat``) with the rest of the package as it is.
With ``--before``, that tree's ``topomodel/analysis/reliability/goodput.py`` is loaded as a module
of its own and timed in turn with this tree's, and their lines must be equal, field by
field.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from dataclasses import astuple
from pathlib import Path
from types import ModuleType
from typing import Any

from topomodel.analysis.reliability import goodput
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "supernodes": "examples/100k-4k-supernodes.yaml",
    "8npu": "examples/100k-8npu-servers.yaml",
    "8gpu": "examples/100k-8gpu-3tier.yaml",
}


def _other_goodput(tree: str) -> ModuleType:
    """``tree``'s goodput module, loaded beside this one (it imports the rest from here)."""
    path = Path(tree) / "topomodel" / "analysis" / "goodput.py"
    spec = importlib.util.spec_from_file_location("before_goodput", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no goodput module at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["before_goodput"] = module
    spec.loader.exec_module(module)
    return module


def _timed(module: ModuleType, fabric: Any, world: int) -> tuple[float, list[tuple[Any, ...]]]:
    start = time.process_time()
    lines = module.component_lines(fabric, world)
    return time.process_time() - start, [astuple(line) for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", nargs="+", choices=sorted(EXAMPLES),
                        default=list(EXAMPLES))
    parser.add_argument("--before", metavar="TREE", help="another checkout to time too")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    modules = [("before", _other_goodput(args.before))] if args.before else []
    modules.append(("this tree", goodput))
    for name in args.example:
        design, catalog = load_design(ROOT / EXAMPLES[name])
        fabric = build_fabric(design, catalog)
        world = fabric.accelerator_count
        best = {label: float("inf") for label, _ in modules}
        for _ in range(args.repeat):
            found = []
            for label, module in modules:
                seconds, lines = _timed(module, fabric, world)
                best[label] = min(best[label], seconds)
                found.append(lines)
            if any(lines != found[0] for lines in found):
                raise SystemExit(f"{name}: the lines differ")
        figures = ", ".join(f"{label} {seconds * 1e3:.0f} ms" for label, seconds in best.items())
        print(f"{name}: {len(fabric.links):,} link rows, {len(found[0])} lines; component_lines"
              f" CPU (best of {args.repeat}): {figures}", flush=True)


if __name__ == "__main__":
    main()
