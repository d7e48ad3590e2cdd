"""The scorecard as the CLI prints it and as the files ``-o`` writes: its figures in one
table (the collectives pivoted into a table of their own), values in words, and the
HTML page."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from topomodel.inputs.units import format_rate, format_si
from topomodel.report.output import Report, Table
from topomodel.report.review.scorecard import Scorecard, figure_rows

ORIGIN_TEXT = ("Each figure says where it came from: modelled (topomodel's step and"
               " collective models, with the assumption set named), measured (a catalog"
               " figure a calibration overlay supplied, with its file) or published (a"
               " catalog figure, with its source).")


def value_text(value: float | None, unit: str) -> str:
    """A figure's value in words.

    Examples
    --------
    >>> value_text(0.4213, "share"), value_text(450e9, "B/s"), value_text(None, "s")
    ('42.1 %', '450 GB/s (3.6 Tb/s)', '-')
    >>> value_text(1186783.2, "tokens/s"), value_text(2.5e-6, "s")
    ('1,186,783 tokens/s', '2.5 us')
    """
    if value is None or not math.isfinite(value):
        return "-"
    if unit == "share":
        return f"{value:.1%}".replace("%", " %")
    if unit == "B/s":
        return format_rate(value)
    if unit == "s":
        return format_si(value, "s")
    if unit == "tokens/s":
        return f"{value:,.0f} tokens/s"
    return f"{value:.3g} {unit}"


def _ratio_text(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.3g}x"


def _heads(cards: Sequence[Scorecard], rows: Sequence[dict[str, Any]]) -> list[str]:
    fixed = {"part", "item", "key", "unit", "ratio", "origin", "basis", "note"}
    return [k for k in rows[0] if k not in fixed] if rows else [c.design for c in cards]


def scorecard_tables(cards: Sequence[Scorecard]) -> list[Table]:
    """The figures (collectives apart) with their origin, then the collectives: one row
    per collective, size and group with the mean and tail busbw and the latency term."""
    rows = figure_rows(cards)
    heads = _heads(cards, rows)
    two = len(cards) == 2
    main: list[dict[str, Any]] = []
    collective: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["part"] == "collectives":
            where, _, what = r["item"].rpartition(": ")
            line = collective.setdefault(where, {"collective": where, "algorithm": ""})
            for h in heads:
                line[f"{h}: {what}"] = value_text(r[h], r["unit"])
            line["algorithm"] = line["algorithm"] or r["note"]
            continue
        line = {"part": r["part"], "figure": r["item"]}
        line.update({h: value_text(r[h], r["unit"]) for h in heads})
        if two:
            line["ratio"] = _ratio_text(r["ratio"])
        line.update(origin=r["origin"], basis=r["basis"], note=r["note"])
        main.append(line)
    records = [dict(r) for r in rows]
    return [Table("Scorecard", main, records, name="scorecard"),
            Table("Collectives: busbw (mean and slowest of the hash seeds) and latency",
                  list(collective.values()), name="scorecard_collectives")]


def scorecard_report(cards: Sequence[Scorecard]) -> Report:
    """The ``scorecard`` verb's report: each design's job (its full-size layout and the
    assumption set its modelled figures name), the tables, the JSON of every figure."""
    data = {"designs": [{"design": c.design, "model": c.model,
                         "accelerators": c.accelerators, "layout": c.layout,
                         "assumptions": c.assumptions} for c in cards],
            "figures": figure_rows(cards)}
    jobs = Table("Scorecard of", data["designs"], name="scorecard_jobs")
    return Report("scorecard", data, [jobs, *scorecard_tables(cards)])


def scorecard_html(report: Report) -> str:
    """The scorecard report as one self-contained HTML page (the review's style)."""
    from topomodel.report.review.document import Block, Review, Section, TableBlock, Text
    from topomodel.report.review.render import render_html

    blocks: list[Block] = [Text(ORIGIN_TEXT), *(TableBlock(t) for t in report.tables)]
    names = ", ".join(d["design"] for d in report.data["designs"])
    review = Review(f"Scorecard: {names}", ", ".join(d["model"] for d in
                                                     report.data["designs"]),
                    (Section("scorecard", "Scorecard", tuple(blocks)),), {},
                    report.data, tuple(report.warnings), ())
    return render_html(review)
