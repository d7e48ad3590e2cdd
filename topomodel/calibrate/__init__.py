"""Measured runs in, a calibrated model out: fit the physical figures the model reads
(link efficiencies, latencies) to what a running cluster measured, and write them as a
catalog overlay with provenance ``measured``.

Each kind of input is one entry of :data:`~topomodel.calibrate.inputs.INPUT_KINDS` (how
to recognise a file, how to read it, how to fit from it): nccl-tests text logs and
``-J`` JSON files now; profiler traces and NCCL topology dumps are added the same way.
"""
