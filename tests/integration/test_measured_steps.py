"""Six measured training steps on DGX H100 against the model (published-figures.md,
"Measured training steps on DGX H100"; NVIDIA/dgxc-benchmarking v24.11.1 and v25.04).

Each row runs on the DGX H100 SuperPOD example (8 x H100 SXM and 8 x 400G ConnectX-7
per node on Quantum-2) with the ``nemo-2`` software preset, which is what the recipes
ran (distributed optimizer, bf16 gradient reduction, TP comm-GEMM overlap, overlapped
P2P, no dropout), plus each recipe's own switches. The measured step time is never an
input. docs/validation.md gives every row before and after, and what each miss is.
"""

from pathlib import Path

import numpy as np
import pytest

from topomodel.analysis.options import step_inputs
from topomodel.analysis.training.step import step_time
from topomodel.fabric.build import build_fabric
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import Model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

STEP_TOLERANCE = 0.05
"""The issue's tolerance for each row's step time (#35 item 7)."""

def _options(**options):
    return options


ROWS = {  # name: (measured step s, the recipe's options)
    "Nemotron-4 340B": (4.61, _options(
        model="nemotron4-340b", tp=8, pp=8, interleave=12, dp=2, micro_batch=1,
        global_batch=32, seq=4096, recompute="selective")),
    "Nemotron-4 15B": (2.83, _options(
        model="nemotron4-15b", tp=4, pp=1, dp=4, micro_batch=4, global_batch=64,
        seq=4096)),
    "GPT-3 175B": (8.309, _options(
        model="gpt3-175b", tp=4, pp=8, interleave=6, dp=4, micro_batch=1,
        global_batch=256, seq=2048, dropout=True)),
    "Llama 3.1 8B": (12.27, _options(
        model="llama3-8b", tp=1, pp=1, cp=2, dp=4, micro_batch=1, global_batch=128,
        seq=8192)),
    "Llama 3.1 70B": (14.66, _options(
        model="llama3-70b", tp=4, pp=4, interleave=5, cp=2, dp=2, micro_batch=1,
        global_batch=128, seq=8192)),
    "Llama 3.1 405B": (19.78, _options(
        model="llama3-405b", tp=8, pp=8, interleave=8, cp=2, dp=4, micro_batch=1,
        global_batch=256, seq=8192)),
}


@pytest.fixture(scope="module")
def modelled():
    """The model's step of every row, by name."""
    design, catalog = load_design(EXAMPLES / "dgx-h100-superpod.yaml")
    fabric = build_fabric(design, catalog)
    out = {}
    for name, (_, options) in ROWS.items():
        inputs = step_inputs({**options, "software": "nemo-2"})
        model = catalog.get(inputs.model, Model)
        out[name] = step_time(fabric, model, inputs.layout, inputs.assumptions)
    return out


MEMORY_MISS = {"Nemotron-4 340B"}
"""Rows the model says need more than 80 GB although they ran (MEMORY_MISS_REASON)."""
MEMORY_MISS_REASON = (
    "85.3 GB: the first stage holds the 256k-token embedding (5.9 GB of weights, gradients"
    " and optimizer state over DP 2) beside 103 one-layer chunks of activations in flight"
    " (interleaved 1F1B, 12 virtual stages); docs/validation.md says what may be missing")


def test_every_row_runs_the_recipes_switches(modelled):
    for name, result in modelled.items():
        assert result.layout.software == "nemo-2" and result.layout.zero == 1, name


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=MEMORY_MISS_REASON))
    if n in MEMORY_MISS else n for n in ROWS])
def test_every_row_fits_80_gb_as_it_ran(modelled, name):
    assert modelled[name].fits, f"{name} must fit 80 GB: it ran"


REMAINING_MISS = (
    "modelled fast beyond 5 %: with the memory-bound passes counted and attention at its"
    " sequence length, GEMMs are 85-96 % of a layer's compute, timed at MAMF's burst"
    " best shape x SUSTAINED_VS_BURST (a chart read-off, 0.83-0.88); Transformer Engine's"
    " chunked comm-GEMM overlap (+0.3 to +0.8 % as a what-if), kernel-launch gaps (no"
    " sourced per-kernel figure), the data loader and logging are not modelled"
    " (docs/validation.md)")
MISSES = {"Nemotron-4 340B", "Nemotron-4 15B", "GPT-3 175B", "Llama 3.1 70B",
          "Llama 3.1 405B"}
"""The rows outside the tolerance today (-5.7, -8.8, -6.0, -7.2 and -7.8 %; Llama 3.1 8B
is +0.6 %); each is a strict xfail, so a change that brings one within 5 % fails here
until it is moved out of this set."""


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=REMAINING_MISS))
    if n in MISSES else n for n in ROWS])
def test_measured_step_time_within_5_percent(modelled, name):
    measured = ROWS[name][0]
    result = modelled[name]
    assert result.step_time_s == pytest.approx(measured, rel=STEP_TOLERANCE), (
        f"{name}: {result.step_time_s:.2f} s vs {measured} s measured")


@pytest.mark.xfail(strict=True, reason="the mean error is -5.8 %: " + REMAINING_MISS)
def test_the_errors_do_not_all_lean_one_way_by_more_than_the_tolerance(modelled):
    """The mean signed error: a model fast (or slow) on every row has a missing (or
    extra) cost, not noise."""
    errors = [modelled[n].step_time_s / ROWS[n][0] - 1 for n in ROWS]
    assert abs(np.mean(errors)) <= STEP_TOLERANCE, [f"{e:+.1%}" for e in errors]
