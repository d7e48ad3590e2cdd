"""What-ifs of a job's goodput: the same job with one thing changed (optical modules of
another form, spares, checkpoint bandwidth, restart time), re-counted from its
:class:`~topomodel.analysis.reliability.goodput.GoodputResult` without re-running any step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from topomodel.analysis.reliability.goodput import (
    MODULE_FORMS,
    ComponentLine,
    GoodputAssumptions,
    GoodputResult,
    failure_rate,
    goodput,
)
from topomodel.analysis.reliability.serviceability import ON_PACKAGE
from topomodel.inputs.catalog import Catalog
from topomodel.inputs.parts import Optic
from topomodel.inputs.reliability import FailureRate
from topomodel.vocabulary import FAT_TREE_TIERS


def with_optic_form(lines: Sequence[ComponentLine], catalog: Catalog,
                    form: str) -> list[ComponentLine]:
    """What-if: every optical link re-rated as modules of ``form`` (e.g. ``lpo``,
    ``cpo``); an AOC counts as the two modules it holds; copper keeps its rate. A
    co-packaged form (:data:`~topomodel.analysis.reliability.serviceability.ON_PACKAGE`)
    on a scale-out link fails as the part that holds it: each link end becomes a
    failure of its switch (or NIC) at the CPO's rate, with that part's effect (a
    single-homed leaf stops the job, a spine degrades it), as
    :func:`on_package_lines` says."""
    entry = failure_rate(catalog, "optic", form)
    out: list[ComponentLine] = []
    for ln in lines:
        built = catalog.get(ln.model, Optic).form if ln.component == "optic" else ""
        if built not in (*MODULE_FORMS, "aoc"):
            out.append(ln)
            continue
        ends = on_package_lines(ln, lines, entry, per_end=ln.count if built == "aoc"
                                else ln.count // 2) if form in ON_PACKAGE else []
        out += ends or [replace(ln, rate_per_s=entry.rate_per_s * (2 if built == "aoc" else 1),
                                rate_entry=entry.id, provenance=entry.provenance)]
    return out


def on_package_lines(line: ComponentLine, lines: Sequence[ComponentLine],
                     entry: FailureRate, *, per_end: int) -> list[ComponentLine]:
    """The two ends of a scale-out link line (``leaf link``: the NIC and the leaf;
    ``spine link``: the leaf and the spine; ...) as failures of the parts that hold
    them: each end ``per_end`` parts at ``entry``'s rate, with the tier, effect and
    representative of that part's own line in ``lines``. Empty when the line is not a
    scale-out link or a holder has no line (then it is only re-rated)."""
    base = line.tier.removesuffix(" link")
    if base == line.tier or base not in FAT_TREE_TIERS:
        return []
    index = FAT_TREE_TIERS.index(base)
    holders = []
    for end in ("nic" if index == 0 else FAT_TREE_TIERS[index - 1], base):
        holder = next((ln for ln in lines if (ln.component, ln.tier) == (
            ("nic", "system") if end == "nic" else ("switch", end))), None)
        if holder is None:
            return []
        holders.append(holder)
    return [replace(h, component="optic", count=per_end, rate_per_s=entry.rate_per_s,
                    rate_entry=entry.id, provenance=entry.provenance,
                    class_entry=f"{entry.id}: takes its {h.component} ({h.class_entry})")
            for h in holders]


def what_ifs(result: GoodputResult, catalog: Catalog,
             assumptions: GoodputAssumptions) -> list[tuple[str, GoodputResult]]:
    """The same job with one thing changed: optics, spares, checkpoint bandwidth."""
    kwargs: dict[str, Any] = {
        "tokens_per_s": result.tokens_per_s,
        "accelerators": sum(ln.count for ln in result.lines if ln.component == "accelerator"),
        "accelerators_per_system": result.accelerators_per_system,
        "parameters": result.checkpoint_bytes / assumptions.checkpoint_bytes_per_param,
        "degraded_loss": result.degraded_loss, "degraded_routed": result.degraded_routed}
    # the job's own checkpoint, spares and storage (the defaults as the job had them)
    fixed = replace(assumptions, checkpoint_bytes=result.checkpoint_bytes,
                    spare_systems=result.spare_systems, storage_Bps=result.storage_Bps)
    cases: list[tuple[str, list[ComponentLine], GoodputAssumptions]] = [
        ("as designed", list(result.lines), fixed)]
    if any(ln.component == "optic" for ln in result.lines):
        for form in ("lpo", "cpo"):
            cases.append((f"optical modules as {form.upper()}",
                          with_optic_form(result.lines, catalog, form), fixed))
    cases += [("no spare systems", list(result.lines), replace(fixed, spare_systems=0)),
              ("twice the spare systems" if result.spare_systems else "one spare system",
               list(result.lines),
               replace(fixed, spare_systems=max(1, 2 * result.spare_systems))),
              ("twice the checkpoint bandwidth", list(result.lines),
               replace(fixed, storage_Bps=2 * result.storage_Bps)),
              ("half the restart time", list(result.lines),
               replace(fixed, restart_s=fixed.restart_s / 2,
                       detection_s=fixed.detection_s / 2))]
    return [(name, goodput(lines, assumptions=a, **kwargs)) for name, lines, a in cases]
