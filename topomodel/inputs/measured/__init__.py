"""Readers of what a running cluster measured: nccl-tests logs and their launch lines.

Each reader parses one documented format at the edge and raises one-line
:class:`~topomodel.errors.InputError`\\ s naming the file and line; nothing here builds a
fabric or runs the model.
"""
