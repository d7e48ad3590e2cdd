"""What the verbs share: a usage error, the output checks, the size and collective
options, the catalog options, the job (design, fabric with its what-ifs, model, layout,
assumptions) a step-shaped verb reads from its options, and the goodput part of a step.
Each verb module imports these; none imports another verb."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from topomodel.analysis.options import StepInputs
from topomodel.cli.options import goodput_from_args, inputs_from_args
from topomodel.errors import TopomodelError
from topomodel.traffic.layout import Layout

if TYPE_CHECKING:  # the step model (numpy, pandas, scipy) loads when a verb runs
    from topomodel.analysis.assumptions import StepAssumptions
    from topomodel.analysis.training.step import StepResult
    from topomodel.fabric.tables import Fabric
    from topomodel.inputs.parts import Model


def usage(message: str) -> TopomodelError:
    from topomodel.errors import UsageError

    return UsageError(message)


def writable(path: str) -> None:
    """Refuse, before any work, an output file path that is a folder or whose folder
    cannot be made or written (nothing is made here: the write makes the folders, and
    removes them again if it fails)."""
    from pathlib import Path

    from topomodel.files import nearest_existing

    target = Path(path)
    if target.is_dir():
        raise usage(f"{path}: is a folder; give a file name")
    folder = nearest_existing(target.parent)
    if not folder.is_dir():
        raise usage(f"{path}: cannot write there: {folder} is not a folder")
    if not os.access(folder, os.W_OK):
        raise usage(f"{path}: cannot write there")


def size_option(text: str, flag: str = "--size") -> tuple[float, str | None]:
    """A message size from the command line, bytes, and a warning when it was given in
    bits (``'1 Gib'`` is a gibibit, 134 MB, not a GiB); a collective's size is bytes.

    Examples
    --------
    >>> size_option("1 GiB")
    (1073741824.0, None)
    >>> size_option("8 Gb")[1]
    "--size '8 Gb' is in bits (1 GB); sizes are usually bytes: did you mean '8 GB'?"
    """
    from topomodel.errors import UnitError
    from topomodel.inputs.units import format_size, parse, unit_name

    try:
        size = parse(text, "size")
    except UnitError as exc:
        raise usage(f"{flag}: {exc}") from None
    unit = unit_name(text)
    if "bit" not in unit:
        return size, None
    number, _, written = text.strip().partition(" ")
    meant = f"{number} {written.strip()[:-1]}B" if written.strip().endswith("b") else (
        "a size in bytes")
    return size, (f"{flag} {text!r} is in bits ({format_size(size)}); sizes are usually"
                  f" bytes: did you mean {meant!r}?")


def collective_name(name: str) -> str:
    """A collective's name as the library spells it (``all-reduce`` -> ``allreduce``)."""
    return name.lower().replace("_", "").replace("-", "")


@dataclass(frozen=True)
class Job:
    """A model with its layout and assumptions on a design's fabric (what-ifs applied)."""

    fabric: Fabric
    model: Model
    layout: Layout
    assumptions: StepAssumptions
    inputs: StepInputs

    def step(self) -> StepResult:
        """The training step of this job."""
        from topomodel.analysis.training.step import step_time

        return step_time(self.fabric, self.model, self.layout, self.assumptions,
                         routing=self.inputs.routing, seed=self.inputs.seed)


def fabric_with_whatifs(design_file: str, catalogs: Sequence[str], inputs: StepInputs,
                        fail_links: Sequence[str] = (), *,
                        catalog_dirs: Sequence[str] = ()) -> Fabric:
    """The fabric of a design with the what-ifs of ``inputs`` applied (failed parts,
    failed domains, a faster scale-out)."""
    from topomodel.fabric.build import build_fabric
    from topomodel.fabric.failures import with_failures
    from topomodel.inputs.design import load_design

    design, catalog = load_design(design_file, extra_catalogs=catalogs,
                                  catalog_dirs=catalog_dirs)
    fabric = build_fabric(design, catalog)
    if inputs.fail or fail_links:
        fabric = with_failures(fabric, inputs.fail, fail_links,
                               labels=("--fail", "--fail-link"))
    if inputs.fail_domain:
        from topomodel.fabric.domains import with_domains_failed

        fabric = with_domains_failed(fabric, inputs.fail_domain)
    if inputs.scaleout_factor != 1.0:
        from topomodel.analysis.training.studies import scale_scaleout  # the step model

        fabric = scale_scaleout(fabric, inputs.scaleout_factor)
    return fabric


def job_from_args(args: argparse.Namespace, design_file: str) -> Job:
    """The job the step options describe, on ``design_file``."""
    from topomodel.analysis.training.studies import fill_dp
    from topomodel.inputs.parts import Model

    inputs = inputs_from_args(args)
    fabric = fabric_with_whatifs(design_file, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    model = fabric.catalog.get(str(inputs.model), Model)
    layout = fill_dp(fabric.accelerator_count, inputs.layout) if inputs.fill_dp else (
        inputs.layout)
    check_global_batch(layout)
    return Job(fabric, model, layout, inputs.assumptions, inputs)


def check_global_batch(layout: Layout) -> None:
    """Refuse a ``--global-batch`` that is not whole microbatches on every DP rank (the
    step would run fewer sequences than the flag says).

    Examples
    --------
    >>> check_global_batch(Layout(dp=64, global_batch=128))
    >>> check_global_batch(Layout(dp=64, global_batch=100))
    Traceback (most recent call last):
    ...
    topomodel.errors.UsageError: --global-batch 100 is not a multiple of DP x micro-batch \
= 64 x 1 = 64: the step would run 64 sequences; give a multiple of 64 (e.g. 64 or 128)
    """
    from topomodel.errors import UsageError

    per_step = layout.dp * layout.micro_batch
    if not layout.global_batch or layout.global_batch % per_step == 0:
        return
    runs = layout.global_batch // per_step * per_step
    near = " or ".join(str(n) for n in (runs, runs + per_step) if n)
    raise UsageError(f"--global-batch {layout.global_batch} is not a multiple of DP x"
                     f" micro-batch = {layout.dp} x {layout.micro_batch} = {per_step}: the"
                     f" step would run {runs} sequences; give a multiple of {per_step}"
                     f" (e.g. {near})")


def goodput_part(args: argparse.Namespace, job: Job, result: StepResult | None, *,
                 keep_routes: bool = True) -> tuple[StepResult, list[Any], dict[str, Any]]:
    """The step (``result``, or run beside the degraded steps where None) and its
    goodput tables and JSON, from the goodput options: the one path of step, goodput,
    compare and review (:func:`~topomodel.report.goodput.goodput_section`), so the four
    print the same numbers for one job. ``keep_routes`` False: a verb that times
    nothing more of the step's traffic on the job's fabric lets the degraded steps run
    without the step's routes (less memory; the same figures)."""
    from topomodel.report.goodput import goodput_section

    return goodput_section(job.fabric, job.model, job.layout, job.assumptions, result,
                           goodput_from_args(args), routing=job.inputs.routing,
                           seed=job.inputs.seed, workers=getattr(args, "workers", None),
                           keep_routes=keep_routes)


def cost_part(job: Job, tokens_per_s: float, *, goodput: bool) -> tuple[Any, list[str]]:
    """The job's cost per token (:class:`~topomodel.analysis.cost.TokenCost`) as a
    table, its JSON and its warnings: the cluster's capex and power from the bill of
    materials, the job's share of it, over ``tokens_per_s`` (goodput tokens/s where
    ``goodput``)."""
    import dataclasses

    from topomodel.analysis.bom import bill_of_materials, power_summary
    from topomodel.analysis.cost import cost_warnings, token_cost
    from topomodel.report.output import Table
    from topomodel.report.power import cost_rows

    fabric = job.fabric
    power = power_summary(bill_of_materials(fabric), fabric.accelerator_count)
    share = job.layout.world / fabric.accelerator_count
    cost = token_cost(power.capex_USD or 0.0, power.total_W, tokens_per_s,
                      job.inputs.cost, share=share, goodput=goodput)
    data = {**dataclasses.asdict(cost), "text": cost.text,
            "capex_complete": power.capex_complete, "unpriced": list(power.unpriced)}
    warnings = cost_warnings(power)
    record = {k: v for k, v in data.items() if not isinstance(v, dict | list)}
    return (Table("Cost per token", cost_rows(data), [record], name="cost"), data), warnings


def folder_arg(text: str) -> str:
    """An existing folder (``--catalog-dir``)."""
    import os

    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder" if os.path.exists(text)
                                         else f"no folder {text!r}")
    return text


def add_catalog_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", action="append", default=[], metavar="FILE",
                        help="add a catalog file (repeatable; its entries may override"
                        " built-in ones)")
    parser.add_argument("--catalog-dir", action="append", default=[], metavar="DIR",
                        type=folder_arg,
                        help="a folder the catalogs named in a design or sweep file (and"
                        " a sweep file's design) may be in, besides that file's own folder"
                        " tree (repeatable)")


FLAG_OF_PARAMETER = {"headroom": "--memory-headroom"}
"""Parameters whose flag is not ``--`` and the name with dashes."""


def flag_of(parameter: str) -> str:
    """The command-line flag that sets a library function's ``parameter``: the one map
    from a :class:`~topomodel.errors.ParameterError`'s parameter to what a user types.

    Examples
    --------
    >>> flag_of("target_comm_share"), flag_of("headroom")
    ('--target-comm-share', '--memory-headroom')
    """
    return FLAG_OF_PARAMETER.get(parameter, "--" + parameter.replace("_", "-"))


class Stages:
    """Staged progress lines on stderr for a long verb: ``compare: a.yaml: step ...``
    when a stage starts and its seconds when it ends; silent when stderr is not a
    terminal or with ``--no-progress`` (``show=False``), so pipes and logs stay clean.

    Examples
    --------
    >>> stages = Stages("compare", show=False)
    >>> with stages("a.yaml: step"):
    ...     pass
    """

    def __init__(self, verb: str, *, show: bool | None = None) -> None:
        import sys

        self.verb = verb
        self.show = sys.stderr.isatty() if show is None else show

    @classmethod
    def of(cls, args: argparse.Namespace, verb: str) -> Stages:
        """The stages of ``verb``, quiet with ``--no-progress``."""
        return cls(verb, show=False if getattr(args, "no_progress", False) else None)

    def __call__(self, stage: str) -> Any:
        import contextlib
        import sys
        import time

        @contextlib.contextmanager
        def timed() -> Any:
            if not self.show:
                yield
                return
            print(f"{self.verb}: {stage} ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            yield
            print(f"{self.verb}: {stage}: done in {time.perf_counter() - start:.1f} s",
                  file=sys.stderr, flush=True)

        return timed()


def measured_figures(fabric: Any, time_model: Any) -> str:
    """The figures a verb's model reads that a calibration overlay set (``as measured
    (FILE)``), one clause each; empty when none."""
    from topomodel.analysis.collectives.linkrates import (
        efficiency_sources,
        launch_latency_source,
    )

    figures = [(f"{tier} efficiency {value:.3g}", why) for tier, (value, why)
               in efficiency_sources(fabric, time_model).items()]
    if (launch := launch_latency_source(fabric)) is not None:
        figures.append((f"launch latency {launch[0] * 1e6:.3g} us", launch[1]))
    return "; ".join(f"{what}, {why}" for what, why in figures
                     if why.startswith("as measured"))
def serve_job(args: argparse.Namespace, design_file: str) -> tuple[str, Any]:
    """(design name, :class:`~topomodel.analysis.serving.serve.ServeResult`) of the
    serving job the flags describe on ``design_file`` (``serve``, ``compare --serve``)."""
    from topomodel.analysis.options import COST_OPTIONS
    from topomodel.analysis.serving.serve import serve
    from topomodel.cli.options import FABRIC_OPTIONS, SERVE_JOB, SERVE_KEYS, inputs_from_args
    from topomodel.inputs.measured.requests import read_mooncake_trace
    from topomodel.inputs.parts import Model

    inputs = inputs_from_args(args, SERVE_JOB + SERVE_KEYS + FABRIC_OPTIONS + COST_OPTIONS)
    fabric = fabric_with_whatifs(design_file, args.catalog, inputs,
                                 catalog_dirs=args.catalog_dir)
    model = fabric.catalog.get(str(inputs.model), Model)
    trace = read_mooncake_trace(args.trace) if args.trace else None
    return fabric.design.name or design_file, serve(
        fabric, model, serving=inputs.serve, decode=inputs.decode,
        assumptions=inputs.assumptions, trace=trace, cost=inputs.cost,
        routing=inputs.routing, seed=inputs.seed)
