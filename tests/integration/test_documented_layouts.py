"""The jobs the documentation and the shipped sweeps run fit in memory, or say why not
(#15 item 9): every ``topomodel step|review|goodput|compare|scale examples/...`` command
in README.md, docs/ and the example files, and every sweep's layouts, go through the
step model's memory check."""

import re
import shlex
from pathlib import Path

import pytest
import yaml

from topomodel.analysis.options import option
from topomodel.analysis.training.step import layout_memory
from topomodel.cli.parser import build_parser
from topomodel.cli.shared import job_from_args

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"topomodel (step|review|goodput|compare|scale) (examples/\S+\.yaml.*)")
NOT_STEP_FLAGS = {"-o": 1, "--output": 1, "--counts": 1, "--plot": 1, "--size": 1,
                  "--target-comm-share": 1, "--sensitivity": 0}
"""Flags of the documented verbs that step does not take, with their value counts."""
LAYOUT_FREE = ("design.", "efficiency.", "scaleout_factor", "routing", "seed", "fail")
"""Sweep settings that do not change a job's memory."""


def documented_jobs():
    """(where, design, step flags) of every documented command with a model."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "examples").glob("*.yaml"))]
    for path in files:
        text = path.read_text().replace("\\\n", " ")
        for number, line in enumerate(text.splitlines(), 1):
            match = COMMAND.search(line)
            if not match:
                continue
            words = shlex.split(match.group(2).split("`")[0])
            if "--model" not in words:
                continue
            designs = [w for w in words if w.startswith("examples/") and w.endswith(".yaml")]
            flags, skip = [], 0
            for word in words:
                if skip or word in designs:
                    skip = max(0, skip - 1)
                    continue
                if word in NOT_STEP_FLAGS:
                    skip = NOT_STEP_FLAGS[word]
                    continue
                flags.append(word)
            for design in designs:
                yield f"{path.relative_to(ROOT)}:{number}", design, flags


JOBS = sorted({(where, design, tuple(flags)) for where, design, flags in documented_jobs()})


def _fits(design, flags):
    """(fits, largest stage's bytes) of ``topomodel step DESIGN FLAGS``: the flags parsed
    by the step command's parser, the job made as the step command makes it, and the
    memory the step model finds for it (:func:`layout_memory`, what ``step`` reports as
    ``fits`` and ``stage_memory_bytes``, with the same checks of the layout's sizes and
    schedule), without routing and timing the step: memory is what is checked here."""
    args = build_parser().parse_args(["step", design, *flags, "--no-goodput"])
    job = job_from_args(args, args.design)
    held = layout_memory(job.fabric, job.model, job.layout, job.assumptions)
    return held.fits(), float(max(held.stages.total))


def test_the_documentation_runs_jobs():
    assert len(JOBS) >= 8  # README, review, goodput, validation and the worked example


@pytest.mark.parametrize(("where", "design", "flags"), JOBS,
                         ids=[f"{w} {Path(d).stem}" for w, d, _ in JOBS])
def test_documented_layout_fits_memory(where, design, flags):
    fits, needed = _fits(str(ROOT / design), list(flags))
    assert fits, f"{where}: {design} {' '.join(flags)} needs {needed / 1e9:.1f} GB"


@pytest.mark.parametrize("sweep", sorted((ROOT / "examples/sweeps").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_sweep_layouts_fit_memory_or_say_why_not(sweep):
    text = sweep.read_text()
    data = yaml.safe_load(text)
    if data.get("job") == "serve":  # serve refuses a pool that does not fit, itself
        return
    blocks = data.get("parameters") or [{}]
    blocks = blocks if isinstance(blocks, list) else [blocks]
    varied = {k for b in blocks for k in b if k != "zip"} | {
        k for b in blocks for group in ([b["zip"]] if isinstance(b.get("zip"), dict)
                                        else b.get("zip", [])) for k in group}
    if all(k.startswith(LAYOUT_FREE) for k in varied):  # one layout: it must fit
        flags = []
        for key, value in data.get("fixed", {}).items():
            if not key.startswith(LAYOUT_FREE):
                flags += [option(key).flag, str(value)]
        fits, needed = _fits(str(sweep.parent / data["design"]), flags)
        assert fits, f"{sweep.name}: {' '.join(flags)} needs {needed / 1e9:.1f} GB"
        return
    # layouts vary: a memory constraint marks those that do not fit, and a comment says so
    constraints = [c for c in data.get("constraints", [])
                   if c.split()[0] in ("fits", "memory_bytes")]
    assert constraints, f"{sweep.name}: varied layouts without a memory constraint"
    line = next(ln for ln in text.splitlines() if constraints[0] in ln)
    assert "#" in line, f"{sweep.name}: say in a comment why the memory constraint is there"
