"""The review's scorecard section (``review --scorecard``): the scorecard of the review's
job (docs/scorecard.md) as one section, with its figures in report.json under
``scorecard``. Off by default: its plans at each scaling size and strategy family take
longer than the rest of a review."""

from __future__ import annotations

from topomodel.report.review.document import Section, TableBlock, Text
from topomodel.report.review.schedule import Part, Results, ReviewContext, ReviewSection, Work
from topomodel.report.review.scorecard import ScorecardJob, scorecard
from topomodel.report.review.scorecard_tables import ORIGIN_TEXT, scorecard_report


def _work(c: ReviewContext) -> list[Work]:
    if not c.has_model:
        return []
    model, layout = c.model, c.layout
    assert model is not None and layout is not None  # has_model
    job = ScorecardJob(model, c.assumptions, layout, base=layout, routing=c.routing,
                       seed=c.seed, goodput=c.goodput_assumptions)
    return [Work("scorecard", lambda _: scorecard(c.fabric, job))]


def _part(c: ReviewContext, got: Results) -> Part:
    if "scorecard" not in got:
        return Part()
    report = scorecard_report([got["scorecard"]])
    tables = tuple(report.tables)
    return Part(Section("scorecard", "Scorecard", (Text(ORIGIN_TEXT),
                                                   *(TableBlock(t) for t in tables))),
                {"scorecard": report.data["figures"]}, tables=tables)


SCORECARD = ReviewSection("scorecard", _work, _part)
"""The scorecard of the review's job (``review --scorecard``)."""
