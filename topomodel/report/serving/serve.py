"""The report of ``topomodel serve``: a request's times, throughput, the network's part
and where the KV hand-offs load the fabric."""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

from topomodel.analysis.serving.serve import Pool, ServeResult
from topomodel.inputs.units import format_si, format_size
from topomodel.report.output import Report, Table
from topomodel.report.power import cost_rows


def serve_summary(r: ServeResult, *, design: str) -> str:
    """The result in one sentence."""
    part, tier = r.limiting
    pools = (f"{_pool_text(r.decode_pool)} aggregated, chunked prefill" if r.aggregated
             else f"{_pool_text(r.prefill_pool)} prefill, {_pool_text(r.decode_pool)} decode")
    return (f"{r.model} on {design} ({pools}, {r.input_tokens:,.0f} in /"
            f" {r.output_tokens:,.0f} out{' on average' if r.trace else ''} at"
            f" {r.rate_rps:.3g} requests/s): TTFT {format_si(r.ttft_s, 's')}, TPOT"
            f" {format_si(r.tpot_s, 's')}, {r.tokens_per_s_per_accelerator:,.0f} output"
            f" tokens/s per accelerator; the network is {r.network_share:.0%} of a"
            f" request's time, most of it {part}" + (f" on {tier} links" if tier else "")
            + ".")


def _pool_text(p: Pool) -> str:
    ep = f" EP {p.ep}" if p.ep > 1 else ""
    return f"{p.instances} x TP {p.tp}{ep}"


def serve_report(r: ServeResult, *, design: str) -> Report:
    """Tables (request times, throughput and memory, network, KV tier loads, collectives)
    and JSON of a serving job."""
    request = r.request_s

    def share(t: float) -> str:
        return f"{t / request:.1%}" if request else ""

    decoding = (r.output_tokens - 1) * r.tpot_s
    queue = "M/G/1 over the trace's prompts" if r.trace else "M/D/1"
    chunked = r.chunked
    compute = "prefill: compute" if chunked is None else (
        f"prefill: {r.input_tokens / chunked.chunk_tokens:.3g} mixed step(s) of"
        f" {chunked.chunk_tokens:,.0f} prompt tokens (with the decode batch)")
    times = [(f"queue ({queue} per {'replica' if chunked else 'prefill replica'})",
              "queue_s", r.queue_s),
             (compute, "prefill_compute_s", r.prefill_compute_s),
             ("prefill: collectives, exposed", "prefill_comm_exposed_s",
              r.prefill_comm_exposed_s),
             ("KV hand-off, exposed", "kv_exposed_s", r.kv.exposed_s),
             ("time to first token", "ttft_s", r.ttft_s),
             (f"decode: {r.output_tokens - 1:,.0f} steps x TPOT", "decode_s", decoding),
             ("request", "request_s", request)]
    time_rows = [{"part": name, "time": format_si(t, "s"), "share": share(t)}
                 for name, _, t in times]
    time_records = [{"part": key, "time_s": t, "share_of_request": t / request if request
                     else None} for _, key, t in times]
    rates = [
        ("arrival rate, requests/s", f"{r.rate_rps:,.3g}"),
        ("replicas in mixed steps (prefill chunks)" if chunked else "prefill replicas busy",
         f"{r.prefill_load:.0%}"),
        ("decode batch per replica (sequences)", f"{r.decode.batch}"),
        ("time per output token", format_si(r.tpot_s, "s")),
        ("output tokens/s, all", f"{r.output_tokens_per_s:,.0f}"),
        (f"output tokens/s per accelerator ({r.accelerators} in the pools)",
         f"{r.tokens_per_s_per_accelerator:,.1f}"),
        (f"output tokens/s per system ({r.accelerators_per_system} accelerators)",
         f"{r.tokens_per_s_per_system:,.1f}"),
        (f"KV cache per token ({r.kv_dtype}, all layers, one copy)",
         f"{r.kv_bytes_per_token:,} B"),
        ("KV cache per token per rank (prefill, decode)",
         f"{r.kv_bytes_per_token_per_rank[0]:,} B, {r.kv_bytes_per_token_per_rank[1]:,} B"),
        ("memory per prefill rank (weights + one prompt's KV)",
         f"{format_size(r.prefill_memory_bytes)} of {format_size(r.hbm_capacity_bytes)}"),
        ("memory per decode rank (weights + KV at the batch, longest context)",
         f"{format_size(r.decode_memory_bytes)} of {format_size(r.hbm_capacity_bytes)}"),
    ]
    if chunked is not None:
        rates[3:3] = [
            (f"step: decode only / with a prefill chunk (budget {r.chunk_tokens:,} tokens)",
             f"{format_si(chunked.decode_only_s, 's')} / {format_si(chunked.mixed_s, 's')}")]
    if r.cost is not None:
        rates += [("cost per million output tokens", f"{r.cost.USD_per_Mtok:,.4g} USD"),
                  ("energy per output token", f"{r.cost.J_per_token:,.4g} J")]
    if r.trace:
        rates.insert(0, ("request trace", f"{r.trace} ({r.trace_requests:,} requests)"))
    rate_rows = [{"item": k, "value": v} for k, v in rates]
    network = [{"part": part, "time per request": format_si(t, "s"), "share": share(t),
                "bounding tier": tier or "-"} for part, t, tier in r.network_parts()]
    network.append({"part": "network, all", "time per request": format_si(r.network_s, "s"),
                    "share": share(r.network_s), "bounding tier": r.limiting[1] or "-"})
    network_records = [{"part": part, "time_s": t, "share_of_request": t / request
                        if request else None, "tier": tier or None}
                       for part, t, tier in r.network_parts()]
    kv = r.kv
    tier_rows = [{"tier": t.tier, "bytes on its links": format_size(t.bytes),
                  "links loaded": t.links,
                  "busiest link": format_si(t.busiest_s, "s"),
                  "busy at the rate": f"{t.utilization:.1%}"} for t in kv.tiers]
    tier_records = [{"tier": t.tier, "bytes": t.bytes, "links": t.links,
                     "busiest_link_s": t.busiest_s, "utilization": t.utilization}
                    for t in kv.tiers]
    comm = [*[("prefill", c) for c in r.prefill_comm], *[("decode", c) for c in r.decode.comm]]
    comm_rows = [{"pool": pool, "kind": c.kind, "collective": c.collective,
                  "algorithm": c.algorithm, "size": format_size(c.size_bytes),
                  "calls": c.calls, "time": format_si(c.time_s, "s"),
                  "tier": c.tier or "-"} for pool, c in comm]
    comm_records = [{"pool": pool, "kind": c.kind, "collective": c.collective,
                     "algorithm": c.algorithm, "size_bytes": c.size_bytes, "calls": c.calls,
                     "time_s": c.time_s, "tier": c.tier or None,
                     "leaves_scaleup": c.spills} for pool, c in comm]
    heading = "\n".join(textwrap.wrap(serve_summary(r, design=design), width=92))
    kv_title = (f"KV hand-offs in flight: {kv.concurrent} at once,"
                f" {format_size(kv.bytes_per_request)}"
                f" and {kv.flows_per_request} flows each, {format_si(kv.time_s, 's')} together"
                f" ({r.transfer}), bounded by {kv.bottleneck_tier or '-'} links")
    record = serve_record(r, design=design)
    tables = [Table(heading + "\n\na request's time", time_rows, time_records,
                    name="request"),
              Table("throughput and memory", rate_rows, [record], name="serve"),
              Table("the network's part of a request", network, network_records,
                    name="network")]
    if not r.aggregated:
        tables.append(Table(kv_title, tier_rows, tier_records, name="kv_tiers"))
    if comm_rows:
        tables.append(Table("collectives (prefill: per prompt; decode: per step)", comm_rows,
                            comm_records, name="collectives"))
    cost = cost_data(r)
    if cost is not None:
        tables.append(Table("cost per output token (the pools' share of the design)",
                            cost_rows(cost, "output tokens"),
                            [{k: v for k, v in cost.items()
                              if not isinstance(v, dict | list)}],
                            name="cost"))
    data: dict[str, Any] = {
        **record,
        "times": time_records, "network": network_records,
        "kv_transfer": {"bytes_per_request": kv.bytes_per_request,
                        "flows_per_request": kv.flows_per_request,
                        "concurrent": kv.concurrent, "time_s": kv.time_s,
                        "bandwidth_s": kv.bandwidth_s, "latency_s": kv.latency_s,
                        "exposed_s": kv.exposed_s, "bottleneck_tier": kv.bottleneck_tier,
                        "unroutable_flows": kv.unroutable_flows, "tiers": tier_records},
        "collectives": comm_records, "cost": cost,
        "summary": serve_summary(r, design=design),
    }
    return Report("serve", data, tables, list(r.warnings))


def cost_data(r: ServeResult) -> dict[str, Any] | None:
    """The JSON of a serving job's cost per output token (``None`` without one): the
    :class:`~topomodel.analysis.cost.TokenCost` with what it assumed."""
    if r.cost is None:
        return None
    return {**dataclasses.asdict(r.cost), "text": r.cost.describe("output tokens"),
            "capex_complete": not r.unpriced, "unpriced": list(r.unpriced)}


def serve_record(r: ServeResult, *, design: str) -> dict[str, Any]:
    """The serving job's headline as one row of plain numbers, the unit in each name:
    the ``serve`` table of ``--format csv`` and ``parquet``."""
    part, tier = r.limiting
    out: dict[str, Any] = {"design": design, "model": r.model, "accelerator": r.accelerator}
    for p in (r.prefill_pool, r.decode_pool):
        out.update({f"{p.name}_tp": p.tp, f"{p.name}_ep": p.ep,
                    f"{p.name}_instances": p.instances, f"{p.name}_accelerators": p.size,
                    f"{p.name}_first_accelerator": p.first})
    out.update({
        "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
        "rate_requests_per_s": r.rate_rps, "prefill_load": r.prefill_load,
        "decode_batch": r.decode.batch, "decode_context_tokens": r.decode.context,
        "placement": r.placement, "chunk_tokens": r.chunk_tokens or None,
        "mixed_step_s": r.chunked.mixed_s if r.chunked else None,
        "decode_only_step_s": r.chunked.decode_only_s if r.chunked else None,
        "transfer": r.transfer, "kv_dtype": r.kv_dtype, "trace": r.trace or None,
        "trace_requests": r.trace_requests or None,
        "ttft_s": r.ttft_s, "tpot_s": r.tpot_s, "request_s": r.request_s,
        "queue_s": r.queue_s, "prefill_s": r.prefill_s, "kv_exposed_s": r.kv.exposed_s,
        "output_tokens_per_s": r.output_tokens_per_s,
        "tokens_per_s_per_accelerator": r.tokens_per_s_per_accelerator,
        "tokens_per_s_per_system": r.tokens_per_s_per_system,
        "accelerators": r.accelerators, "accelerators_per_system": r.accelerators_per_system,
        "network_s": r.network_s, "network_share": r.network_share,
        "network_limiting_part": part, "network_limiting_tier": tier or None,
        "kv_bytes_per_token": r.kv_bytes_per_token,
        "kv_bytes_per_token_per_rank_prefill": r.kv_bytes_per_token_per_rank[0],
        "kv_bytes_per_token_per_rank_decode": r.kv_bytes_per_token_per_rank[1],
        "prefill_memory_bytes": r.prefill_memory_bytes,
        "decode_memory_bytes": r.decode_memory_bytes,
        "hbm_capacity_bytes": r.hbm_capacity_bytes,
        "decode_wall": r.decode.wall})
    if r.cost is not None:
        out.update({"USD_per_M_output_tokens": r.cost.USD_per_Mtok,
                    "J_per_output_token": r.cost.J_per_token, "USD_per_h": r.cost.USD_per_h,
                    "cost_share_of_design": r.cost.share})
    return out


def serve_compare_report(results: list[tuple[str, ServeResult]]) -> Report:
    """The same serving job on two or more designs: one row each, with its change from
    the first (``compare --serve``)."""
    base = results[0][1]
    rows, records = [], []
    for design, r in results:
        part, tier = r.limiting
        ratio = r.tokens_per_s_per_accelerator / base.tokens_per_s_per_accelerator
        rows.append({
            "design": design, "TTFT": format_si(r.ttft_s, "s"),
            "TPOT": format_si(r.tpot_s, "s"),
            "tokens/s per accelerator": f"{r.tokens_per_s_per_accelerator:,.1f}",
            "vs first": f"{ratio:.2f}x",
            "network share": f"{r.network_share:.1%}",
            "limited by": f"{part} ({tier or '-'})",
            "KV hand-off": f"{format_si(r.kv.time_s, 's')} ({r.kv.bottleneck_tier or '-'})",
            "USD/M output tokens": "-" if r.cost is None else f"{r.cost.USD_per_Mtok:,.4g}",
            "J/output token": "-" if r.cost is None else f"{r.cost.J_per_token:,.4g}"})
        record = serve_record(r, design=design)
        record["tokens_per_s_per_accelerator_vs_first"] = ratio
        record["ttft_s_vs_first"] = r.ttft_s / base.ttft_s
        record["kv_transfer_s"] = r.kv.time_s
        record["kv_bottleneck_tier"] = r.kv.bottleneck_tier or None
        records.append(record)
    title = (f"{base.model}: the same serving job on {len(results)} designs (the first is"
             " the baseline)")
    warnings = list(dict.fromkeys(w for _, r in results for w in r.warnings))
    return Report("compare_serve", {"designs": records}, [Table(title, rows, records,
                                                                name="designs")], warnings)
