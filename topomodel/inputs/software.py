"""Software-era presets: the bundle of switches one framework release runs a step with.

A measured training step depends on the framework as much as on the hardware: whether
activations are sequence-parallel, whether attention is one fused kernel, which
collectives hide behind which GEMMs, whether the optimizer state is sharded, in what
precision gradients are kept and reduced. A :class:`SoftwarePreset` names one such
bundle, by the step option keys of :data:`topomodel.analysis.options.OPTIONS`, so a
verb can say "as Megatron-Core 0.8 runs it" in one word, and every switch stays
settable on its own (a switch the user gives wins over the preset).

The default, :data:`DEFAULT_SOFTWARE`, is ``mcore-2024``: Megatron-Core with the
performance flags its README measures its model table with. The recipes that train
without dropout (Llama, Mixtral, DeepSeek, Nemotron) are the common case today, so the
presets after 2023 leave dropout off; pass ``--dropout`` for a GPT-3-era recipe.

Examples
--------
>>> PRESETS["nemo-2"].values["grad_precision"]
'bf16'
>>> resolved("mcore-2024", {"interleave": 4})["pp_blocking"]
False
>>> resolved("mcore-2024", {})["pp_blocking"]
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

INTERLEAVED_ONLY = "overlapped when interleaved"
"""A ``pp_blocking`` value: pipeline sends overlap compute only under the interleaved
schedule, blocking otherwise. Megatron-LM turns ``overlap_p2p_comm`` (on by default,
``--no-overlap-p2p-communication`` turns it off) off without a virtual pipeline:
"non-interleaved schedule does not support overlapping p2p communication"
(megatron/training/arguments.py, Megatron-LM d98e8a6)."""


@dataclass(frozen=True)
class SoftwarePreset:
    """One framework release's switches, by step option key, and where they come from."""

    name: str
    framework: str
    values: Mapping[str, Any]
    source: str
    notes: str = ""
    switches: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "switches", tuple(self.values))


_SHARED_KEYS = ("sequence_parallel", "flash_attention", "dropout", "grad_accumulation_fusion",
                "tp_overlap", "dp_overlap", "zero", "grad_precision", "main_grad_precision",
                "pp_blocking")


def _preset(name: str, framework: str, source: str, notes: str, *values: Any) -> SoftwarePreset:
    return SoftwarePreset(name, framework, dict(zip(_SHARED_KEYS, values, strict=True)),
                          source, notes)


PRESETS: dict[str, SoftwarePreset] = {p.name: p for p in (
    _preset("megatron-2021", "Megatron-LM as Narayanan et al. ran it, SC 2021",
            "Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters"
            " Using Megatron-LM, arXiv 2104.04473 (sections 3-4: no sequence parallelism,"
            " scatter/gather pipeline sends, gradients all-reduced after the backward by"
            " Megatron's local DDP); gradient-accumulation fusion arrived in 2022-02 and"
            " sequence parallelism with Korthikanti et al. (2022); its runs trained in fp16,"
            " whose gradients Megatron-LM keeps and all-reduces in fp16 unless"
            " --accumulate-allreduce-grads-in-fp32 (megatron/training/arguments.py)",
            "unfused attention with dropout, as GPT-3-era recipes trained",
            False, False, True, False, "none", False, 0, "fp16", "fp16", True),
    _preset("megatron-2022", "Megatron-LM as Korthikanti et al. ran it",
            "Korthikanti et al., Reducing Activation Recomputation in Large Transformer"
            " Models, arXiv 2205.05198 (sequence parallelism; the TP all-gather of the"
            " backward overlapped with the weight-gradient GEMM, section 4.2.2); no data"
            " parallelism in its runs, so no DP overlap; fp32 gradients for bf16",
            "FlashAttention was not yet in Megatron-LM; dropout as in GPT-3 recipes",
            True, False, True, True, "backward", False, 0, "fp32", "fp32", True),
    _preset("mcore-2024", "Megatron-Core 0.8 with the README flags",
            "NVIDIA/Megatron-LM README, 'Performance Benchmarking' (model table,"
            " Megatron-Core r0.8.0): --overlap-grad-reduce, --overlap-param-gather (which"
            " needs --use-distributed-optimizer), --tp-comm-overlap, PP overlap by default;"
            " Transformer Engine fused attention; bf16 keeps and reduces gradients in fp32"
            " unless --grad-reduce-in-bf16 (megatron/training/arguments.py)",
            "dropout off (Megatron-Core's TransformerConfig defaults to 0.1; the Llama,"
            " Mixtral and DeepSeek recipes set 0)",
            True, True, False, True, "gemm", True, 1, "fp32", "fp32", INTERLEAVED_ONLY),
    _preset("nemo-2", "NeMo 2 performance recipes (NVIDIA DGX Cloud benchmarking)",
            "NVIDIA/dgxc-benchmarking v25.04 and NeMo v2.2.1 recipes"
            " (pretrain_performance_optimizations, distributed_fused_adam_with_cosine_"
            "annealing, MegatronCommOverlapCallback): distributed optimizer, bf16 gradient"
            " reduction (grad_reduce_in_fp32 false, so the gradient buffer is bf16), TP"
            " comm-GEMM overlap, overlapped P2P, no dropout",
            "the recipes the measured DGX H100 steps in docs/validation.md ran",
            True, True, False, True, "gemm", True, 1, "bf16", "bf16", INTERLEAVED_ONLY),
)}
"""Every preset by name, oldest first."""

DEFAULT_SOFTWARE = "mcore-2024"
"""The preset a step runs with when none is named (see the module docstring)."""


def resolved(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The preset's values for the switches ``given`` does not set, with
    :data:`INTERLEAVED_ONLY` decided by ``given``'s ``interleave``."""
    out: dict[str, Any] = {}
    for key, value in PRESETS[name].values.items():
        if given.get(key) is not None:
            continue
        if value == INTERLEAVED_ONLY:
            value = int(given.get("interleave") or 1) == 1
        out[key] = value
    return out
