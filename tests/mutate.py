"""Mutation testing: do the tests catch a wrong model?  (Issue #44 item 8.)

Each entry of :data:`MUTATIONS` changes one line of the package into a plausible bug (an
off-by-one, floor for ceil, a dropped factor of 2, a swapped direction, bits for bytes,
a wrong default) and names the tests that should fail. The script copies the package
and its tests to a temporary directory once, then for each mutation writes the changed
line there, runs the selection with a timeout, puts the line back, and prints
``killed``, ``SURVIVED`` or ``timeout``. It exits 1 if a mutation survives that is not
in :data:`EQUIVALENT` (a mutation that cannot change any result, with the reason).

Run it from the repository root::

    python tests/mutate.py              # every mutation
    python tests/mutate.py --only NAME  # one (or a comma-separated few)
    python tests/mutate.py --list       # the table

It is not a test module (its name does not start with ``test_``, and ``conftest.py``
keeps ``--doctest-modules`` from importing it), so the normal pytest run skips it.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what a test may read: the package, its tests, and the files they load
COPIED = ("topomodel", "tests", "examples", "catalogs", "docs", "pyproject.toml", "README.md")
TIMEOUT_S = 300


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    original: str  # one line's exact text, stripped of its indentation and newline
    replacement: str  # the same line, wrong
    tests: tuple[str, ...]  # the pytest selection: test files or node ids, then any -k
    timeout_s: float = TIMEOUT_S


def m(name: str, path: str, original: str, replacement: str, *tests: str,
      timeout_s: float = TIMEOUT_S) -> Mutation:
    return Mutation(name, path, original, replacement, tests, timeout_s)


UNITS = "topomodel/inputs/units.py"
CLOS = "topomodel/fabric/clos.py"
BUILD = "topomodel/fabric/build.py"
UP_SWITCHED = "topomodel/fabric/scaleup/switched.py"
UP_FULL_MESH = "topomodel/fabric/scaleup/full_mesh.py"
UP_TORUS = "topomodel/fabric/scaleup/torus.py"
FAT_TREE = "topomodel/fabric/scaleout/fat_tree.py"
STRUCTURED = "topomodel/routing/structured.py"
GENERAL = "topomodel/routing/general.py"
RINGS = "topomodel/traffic/algorithms/rings.py"
HALVING = "topomodel/traffic/algorithms/halving.py"
ALLTOALL = "topomodel/traffic/algorithms/alltoall.py"
CHANNELS = "topomodel/traffic/channels.py"
COLLECTIVES = "topomodel/traffic/collectives.py"
TORUS = "topomodel/traffic/algorithms/torus.py"
TIMING = "topomodel/analysis/collectives/timing.py"
TRANSPORTS = "topomodel/inputs/transports.py"
PROTOCOLS = "topomodel/analysis/collectives/protocols.py"
STEP = "topomodel/analysis/training/step.py"
STAGEWORK = "topomodel/analysis/training/stagework.py"
PIPELINE = "topomodel/analysis/training/pipeline.py"
COMPUTE = "topomodel/analysis/training/compute.py"
MEMORY = "topomodel/analysis/training/memory.py"
BISECTION = "topomodel/analysis/bisection.py"
GOODPUT = "topomodel/analysis/reliability/goodput.py"

T_UNITS = "tests/edge/test_units.py"
T_BUILD = "tests/fabric/test_build.py"
T_ROUTING = "tests/routing/test_routing.py"
T_ALGORITHMS = "tests/traffic/test_algorithms.py"
T_COLLECTIVES = "tests/traffic/test_collectives.py"
T_PROTOCOLS = "tests/analysis/test_protocols.py"
T_STEP = "tests/analysis/test_step.py"
T_PIPELINE = "tests/analysis/test_pipeline.py"
T_COMPUTE = "tests/analysis/test_compute.py"
T_MEMORY = "tests/analysis/test_memory.py"
T_BISECTION = "tests/analysis/test_bisection.py"
T_GOODPUT = "tests/analysis/test_goodput.py"

MUTATIONS: tuple[Mutation, ...] = (
    # --- units -----------------------------------------------------------------------
    m("units-bidir-not-halved", UNITS,
      'per_direction = rate_Bps / 2 if direction == "bidir" else rate_Bps',
      "per_direction = rate_Bps",
      T_UNITS),
    m("units-bidir-total-not-doubled", UNITS,
      "return 2 * self.per_direction_Bps",
      "return self.per_direction_Bps",
      T_UNITS),
    m("units-rate-bits-divided", UNITS,
      "return f\"{format_si(rate_Bps, 'B/s')} ({format_si(rate_Bps * 8, 'b/s')})\"",
      "return f\"{format_si(rate_Bps, 'B/s')} ({format_si(rate_Bps / 8, 'b/s')})\"",
      T_UNITS),
    m("units-compare-bidir-doubled", UNITS,
      'halves = {"bidir": 0.5, "per_direction": 1.0, None: 1.0}',
      'halves = {"bidir": 2.0, "per_direction": 1.0, None: 1.0}',
      T_UNITS),
    m("units-zero-rate-accepted", UNITS,
      'if spec.sign == "positive" and value <= 0:',
      'if spec.sign == "positive" and value < 0:',
      T_UNITS),
    # --- fabric counts ---------------------------------------------------------------
    m("clos-pods-floor", CLOS,
      "pods = math.ceil(leaves / leaves_per_pod)",
      "pods = leaves // leaves_per_pod",
      "tests/fabric/test_build.py::test_a_partial_last_pod_keeps_its_core_ports"),
    m("clos-leaf-uplinks-floor", CLOS,
      "least_up = max(1, math.ceil(leaf_down * down_rate_Bps / (over[0] * up_rate_Bps)"
      " - 1e-6))",
      "least_up = max(1, math.floor(leaf_down * down_rate_Bps / (over[0] * up_rate_Bps)"
      " + 1e-6))",
      T_BUILD),
    m("clos-leaves-floor", CLOS,
      "leaves_per_group = -(-group_sizes // leaf_down)",
      "leaves_per_group = group_sizes // leaf_down",
      T_BUILD),
    m("clos-spine-uplinks-floor", CLOS,
      "least_up = max(1, math.ceil(leaves_per_pod / oversubscription - 1e-6))",
      "least_up = max(1, math.floor(leaves_per_pod / oversubscription + 1e-6))",
      T_BUILD),
    m("clos-present-pods-floor", CLOS,
      "present_pods = math.ceil(present / leaves_per_pod)",
      "present_pods = present // leaves_per_pod",
      T_BUILD),
    m("clos-breakout-inverted", CLOS,
      "return math.floor(self.radix * self.native_rate_Bps / rate_Bps + _EPS)",
      "return math.floor(self.radix * rate_Bps / self.native_rate_Bps + _EPS)",
      T_BUILD),
    m("clos-core-down-ports-per-spine", CLOS,
      "used_down = plan.pods * (plan.spine_up // plan.cores_per_group)",
      "used_down = plan.pods * plan.spine_up",
      T_BUILD),
    m("clos-rails-per-leaf-one-short", CLOS,
      "rails = max(1, min(nics, leaf_down_max // (planned_unit or min(unit, systems))))",
      "rails = max(1, min(nics - 1, leaf_down_max // (planned_unit or min(unit, systems))))",
      T_BUILD),
    m("build-full-mesh-links-doubled", UP_FULL_MESH,
      "return system.accelerators * (system.accelerators - 1) // 2",
      "return system.accelerators * (system.accelerators - 1)",
      T_BUILD),
    m("build-last-plane-missing", FAT_TREE,
      "for index in range(out.planes):",
      "for index in range(out.planes - 1):",
      T_BUILD),
    m("build-asymmetric-rate-one-cable", BUILD,
      'link_columns["capacity_Bps"][rows] = cables[rows] * rate',
      'link_columns["capacity_Bps"][rows] = rate',
      T_BUILD),
    m("scaleup-mesh-pairs-off-by-one", UP_FULL_MESH,
      "per_pair = max(1, accelerator.scaleup_link_count // (per_system - 1))",
      "per_pair = max(1, accelerator.scaleup_link_count // per_system)",
      T_BUILD),
    m("scaleup-torus-length-2-single", UP_TORUS,
      "cables = design.scaleup.links_per_neighbor * (2 if wrap and length == 2 else 1)",
      "cables = design.scaleup.links_per_neighbor",
      T_BUILD, "tests/traffic/test_torus.py"),
    m("scaleup-torus-length-2-wired-twice", UP_TORUS,
      "keep = np.ones(total, bool) if length > 2 else coords[:, dim] == 0",
      "keep = np.ones(total, bool)",
      T_BUILD, "tests/traffic/test_torus.py"),
    # --- routing ---------------------------------------------------------------------
    m("routing-planes-not-split", STRUCTURED,
      "part = volume / planes",
      "part = volume",
      T_ROUTING, "-k", "equals_general"),
    m("routing-ecmp-not-spread", "topomodel/routing/clos/view.py",
      "return Rows(fanout.table, index, amount / fanout.width)",
      "return Rows(fanout.table, index, amount)",
      T_ROUTING, "-k", "equals_general"),
    m("routing-scaleout-hops-off-by-one", STRUCTURED,
      "hops = np.full(len(flows), 4, dtype=np.int64)",
      "hops = np.full(len(flows), 3, dtype=np.int64)",
      T_ROUTING, "-k", "equals_general"),
    m("routing-supernode-hops-swapped", STRUCTURED,
      "hops = np.where(between_pods & (climb.pod[chips_s[:, 0]] >= 0), 6, 4)",
      "hops = np.where(between_pods & (climb.pod[chips_s[:, 0]] >= 0), 4, 6)",
      T_ROUTING, "-k", "equals_general"),
    m("routing-counted-leaf-keeps-inner", "topomodel/routing/aggregate.py",
      "down_leaf += np.bincount(leaf, weights=received / planes - inner, minlength=n_nodes)",
      "down_leaf += np.bincount(leaf, weights=received / planes, minlength=n_nodes)",
      "tests/traffic/test_allpairs.py"),
    m("routing-general-qp-full-bytes", GENERAL,
      "amount = phase.bytes[flows][take] / qps",
      "amount = phase.bytes[flows][take]",
      T_ROUTING, "-k", "queue_pairs"),
    m("routing-general-share-ignores-cables", GENERAL,
      "self.share = cables / out[graph.src[self.arcs]]",
      "self.share = 1 / out[graph.src[self.arcs]]",
      T_ROUTING, "-k", "equals_general or conserves"),
    m("routing-dmodk-ignores-stride", "topomodel/routing/hashing.py",
      "rank = (dst // stride) % count  # the rank-th present candidate",
      "rank = dst % count  # the rank-th present candidate",
      T_ROUTING, "-k", "equals_general"),
    # --- collectives' bytes ----------------------------------------------------------
    m("ring-allreduce-steps-halved", RINGS,
      'steps = 2 * (n - 1) if collective == "allreduce" else n - 1',
      "steps = n - 1",
      T_ALGORITHMS, T_COLLECTIVES),
    m("hierarchical-allgather-chunk", RINGS,
      '"allgather": [("ring allgather across domains", across, size / n, parts - 1),',
      '"allgather": [("ring allgather across domains", across, size / m, parts - 1),',
      T_ALGORITHMS, T_COLLECTIVES),
    m("rhd-one-round-short", HALVING,
      "halving = [1 << k for k in range(n.bit_length() - 1)]",
      "halving = [1 << k for k in range(n.bit_length() - 2)]",
      T_ALGORITHMS, T_COLLECTIVES),
    m("rhd-rounds-one-way", HALVING,
      'return 2 * half if collective == "allreduce" else half',
      "return half",
      T_ALGORITHMS, T_COLLECTIVES, T_PROTOCOLS),
    m("alltoall-pair-bytes-off-by-one", ALLTOALL,
      "block = AllPairs(g.ranks, g.gid.astype(np.int32), np.full(len(g.gid), size / n))",
      "block = AllPairs(g.ranks, g.gid.astype(np.int32), np.full(len(g.gid), size / (n - 1)))",
      T_ALGORITHMS, T_COLLECTIVES),
    m("alltoall-rounds-floor", ALLTOALL,
      "return max(1, math.ceil(math.ceil(ranks / group) / MAX_CHANNELS))",
      "return max(1, math.ceil(ranks / group) // MAX_CHANNELS)",
      T_ALGORITHMS, T_COLLECTIVES, T_PROTOCOLS),
    m("alltoall-pairwise-rounds-off-by-one", ALLTOALL,
      "return ranks - 1",
      "return ranks",
      T_ALGORITHMS, T_COLLECTIVES, T_PROTOCOLS),
    m("channels-ring-cross-not-split", CHANNELS,
      "size_bytes / (n * ch.count[group])]),",
      "size_bytes / n]),",
      T_ALGORITHMS, T_COLLECTIVES),
    m("channels-tree-not-halved", CHANNELS,
      "nbytes = size_bytes / (2 * c)",
      "nbytes = size_bytes / c",
      T_ALGORITHMS, T_COLLECTIVES),
    m("torus-part-not-halved", TORUS,
      "part = size / (2 * count)",
      "part = size / count",
      T_ALGORITHMS, T_COLLECTIVES, "tests/traffic/test_torus.py"),
    m("collectives-allreduce-busbw-factor", COLLECTIVES,
      "return 2.0 * (n - 1) / n",
      "return (n - 1) / n",
      T_COLLECTIVES),
    m("collectives-merged-bytes-not-rescaled", COLLECTIVES,
      "np.concatenate([p.bytes * (p.steps / steps) for p in members]),",
      "np.concatenate([p.bytes for p in members]),",
      T_ALGORITHMS, T_COLLECTIVES),
    # --- timing ----------------------------------------------------------------------
    m("timing-ib-ethernet-headers-swapped", TRANSPORTS,
      'IB_HEADER_BYTES = 8 + 12 + 4 + 2',
      'IB_HEADER_BYTES = 14 + 4 + 8 + 12 + 20 + 8 + 12 + 4',
      T_PROTOCOLS, "tests/analysis/test_pcie.py"),
    m("timing-sockets-default-line-rate", TRANSPORTS,
      '"transports.SOCKETS_EFFICIENCY", 10 / 12.5,',
      '"transports.SOCKETS_EFFICIENCY", 1.0,',
      T_PROTOCOLS, "tests/analysis/test_pcie.py"),
    m("timing-net-plugin-latency-ignored", PROTOCOLS,
      'inter += shape.net_latency_us * (2 if protocol == "Simple" else 1)',
      'inter += 0.0',
      T_PROTOCOLS, "tests/analysis/test_transports.py"),
    m("timing-phase-latency-once", TIMING,
      "return self.steps * (self.bandwidth_s + self.latency_s)",
      "return self.steps * self.bandwidth_s + self.latency_s",
      T_COLLECTIVES),
    m("timing-latency-not-per-step", TIMING,
      "return self.collective_latency_s + sum(p.steps * p.latency_s for p in self.phases)",
      "return self.collective_latency_s + sum(p.latency_s for p in self.phases)",
      T_COLLECTIVES),
    m("timing-message-overhead-once", TIMING,
      "+ ph.messages_per_step * time_model.per_message_overhead_s)",
      "+ time_model.per_message_overhead_s)",
      T_COLLECTIVES),
    m("protocols-tree-latency-one-way", PROTOCOLS,
      "return (intra + 2 * math.log2(nodes) * inter) * 1e-6",
      "return (intra + math.log2(nodes) * inter) * 1e-6",
      T_PROTOCOLS),
    m("protocols-ring-allreduce-steps", PROTOCOLS,
      'steps = {"allreduce": 2 * (n - 1), "allgather": n - 1, "reducescatter": n - 1}.get(',
      'steps = {"allreduce": n - 1, "allgather": n - 1, "reducescatter": n - 1}.get(',
      T_PROTOCOLS),
    m("protocols-tree-ll-cap-max", PROTOCOLS,
      "return min(busbw_simple_Bps / TREE_LL_DIVISOR, ll_cap)",
      "return max(busbw_simple_Bps / TREE_LL_DIVISOR, ll_cap)",
      T_PROTOCOLS),
    m("protocols-ll-full-rate", PROTOCOLS,
      "LL_FACTOR = 0.5",
      "LL_FACTOR = 1.0",
      T_PROTOCOLS),
    # --- the step --------------------------------------------------------------------
    m("step-tokens-ignore-cp", STEP,
      "tokens_mb = layout.micro_batch * seq // layout.cp  # tokens per microbatch per CP rank",
      "tokens_mb = layout.micro_batch * seq  # tokens per microbatch per CP rank",
      T_STEP),
    m("step-kv-one-tensor", STEP,
      "kv_bytes = layout.micro_batch * seq * 2 * kv * hd * act // tp  # K and V, all ranks",
      "kv_bytes = layout.micro_batch * seq * kv * hd * act // tp  # K and V, all ranks",
      T_STEP),
    m("step-pp-sends-one-way", STEP,
      "sends = 2 * sched.m * sched.v  # one forward and one backward send per chunk",
      "sends = sched.m * sched.v  # one forward and one backward send per chunk",
      T_STEP),
    m("stagework-sm-share-ignored", STAGEWORK,
      "self.exposed[key] += max(total - behind, self.share * total)",
      "self.exposed[key] += max(total - behind, 0.0)",
      T_STEP, "tests/analysis/test_stepshape.py"),
    m("pipeline-1f1b-warmup-off-by-one", PIPELINE,
      "warm = min(p - s - 1, m)",
      "warm = min(p - s, m)",
      T_PIPELINE),
    m("pipeline-interleaved-warmup", PIPELINE,
      "warm = min((p - s - 1) * 2 + (v - 1) * p, total)",
      "warm = min((p - s - 1) + (v - 1) * p, total)",
      T_PIPELINE),
    m("pipeline-backward-chunk-order", PIPELINE,
      "b_chunk = v - 1 - f_chunk",
      "b_chunk = f_chunk",
      T_PIPELINE),
    m("compute-tiles-floor", COMPUTE,
      "return math.ceil(x / TILE) * TILE",
      "return max(1, math.floor(x / TILE)) * TILE",
      T_COMPUTE),
    m("compute-gemm-flops-halved", COMPUTE,
      "return 2.0 * self.m * self.n * self.k * self.count",
      "return self.m * self.n * self.k * self.count",
      T_COMPUTE),
    m("compute-hbm-default-peak", COMPUTE,
      "DEFAULT_HBM_EFFICIENCY = 0.83",
      "DEFAULT_HBM_EFFICIENCY = 1.0",
      T_COMPUTE),
    # --- memory ----------------------------------------------------------------------
    m("memory-kv-projection-once", MEMORY,
      "attention = d * model.heads * hd * 2 + 2 * d * kv * hd",
      "attention = d * model.heads * hd * 2 + d * kv * hd",
      T_MEMORY),
    m("memory-embedding-not-sharded", MEMORY,
      "embed = model.vocab * model.hidden / layout.tp",
      "embed = model.vocab * model.hidden",
      T_MEMORY),
    m("memory-zero1-keeps-optimizer", MEMORY,
      "oshard, eoshard = ((1.0 / replicas, 1.0 / expert_replicas) if layout.zero >= 1",
      "oshard, eoshard = ((1.0 / replicas, 1.0 / expert_replicas) if layout.zero >= 2",
      T_MEMORY),
    m("memory-mlp-norm-one-tensor", MEMORY,
      "act += 4 * tokens * d / sp + mask * tokens * d / sp  # the MLP's norm; its dropout mask",
      "act += 2 * tokens * d / sp + mask * tokens * d / sp  # the MLP's norm; its dropout mask",
      T_MEMORY),
    m("memory-logits-bf16", MEMORY,
      "logits[-1] = 4 * tokens * model.hidden / sp + 4 * tokens * model.vocab / t",
      "logits[-1] = 4 * tokens * model.hidden / sp + 2 * tokens * model.vocab / t",
      T_MEMORY),
    # --- bisection -------------------------------------------------------------------
    m("bisection-one-half", FAT_TREE,
      "return capacity_Bps[limit] * (smaller / total), (",
      "return capacity_Bps[limit] * 0.5, (",
      "tests/analysis/test_bisection.py::test_uneven_halves_take_the_smaller_halfs_share"),
    m("bisection-switched-domain-whole", UP_SWITCHED,
      "return capacity_Bps[\"scaleup\"] / domains / 2, \"half the accelerators' scale-up links\"",
      "return capacity_Bps[\"scaleup\"] / domains, \"half the accelerators' scale-up links\"",
      T_BISECTION),
    m("bisection-mesh-one-link-a-pair", UP_FULL_MESH,
      "return pairs * up.mesh_links_per_pair * up.link_rate_Bps, (",
      "return pairs * up.link_rate_Bps, (",
      T_BISECTION),
    m("bisection-torus-length-2-crossed-twice", UP_TORUS,
      "crossings = 2 if up.torus.wraparound and longest > 2 else 1",
      "crossings = 2 if up.torus.wraparound else 1",
      T_BISECTION),
    m("bisection-tier-both-directions", BISECTION,
      "return {tier.label(int(c)): float(sums[c]) / 2 for c in np.flatnonzero(present)}",
      "return {tier.label(int(c)): float(sums[c]) for c in np.flatnonzero(present)}",
      T_BISECTION),
    # --- goodput ---------------------------------------------------------------------
    m("goodput-interval-without-2", GOODPUT,
      "return math.sqrt(2 * write_s * mtbi_s) * (1 + math.sqrt(x) / 3 + x / 9) - write_s",
      "return math.sqrt(write_s * mtbi_s) * (1 + math.sqrt(x) / 3 + x / 9) - write_s",
      T_GOODPUT),
    m("goodput-whole-cycle-lost", GOODPUT,
      "return max(0.0, share * (mtbi_s - cycle / 2) / (mtbi_s + downtime_s))",
      "return max(0.0, share * (mtbi_s - cycle) / (mtbi_s + downtime_s))",
      T_GOODPUT),
    m("goodput-repair-wait-off-by-one", GOODPUT,
      "downtime = a.detection_s + a.restart_s + no_spare * a.repair_s / (spares + 1)",
      "downtime = a.detection_s + a.restart_s + no_spare * a.repair_s / max(spares, 1)",
      T_GOODPUT),
    m("goodput-spares-floor", GOODPUT,
      "spares = math.ceil(a.spare_fraction * systems)",
      "spares = math.floor(a.spare_fraction * systems)",
      T_GOODPUT),
    m("goodput-degraded-parallel-off-by-one", GOODPUT,
      "return comm_share / max(line.parallel - 1, 1)",
      "return comm_share / max(line.parallel, 1)",
      T_GOODPUT),
    m("goodput-year-without-leap-day", GOODPUT,
      "SECONDS_PER_YEAR = 365.25 * SECONDS_PER_DAY",
      "SECONDS_PER_YEAR = 365 * SECONDS_PER_DAY",
      T_GOODPUT),
)

# Mutations that cannot change a result, each with the reason; a survivor listed here
# does not fail the run.
EQUIVALENT: dict[str, str] = {
    "build-asymmetric-rate-one-cable": (
        "the rows it sets are NIC-to-leaf and leaf-to-NIC links, and wire_clos adds every"
        " one of them with add_links' default of one cable (a NIC port is one cable to"
        " one leaf per plane), so cables[rows] * rate is rate for every accepted design"),
}


def _line_index(lines: list[str], mutation: Mutation) -> int:
    """The index of the one line whose text (indentation aside) is ``original``."""
    hits = [i for i, line in enumerate(lines) if line.strip() == mutation.original]
    if len(hits) != 1:
        raise SystemExit(f"{mutation.name}: {mutation.original!r} occurs {len(hits)} times"
                         f" in {mutation.path} (must be exactly once)")
    return hits[0]


def _write(path: Path, text: str) -> None:
    # a fresh mtime and no stale bytecode: the mutated and the restored file can have the
    # same size within the same second, which Python's pyc check would not tell apart
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        pyc.unlink()


def _run(copy: Path, tests: tuple[str, ...], timeout_s: float) -> str:
    """``passed``, ``failed`` or ``timeout`` for the selection run in ``copy``."""
    env = dict(os.environ, PYTHONPATH=str(copy))
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    with subprocess.Popen(command, cwd=copy, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True) as process:
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: pytest's workers too
            process.wait()
            return "timeout"
    return "passed" if code == 0 else "failed"


def _check_table() -> None:
    names = [mu.name for mu in MUTATIONS]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise SystemExit(f"duplicate mutation names: {sorted(duplicates)}")
    unknown = set(EQUIVALENT) - set(names)
    if unknown:
        raise SystemExit(f"EQUIVALENT names no mutation: {sorted(unknown)}")
    for mu in MUTATIONS:
        if mu.original == mu.replacement:
            raise SystemExit(f"{mu.name}: the replacement is the original")
        _line_index((ROOT / mu.path).read_text().splitlines(keepends=True), mu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run only these mutations (comma-separated names)")
    parser.add_argument("--list", action="store_true", help="print the table and exit")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip checking that each selection passes unmutated")
    args = parser.parse_args(argv)
    _check_table()
    chosen = list(MUTATIONS)
    if args.only:
        wanted = args.only.split(",")
        missing = set(wanted) - {mu.name for mu in MUTATIONS}
        if missing:
            parser.error(f"no mutation named {', '.join(sorted(missing))}")
        chosen = [mu for mu in MUTATIONS if mu.name in wanted]
    if args.list:
        for mu in chosen:
            print(f"{mu.name}  {mu.path}\n    - {mu.original}\n    + {mu.replacement}\n"
                  f"    {' '.join(mu.tests)}")
        return 0

    start = time.monotonic()
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="topomodel-mutate-") as tmp:
        copy = Path(tmp)
        for name in COPIED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.pyc", ".pytest_cache"))
            elif source.exists():
                shutil.copy2(source, copy / name)
        if not args.no_baseline:
            # a selection failing unmutated would count every mutation on it as killed
            for tests in dict.fromkeys(mu.tests for mu in chosen):
                outcome = _run(copy, tests, TIMEOUT_S)
                if outcome != "passed":
                    print(f"baseline {outcome}: {' '.join(tests)}", flush=True)
                    return 2
        for mu in chosen:
            path = copy / mu.path
            text = path.read_text()
            lines = text.splitlines(keepends=True)
            i = _line_index(lines, mu)
            indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
            ending = lines[i][len(lines[i].rstrip("\r\n")):]
            lines[i] = indent + mu.replacement + ending
            t0 = time.monotonic()
            _write(path, "".join(lines))
            try:
                outcome = _run(copy, mu.tests, mu.timeout_s)
            finally:
                _write(path, text)
            results[mu.name] = {"failed": "killed", "passed": "SURVIVED"}.get(outcome, outcome)
            print(f"{results[mu.name]:9} {mu.name:40} {time.monotonic() - t0:6.1f} s",
                  flush=True)

    survivors = [n for n, r in results.items() if r != "killed"]
    wall = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\n{len(results)} mutations: {len(results) - len(survivors)} killed,"
          f" {len(survivors)} not; wall {wall:.0f} s, CPU (children, user + system)"
          f" {usage.ru_utime:.0f} + {usage.ru_stime:.0f} s")
    unexplained = []
    for name in survivors:
        reason = EQUIVALENT.get(name)
        print(f"  {name} ({results[name]}): " + (f"equivalent: {reason}" if reason
                                                  else "NOT EXPLAINED"))
        if reason is None:
            unexplained.append(name)
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
