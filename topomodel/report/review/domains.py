"""The review's failure domains: a rack, a power feed, a cooling loop, a scale-out plane
and a site failed, one of each kind, and what each stops and removes (the blast-radius
table of ``topomodel build --failure-domains``; docs/failure-domains.md). Its worst row
is also in the summary (:func:`worst_headline`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from topomodel.analysis.reliability.blast_radius import (
    BlastRadius,
    blast_radius_records,
    worst,
)
from topomodel.report.build import blast_radius_rows, worst_text
from topomodel.report.output import Table
from topomodel.report.review.document import Section, TableBlock, Text
from topomodel.report.review.schedule import Part, Results, ReviewContext, ReviewSection, Work
from topomodel.report.review.work import failure_domains_work


def failure_domains_table(rows: Sequence[BlastRadius]) -> Table:
    """The blast-radius table as the review shows it, with its plain records."""
    return Table("Failure domains", blast_radius_rows(rows), blast_radius_records(rows),
                 name="failure_domains")


def worst_headline(rows: Sequence[BlastRadius]) -> tuple[list[dict[str, str]],
                                                         dict[str, Any]]:
    """The summary's row for the worst domain kind
    (:func:`~topomodel.analysis.reliability.blast_radius.worst`) and its keys of
    report.json's ``summary`` (none without a row)."""
    hit = worst(rows)
    if hit is None:
        return [], {}
    return ([{"item": "worst failure domain", "value": worst_text(hit)}],
            {"worst_failure_domain": hit.kind,
             "worst_failure_domain_accelerators_stopped": hit.accelerators_stopped,
             "worst_failure_domain_job_stopped": hit.job_stopped,
             "worst_failure_domain_failures_per_day": hit.failures_per_day})


def _section(rows: Sequence[BlastRadius], stepped: bool) -> Section:
    hit = worst(rows)
    return Section("failure-domains", "Failure domains and blast radius", (
        Text("One domain of each kind failed as a whole (the first, which holds the job's"
             " first ranks): every link of its systems' accelerators, NICs and in-system"
             " switches, or of a scale-out plane's switches and NICs, marked failed as"
             " --fail marks a part's. Each row: the accelerators it stops, whether the job"
             " stops, the scale-out and bisection capacity it removes, each link tier's"
             " capacity left"
             + (", the training step routed again around it where the job runs on" if
                stepped else "")
             + ", and how often a domain of the kind fails (domains x the catalog's rate"
             " per domain) with its repair time. Capacities are per direction. Every"
             " rack and every power feed is also failed in turn, and its worst and median"
             " rows added (\"rack (worst: #N)\")."
             + (f" Worst: {worst_text(hit)}." if hit is not None else "")),
        TableBlock(failure_domains_table(rows))))


def _work(c: ReviewContext) -> list[Work]:
    return failure_domains_work(c)


def _part(c: ReviewContext, got: Results) -> Part:
    rows = got["failure domains"]
    if not rows:
        return Part(data={"failure_domains": []})
    return Part(_section(rows, c.has_model), {"failure_domains": blast_radius_records(rows)},
                tables=(failure_domains_table(rows),))


FAILURE_DOMAINS = ReviewSection("failure-domains", _work, _part)
"""The blast radius of one domain of each kind (``failure_domains`` in report.json)."""
