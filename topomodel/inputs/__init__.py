"""The input stage: what a user hands the tool, read and checked before anything is built.

Units and quantities (:mod:`~topomodel.inputs.units`), the YAML reader that keeps line
numbers (:mod:`~topomodel.inputs.yamlsource`), the record readers every file shares
(:mod:`~topomodel.inputs.records`), the catalog's part types and their loader
(:mod:`~topomodel.inputs.parts`, :mod:`~topomodel.inputs.catalog`), the design file and
its JSON Schema (:mod:`~topomodel.inputs.design`, :mod:`~topomodel.inputs.schema`), the
citations the catalogs point at (:mod:`~topomodel.inputs.sources`) and the nccl-tests log
readers of measurements (:mod:`~topomodel.inputs.measured`). Nothing here builds a fabric.
"""
