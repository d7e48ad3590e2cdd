"""Calibration: what a running cluster measured, held against the model and turned into
catalog overlays: an NCCL topology dump turned into a system
(:mod:`topomodel.calibrate.nccltopo`), profiler traces against the step and collective
models (:mod:`topomodel.calibrate.trace`)."""
