"""Measured runs against the model: what a cluster's measurements say, and where the
model disagrees (profiler traces: :mod:`topomodel.calibrate.trace`)."""
