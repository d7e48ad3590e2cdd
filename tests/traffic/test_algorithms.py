"""The algorithm registry: one record per algorithm, read by every verb alike."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from topomodel.analysis.collectives.collective import run_collective
from topomodel.analysis.collectives.protocols import NcclShape, nccl_algorithm
from topomodel.analysis.training.step import StepAssumptions, step_time
from topomodel.analysis.training.stepshape import UNSHARED_ALGORITHMS
from topomodel.cli.flags import ALGORITHM_HELP
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model
from topomodel.traffic.algorithms import (
    REGISTRY,
    algorithm,
    algorithms_for,
    auto_candidates,
    help_text,
)
from topomodel.traffic.collectives import ALGORITHMS
from topomodel.traffic.communicators import CollectiveError
from topomodel.traffic.layout import Layout
from topomodel.vocabulary import COLLECTIVES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@cache
def example(name):
    return build_fabric(*load_design(EXAMPLES / f"{name}.yaml"))


def test_every_collective_has_a_default_and_auto_tries_only_what_serves_it():
    for collective in COLLECTIVES:
        served = algorithms_for(collective)
        assert served and ALGORITHMS[collective] == served
        tried = auto_candidates(example("hgx-h100-server"), collective, 64)
        assert tried and set(tried) <= set(served) and tried[0] == served[0]


def test_auto_tries_only_what_the_fabric_can_run():
    # NVSwitch chips reduce, no torus; a PCIe workstation has neither
    assert auto_candidates(example("hgx-h100-server"), "allreduce", 8) == (
        "ring", "tree", "innetwork", "nvlstree")
    assert auto_candidates(example("rtx4090-workstation"), "allreduce", 4) == ("ring", "tree")


def test_nvls_off_leaves_auto_without_nvls_and_nvlstree():
    """A recipe's NCCL_NVLS_ENABLE=0 (``scaleup.nvls: false``): the NVSwitch chips
    reduce nothing, so ``auto`` tries neither NVLS (``innetwork`` in a system) nor
    NVLS-Tree, and 8 x H100 AllReduce is the ring's (R20: 367 GB/s with NVLS off)."""
    hgx = example("hgx-h100-server")
    off = dataclasses.replace(hgx, design=dataclasses.replace(
        hgx.design, scaleup=dataclasses.replace(hgx.design.scaleup, nvls=False)))
    assert auto_candidates(off, "allreduce", 8) == ("ring", "tree")
    run = run_collective(off, "allreduce", 8 * 2**30, ["all"])
    assert run.algorithm == "ring" and run.busbw_Bps / 1e9 == pytest.approx(367.2, rel=0.10)


def test_an_algorithm_auto_skips_says_why():
    skipped = [a for a in REGISTRY.values() if not a.auto]
    assert {a.name for a in skipped} == {"rhd", "hierarchical", "pairwise"}
    assert all("run by name" in a.why_not_auto for a in skipped)


def test_the_failure_sharing_set_is_the_algorithms_that_read_switch_state():
    assert set(UNSHARED_ALGORITHMS) == {"innetwork", "nvlstree"}


def test_nccl_names_come_from_the_records():
    assert nccl_algorithm("innetwork", NcclShape(8, 1)) == "nvls"
    assert nccl_algorithm("innetwork", NcclShape(16, 2)) == "collnet_direct"
    assert nccl_algorithm("hierarchical", NcclShape(16, 2)) == "ring"
    assert nccl_algorithm("nvlstree", NcclShape(16, 2)) == "nvls_tree"


def test_the_cli_help_is_the_registrys():
    assert help_text() == ALGORITHM_HELP


def test_an_unknown_name_is_one_error_naming_the_choices():
    with pytest.raises(CollectiveError, match="unknown algorithm 'bogus'; choose from ring"):
        algorithm("bogus")


def test_two_ranks_get_the_default_alone():
    server = example("hgx-h100-server")
    assert auto_candidates(server, "allreduce", 2) == ("ring",)
    assert auto_candidates(server, "alltoall", 2) == ("direct",)


def test_the_step_times_a_collective_as_route_does_on_one_hgx_h100():
    # drift: the step tried ring, tree and hierarchical, route ring, tree, innetwork,
    # nvlstree and torus, so one HGX H100's TP all-reduce took NVLS in route and a ring
    # in the step (its 388 ms of TP all-reduce a step is 275 ms with NVLS, as route's)
    fabric = example("hgx-h100-server")
    model = fabric.catalog.get("llama3-8b", Model)
    layout = Layout(tp=8, global_batch=8, sequence_parallel=False)
    assumptions = StepAssumptions()
    result = step_time(fabric, model, layout, assumptions)
    tp = [c for c in result.comm if c.kind == "tp" and c.collective == "allreduce"]
    assert tp
    for call in tp:
        alone = run_collective(fabric, "allreduce", call.size_bytes, ["system"],
                               time_model=assumptions.time)
        assert call.algorithm == alone.algorithm == "innetwork"
        assert call.time_s == pytest.approx(alone.time_s * call.calls, rel=1e-9)


def test_the_cli_parser_imports_no_algorithm():
    # the help is text so every verb's start-up stays free of numpy and pandas
    code = ("import sys, topomodel.cli.parser; "
            "print('pandas' in sys.modules, 'topomodel.traffic.algorithms' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]


def test_the_search_skips_only_what_does_not_apply():
    from topomodel.analysis.collectives.collective import fastest
    from topomodel.errors import RouterLimit
    from topomodel.traffic.collectives import collective_traffic
    from topomodel.traffic.communicators import NotApplicable

    fabric = example("hgx-h100-server")
    groups = fabric.accelerators.reshape(1, 8)

    def build(alg):
        if alg == "tree":
            raise ValueError("a bug in a generator")
        return collective_traffic(fabric, "allreduce", groups, 2**20, algorithm=alg)

    with pytest.raises(ValueError, match="a bug in a generator"):  # it was skipped
        fastest(fabric, build, ("ring", "tree"))
    assert issubclass(NotApplicable, ValueError) and issubclass(RouterLimit, ValueError)
    with pytest.raises(NotApplicable, match="torus needs a torus scale-up domain"):
        collective_traffic(fabric, "allreduce", groups, 2**20, algorithm="torus")
    alg, *_ = fastest(fabric, lambda a: collective_traffic(
        fabric, "allreduce", groups, 2**20, algorithm=a), ("torus", "ring"))
    assert alg == "ring"
