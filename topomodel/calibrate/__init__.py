"""Calibration: what a running cluster measured, held against the model and turned into
catalog overlays. One call (:func:`topomodel.calibrate.calibration.calibrate_inputs`)
reads every input: nccl-tests runs (:mod:`topomodel.calibrate.nccl`) and a job's
profiler traces (:mod:`topomodel.calibrate.tracefit`, measured by
:mod:`topomodel.calibrate.tracesteps`) are measured curves, fitted together into link
efficiencies and a launch latency (:mod:`topomodel.calibrate.fit`); an NCCL topology dump
becomes a system (:mod:`topomodel.calibrate.nccltopo`); all are written as one overlay
(:mod:`topomodel.calibrate.overlay`). Traces against the step and collective models:
:mod:`topomodel.calibrate.trace` (``check-trace``, and ``calibrate --explain`` through
:mod:`topomodel.calibrate.explain`).

Each kind of file ``calibrate`` reads is one entry of
:data:`~topomodel.calibrate.inputs.INPUT_KINDS` (how to recognise it, how to read it,
which fit its records feed).
"""
