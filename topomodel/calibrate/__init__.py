"""Calibration: catalog overlays made from what a running cluster measured or reported
(an NCCL topology dump turned into a system, :mod:`topomodel.calibrate.nccltopo`)."""
