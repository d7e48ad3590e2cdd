"""The review's serving section (``review --serve``), kept beside the serving reports
(``report/review`` is full): the serving job of ``topomodel serve`` on the reviewed
design, with the model: a request's times, throughput and memory, the network's part,
and where the KV hand-offs load the fabric (docs/serve.md)."""

from __future__ import annotations

from topomodel.report.review.document import Block, Section, TableBlock, Text
from topomodel.report.review.schedule import Part, Results, ReviewContext, ReviewSection, Work


def _work(c: ReviewContext) -> list[Work]:
    """The serving job, when the review was given one and a model."""
    if c.serving is None or c.model is None:
        return []
    job, model = c.serving, c.model

    def run(_: Results) -> object:
        return job.run(c.fabric, model, c.assumptions, routing=c.routing, seed=c.seed)

    return [Work("serving", run, here=True)]


def _part(c: ReviewContext, got: Results) -> Part:
    from topomodel.report.serving.serve import serve_record, serve_report, serve_summary

    result = got.get("serving")
    if result is None:
        return Part()
    report = serve_report(result, design=c.name)
    tables = tuple(report.tables)
    blocks: list[Block] = [Text(serve_summary(result, design=c.name)),
                           *(TableBlock(t) for t in tables)]
    part, tier = result.limiting
    headline = ({"item": "serving: TTFT, TPOT", "value":
                 f"{result.ttft_s * 1e3:.1f} ms, {result.tpot_s * 1e3:.2f} ms"},
                {"item": "serving: network share of a request",
                 "value": f"{result.network_share:.0%} ({part}, {tier or '-'})"},
                *(() if result.cost is None else (
                    {"item": "serving: cost per million output tokens, energy per token",
                     "value": f"{result.cost.USD_per_Mtok:,.3g} USD,"
                              f" {result.cost.J_per_token:,.3g} J"},)))
    data = {**serve_record(result, design=c.name), "kv_transfer": report.data["kv_transfer"],
            "network": report.data["network"], "cost": report.data["cost"]}
    # the accelerator's own notes (its GEMM and HBM figures) are the step's warnings too
    own = tuple(f"serving: {w}" for w in result.warnings
                if not w.startswith(f"{result.accelerator}:"))
    return Part(Section("serving", "Serving: prefill, KV hand-off, decode", tuple(blocks)),
                {"serving": data}, tables=tables, headline=headline, warnings=own)


SERVING = ReviewSection("serving", _work, _part)
"""The serving job's times, throughput, memory, network part and KV tier loads."""
