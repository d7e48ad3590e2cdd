"""The named assumptions of the decode model (:mod:`~topomodel.analysis.serving.decode`), each
with its default and reason; light to import, so the CLI's help can show them."""

from __future__ import annotations

from topomodel.inputs.records import documented

DEFAULT_BATCH = documented(
    "decode.DEFAULT_BATCH", 1,
    """Sequences a replica decodes at once when --batch is not given: one, the latency
    case (every step reads all the weights for a single token), which published
    batch-1 figures quote.""")

DEFAULT_DTYPE = documented(
    "decode.DEFAULT_DTYPE", "bf16",
    """Weight data type when --dtype is not given: bf16, the type the catalog's models
    are released in (Llama 3, Mixtral); fp8 is the common quantised serving type.""")

ACTIVATION_DTYPE = documented(
    "decode.ACTIVATION_DTYPE", "bf16",
    """Data type of the activations and logits the collectives carry: bf16 (16-bit), as
    TensorRT-LLM and vLLM all-reduce in the activation type even when weights and KV
    cache are fp8.""")

DEFAULT_COMM_OVERLAP = documented(
    "decode.DEFAULT_COMM_OVERLAP", 0.0,
    """Share of the decode step's communication hidden behind compute: none. Each TP
    all-reduce sits between two dependent matmuls of one batch, so nothing runs beside
    it unless the batch is split in two and the halves interleaved (DeepSeek's
    two-microbatch overlap); give --comm-overlap for that.""")
