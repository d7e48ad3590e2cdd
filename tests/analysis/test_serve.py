"""Serving: KV bytes from the architecture by hand, the hand-off's time against bytes over
its bottleneck link, decode against `decode`, the request's times, the CLI and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from topomodel.analysis.assumptions import TimeModel
from topomodel.analysis.collectives.timing import link_rates_of
from topomodel.analysis.serving.decode import decode_step
from topomodel.analysis.serving.kvcache import (
    kv_bytes_per_token,
    kv_bytes_per_token_per_rank,
    transfer_pairs,
)
from topomodel.analysis.serving.scheduling import mdl_wait_s, mixed_step, pk_wait_s
from topomodel.analysis.serving.serve import (
    kv_transfer,
    place_pools,
    serve,
)
from topomodel.analysis.serving.serve_assumptions import ServeAssumptions
from topomodel.cli import main
from topomodel.errors import ParameterError, UsageError
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model

SUPERPOD = "examples/dgx-h100-superpod.yaml"
NVL72 = "examples/gb200-nvl72-cluster.yaml"


@pytest.fixture(scope="module")
def superpod():
    design, catalog = load_design(SUPERPOD)
    return build_fabric(design, catalog)


@pytest.fixture(scope="module")
def nvl72():
    design, catalog = load_design(NVL72)
    return build_fabric(design, catalog)


def _model(fabric, ident):
    return fabric.catalog.get(ident, Model)


def test_kv_bytes_per_token_by_hand(superpod):
    llama = _model(superpod, "llama3-70b")
    assert kv_bytes_per_token(llama, 2) == 80 * 8 * 128 * 2 * 2 == 327_680
    assert kv_bytes_per_token(llama, 1) == 163_840  # fp8
    ds = _model(superpod, "deepseek-v3")  # MLA: latent 512 + RoPE key 64, one copy
    assert kv_bytes_per_token(ds, 2) == 61 * (512 + 64) * 2 == 70_272
    # TP splits GQA heads (8 over 8 ranks: one each; over 16: each head on two ranks)
    assert kv_bytes_per_token_per_rank(llama, 8, 2) == 327_680 // 8
    assert kv_bytes_per_token_per_rank(llama, 16, 2) == 327_680 // 8
    # MLA's latent is whole on every TP rank (vLLM)
    assert kv_bytes_per_token_per_rank(ds, 8, 2) == 70_272


def test_transfer_pairs_cover_every_destination_unit(superpod):
    llama = _model(superpod, "llama3-70b")
    src, dst, units = transfer_pairs(llama, 4, 8)  # 2 heads a source rank, 1 a dest
    assert dst.tolist() == list(range(8)) and src.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert units.sum() == 8
    src, dst, units = transfer_pairs(llama, 16, 8)  # replicated sources share the sending
    assert len(set(src.tolist())) == 8 and units.sum() == 8
    ds = _model(superpod, "deepseek-v3")
    src, dst, units = transfer_pairs(ds, 8, 4)  # each destination rank gets the latent
    assert dst.tolist() == [0, 1, 2, 3] and src.tolist() == [0, 1, 2, 3]
    assert units.tolist() == [1, 1, 1, 1]
    with pytest.raises(ParameterError, match="decode_tp"):
        transfer_pairs(llama, 8, 3)


def test_handoff_time_is_bytes_over_the_bottleneck_link(superpod):
    llama = _model(superpod, "llama3-70b")
    prefill, decode = place_pools(superpod, ServeAssumptions())
    assert decode.first == 8  # the next server: the hand-off leaves the NVLink domain
    kv, timed = kv_transfer(superpod, llama, (prefill, decode), 1000, 2, 1,
                            time_model=TimeModel(), routing="ecmp", seed=0)
    pair_bytes = 1000 * 80 * 2 * 128 * 2  # one KV head per rank pair
    assert kv.bytes_per_request == 8 * pair_bytes == 1000 * 327_680
    loaded = timed.link_bytes > 0
    # GPU i to GPU i of the next server: one rail, one leaf, each link carries one flow
    assert np.allclose(timed.link_bytes[loaded], pair_bytes)
    rates = link_rates_of(superpod, TimeModel()).link_Bps
    assert kv.bandwidth_s == pytest.approx(pair_bytes / rates[loaded].min())
    assert kv.bottleneck_tier in ("host", "leaf") and "scaleup" not in {
        t.tier for t in kv.tiers}


def test_packed_pools_keep_the_handoff_in_the_nvlink_domain(nvl72):
    ds = _model(nvl72, "deepseek-v3")
    kw = {"prefill_ep": 4, "decode_ep": 4, "concurrency": 32}
    apart = serve(nvl72, ds, serving=ServeAssumptions(**kw))
    packed = serve(nvl72, ds, serving=ServeAssumptions(placement="packed", **kw))
    assert apart.decode_pool.first == 72 and packed.decode_pool.first == 32
    assert {t.tier for t in packed.kv.tiers} == {"scaleup"}
    assert "scaleup" not in {t.tier for t in apart.kv.tiers}
    assert packed.kv.time_s < apart.kv.time_s
    # layer by layer: only what the last layer cannot hide is exposed
    layers = ds.layers
    for r in (apart, packed):
        assert r.kv.exposed_s == pytest.approx(max(
            r.kv.time_s / layers, r.kv.time_s - r.prefill_s * (layers - 1) / layers))


def test_decode_agrees_with_decode_verb_and_times_add_up(superpod):
    llama = _model(superpod, "llama3-70b")
    r = serve(superpod, llama, serving=ServeAssumptions(
        concurrency=64, input_tokens=2000, output_tokens=201, prefill_instances=4))
    alone = decode_step(superpod, llama, tp=8, dp=1, batch=64, context=2100)
    assert r.decode.batch == 64 and r.decode.context == 2100
    assert r.tpot_s == pytest.approx(alone.step_time_s, rel=1e-9)
    assert r.ttft_s == pytest.approx(r.queue_s + r.prefill_s + r.kv.exposed_s)
    assert r.request_s == pytest.approx(r.ttft_s + 200 * r.tpot_s)
    # Little's law: the concurrency sets the rate
    assert r.rate_rps == pytest.approx(64 / (200 * r.tpot_s))
    assert r.queue_s == pytest.approx(mdl_wait_s(r.prefill_load, r.prefill_s))
    assert r.tokens_per_s_per_accelerator == pytest.approx(r.rate_rps * 201 / 40)
    assert 0 < r.network_share < 1


def test_rate_gives_the_batch_littles_law_needs(superpod):
    llama = _model(superpod, "llama3-70b")
    r = serve(superpod, llama, serving=ServeAssumptions(rate=5.0))
    needed = 5.0 * 999 * r.tpot_s  # sequences in decode, one replica
    assert needed <= r.decode.batch < needed + 1
    assert r.prefill_load == pytest.approx(5.0 * r.prefill_s)
    assert r.decode_memory_bytes <= r.hbm_capacity_bytes


def test_bad_input_is_one_clear_error(superpod):
    llama = _model(superpod, "llama3-70b")
    with pytest.raises(UsageError, match="the design has 1016"):
        serve(superpod, llama, serving=ServeAssumptions(decode_instances=200))
    with pytest.raises(UsageError, match="--prefill-tp/--prefill-ep: the prefill pool"):
        serve(superpod, llama, serving=ServeAssumptions(prefill_tp=1))
    with pytest.raises(UsageError, match=r"--rate: .* add prefill instances"):
        serve(superpod, llama, serving=ServeAssumptions(rate=1000.0))
    with pytest.raises(UsageError, match="--rate: the decode pool cannot keep up"):
        serve(superpod, llama, serving=ServeAssumptions(rate=60.0, prefill_instances=8))
    with pytest.raises(UsageError, match="--decode-ep"):
        serve(superpod, llama, serving=ServeAssumptions(decode_ep=2))
    with pytest.raises(UsageError, match="give one"):
        serve(superpod, llama, serving=ServeAssumptions(rate=1.0, concurrency=4))


def test_cli_json_and_errors(capsys):
    status = main(["serve", SUPERPOD, "--model", "llama3-70b", "--concurrency", "32",
                   "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["schema"] == "topomodel.serve"
    assert out["kv_bytes_per_token"] == 327_680 and out["decode_batch"] == 32
    assert out["ttft_s"] == pytest.approx(out["queue_s"] + out["prefill_s"]
                                          + out["kv_exposed_s"])
    assert {t["tier"] for t in out["kv_transfer"]["tiers"]} <= {"host", "leaf", "spine"}
    status = main(["serve", SUPERPOD, "--model", "llama3-70b", "--prefill-tp", "1"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "--prefill-tp" in err
    status = main(["serve", SUPERPOD, "--model", "llama3-70b", "--placement", "near"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "--placement" in err


def test_trace_gives_the_mix_rate_and_an_mg1_queue(superpod, tmp_path):
    from topomodel.inputs.measured.requests import read_mooncake_trace

    lines = [f'{{"timestamp": {i * 250}, "input_length": {n}, "output_length": {m}}}'
             for i, (n, m) in enumerate([(500, 100), (1500, 300), (500, 200), (1500, 200)])]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    trace = read_mooncake_trace(path)
    llama = _model(superpod, "llama3-70b")
    r = serve(superpod, llama, trace=trace)
    assert r.rate_rps == pytest.approx(3 / 0.75) and r.trace_requests == 4
    assert r.input_tokens == 1000 and r.output_tokens == 200
    assert r.decode.context == round(1000 + 199 / 2)
    # two prompt lengths: the queue is M/G/1 over their two prefill times
    short = serve(superpod, llama, serving=ServeAssumptions(input_tokens=500, rate=4.0))
    long = serve(superpod, llama, serving=ServeAssumptions(input_tokens=1500, rate=4.0))
    mean = (short.prefill_s + long.prefill_s) / 2
    second = (short.prefill_s ** 2 + long.prefill_s ** 2) / 2
    assert r.prefill_s == pytest.approx(mean)
    assert r.queue_s == pytest.approx(pk_wait_s(4.0, mean, second))
    assert r.queue_s > pk_wait_s(4.0, mean, mean ** 2)  # variance waits longer


def test_cli_trace_with_a_missing_field_is_one_line(capsys, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10}\n')
    status = main(["serve", SUPERPOD, "--model", "llama3-70b", "--trace", str(path)])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.endswith("bad.jsonl:1: output_length: missing")
    assert len(err.splitlines()) == 1


def test_compare_serve_runs_the_same_job_on_each_design(capsys):
    status = main(["compare", NVL72, SUPERPOD, "--serve", "--model", "llama3-70b",
                   "--concurrency", "16", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["schema"] == "topomodel.compare_serve"
    first, second = out["designs"]
    assert first["tokens_per_s_per_accelerator_vs_first"] == 1.0
    assert second["tokens_per_s_per_accelerator_vs_first"] == pytest.approx(
        second["tokens_per_s_per_accelerator"] / first["tokens_per_s_per_accelerator"])
    assert first["decode_batch"] == second["decode_batch"] == 16
    assert first["accelerator"] != second["accelerator"]


def test_the_worked_example_in_docs_serve_md(nvl72):
    """docs/serve.md's table: DeepSeek-V3, TP 1 EP 32 pools, 4,000 in / 1,000 out, the
    hand-off after the prefill, inside rack 0 or across to rack 1."""
    ds = _model(nvl72, "deepseek-v3")
    kw = {"prefill_tp": 1, "prefill_ep": 32, "decode_tp": 1, "decode_ep": 32,
          "input_tokens": 4000, "output_tokens": 1000, "transfer": "after"}
    packed = serve(nvl72, ds, serving=ServeAssumptions(placement="packed", **kw))
    apart = serve(nvl72, ds, serving=ServeAssumptions(**kw))
    assert packed.kv_bytes_per_token == 70_272 and packed.kv.concurrent == 16
    assert packed.kv.bytes_per_request == pytest.approx(281.1e6, rel=1e-3)
    assert (packed.kv.bottleneck_tier, apart.kv.bottleneck_tier) == ("scaleup", "leaf")
    assert packed.kv.time_s == pytest.approx(0.40e-3, rel=0.02)
    assert apart.kv.time_s == pytest.approx(5.66e-3, rel=0.01)
    assert apart.ttft_s - packed.ttft_s == pytest.approx(5.3e-3, rel=0.05)
    assert packed.tpot_s == pytest.approx(18.97e-3, rel=0.01)
    assert round(packed.network_share, 3) == 0.092


def test_cost_per_output_token_is_the_pools_share_of_the_design(superpod):
    """$/M output tokens: the pools' accelerators' share of the design's capex and power
    over the job's output tokens/s, with the cost options."""
    from topomodel.analysis.assumptions import CostAssumptions
    from topomodel.analysis.cost import fabric_cost, token_cost

    llama = _model(superpod, "llama3-70b")
    r = serve(superpod, llama, serving=ServeAssumptions(rate=5.0))
    assert r.cost is not None and r.cost.share == pytest.approx(16 / 1016)
    assert r.cost.tokens_per_s == pytest.approx(5.0 * 1000)
    _, power = fabric_cost(superpod, 16, 1.0)
    whole = token_cost(power.capex_USD, power.total_W, 5.0 * 1000)
    # the share scales every hourly term; the tokens are the job's
    assert r.cost.USD_per_h == pytest.approx(whole.USD_per_h * 16 / 1016)
    assert r.cost.USD_per_Mtok == pytest.approx(
        r.cost.USD_per_h / (r.output_tokens_per_s * 3600) * 1e6)
    assert r.cost.J_per_token == pytest.approx(power.total_W * 1.3 * 16 / 1016 / 5000)
    # twice the rate on the same pools: half the cost per token
    fast = serve(superpod, llama, serving=ServeAssumptions(rate=10.0))
    assert fast.cost.USD_per_Mtok == pytest.approx(r.cost.USD_per_Mtok / 2)
    dear = serve(superpod, llama, serving=ServeAssumptions(rate=5.0),
                 cost=CostAssumptions(electricity_USD_per_kWh=0.2))
    assert dear.cost.energy_USD_per_h == pytest.approx(r.cost.energy_USD_per_h * 0.2 / 0.0806)


def test_cli_serve_and_compare_report_the_cost(capsys):
    status = main(["serve", SUPERPOD, "--model", "llama3-70b", "--rate", "5", "--pue", "1.5",
                   "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["cost"]["assumptions"]["pue"] == 1.5
    assert out["USD_per_M_output_tokens"] == out["cost"]["USD_per_Mtok"] > 0
    assert out["J_per_output_token"] == pytest.approx(
        out["cost"]["facility_power_W"] / out["output_tokens_per_s"])
    assert "output tokens/s" in out["cost"]["text"]
    status = main(["compare", NVL72, SUPERPOD, "--serve", "--model", "llama3-70b",
                   "--rate", "5"])
    text = capsys.readouterr().out
    assert status == 0 and "USD/M output tokens" in text and "J/output token" in text


def test_aggregated_serving_interleaves_chunked_prefill_with_decode(superpod):
    """--placement aggregated: one pool, no hand-off; its steps are decode-only or carry a
    prompt's chunk, and TPOT, TTFT and the load follow scheduling.mixed_step."""
    llama = _model(superpod, "llama3-70b")
    r = serve(superpod, llama, serving=ServeAssumptions(placement="aggregated", rate=5.0))
    assert r.aggregated and r.accelerators == 8 and r.kv.bytes_per_request == 0
    assert r.prefill_pool is r.decode_pool and r.transfer == "none"
    m = r.chunked
    plain = decode_step(superpod, llama, tp=8, dp=1, batch=r.decode.batch,
                        context=r.decode.context, ranks=np.asarray(superpod.accelerators[:8]))
    assert m.decode_only_s == pytest.approx(plain.step_time_s)
    by_hand = mixed_step(batch=r.decode.batch, hbm_s=plain.hbm_s,
                         compute_s=plain.compute_s, comm_exposed_s=plain.comm_exposed_s,
                         prompt_tokens=1000,
                         prefill_compute_s=_prefill_compute(superpod, llama),
                         prefill_comm_s=r.prefill_comm_exposed_s, rate_rps=5.0,
                         budget_tokens=8192)
    assert r.tpot_s == pytest.approx(by_hand.tpot_s) == pytest.approx(m.tpot_s)
    assert plain.step_time_s < r.tpot_s < m.mixed_s  # prefill chunks slow decode down
    assert m.chunk_tokens == 1000 and r.prefill_s == pytest.approx(m.mixed_s)
    assert r.prefill_load == pytest.approx(5.0 * m.mixed_s)
    assert r.queue_s == pytest.approx(mdl_wait_s(r.prefill_load, r.prefill_s))
    assert r.ttft_s == pytest.approx(r.queue_s + r.prefill_s)
    # Little's law on the one pool, and half the accelerators of 1P1D for the same rate
    assert r.decode.batch == int(np.ceil(5.0 * 999 * r.tpot_s))
    apart = serve(superpod, llama, serving=ServeAssumptions(rate=5.0))
    assert r.tokens_per_s_per_accelerator == pytest.approx(
        2 * apart.tokens_per_s_per_accelerator)
    # a smaller budget splits the prompt: more mixed steps, each shorter
    small = serve(superpod, llama, serving=ServeAssumptions(
        placement="aggregated", rate=5.0, chunk_tokens=512))
    assert small.chunked.chunk_tokens < 512 and small.chunked.mixed_s < m.mixed_s
    assert small.prefill_s > r.prefill_s


def _prefill_compute(fabric, model):
    from topomodel.analysis.serving.serve import Pool, prefill_compute_s
    from topomodel.analysis.training.compute import device_model
    from topomodel.inputs.parts import Accelerator

    acc = fabric.catalog.get("h100-sxm", Accelerator)
    return prefill_compute_s(device_model(acc, "bf16"), model,
                             Pool("decode", 8, 1, 1, 0), 1000)


def test_aggregated_bad_input_is_one_line(capsys):
    for flags, key in [(["--concurrency", "8"], "--concurrency"),
                       (["--rate", "5", "--input-tokens", "10", "--chunk-tokens", "16"],
                        "--chunk-tokens"),
                       (["--rate", "5", "--chunk-tokens", "16"], "--rate")]:
        status = main(["serve", SUPERPOD, "--model", "llama3-70b", "--placement",
                       "aggregated", *flags])
        err = capsys.readouterr().err.strip()
        assert status == 2 and len(err.splitlines()) == 1 and key in err, err
