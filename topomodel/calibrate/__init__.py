"""Calibration: what a running cluster measured, held against the model and turned into
catalog overlays: nccl-tests runs fitted into link efficiencies and a launch latency
(:mod:`topomodel.calibrate.nccl`, the overlay :mod:`topomodel.calibrate.overlay`), an
NCCL topology dump turned into a system (:mod:`topomodel.calibrate.nccltopo`), profiler
traces against the step and collective models (:mod:`topomodel.calibrate.trace`).

Each kind of file ``calibrate`` reads is one entry of
:data:`~topomodel.calibrate.inputs.INPUT_KINDS` (how to recognise it, how to read it,
which fit its records feed).
"""
