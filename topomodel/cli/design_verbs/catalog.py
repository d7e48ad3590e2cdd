"""``topomodel catalog list | show ID | import-nccl-topo DUMP -o FILE``: which hardware
entries does the catalog hold, every figure of one with its source, and which catalog
system is the node an NCCL topology dump describes?"""

from __future__ import annotations

import argparse

from topomodel.report.output import Report


def run(args: argparse.Namespace) -> Report:
    from topomodel.inputs.catalog import load_catalog
    from topomodel.report.catalog import catalog_list, catalog_show

    if args.catalog_verb == "import-nccl-topo":
        return _import_nccl_topo(args)
    catalog = load_catalog(args.catalog)
    if args.catalog_verb == "list":
        return catalog_list(catalog, args.kind)
    return catalog_show(catalog, args.id)


def _import_nccl_topo(args: argparse.Namespace) -> Report:
    import tempfile
    from pathlib import Path

    from topomodel.calibrate.nccltopo import overlay_yaml, system_from_dump
    from topomodel.cli.shared import writable
    from topomodel.errors import InputError, Problem
    from topomodel.files import atomic_bytes
    from topomodel.inputs.catalog import load_catalog
    from topomodel.inputs.measured.ncclxml import read_topology
    from topomodel.report.catalog import topology_import_report

    writable(args.output)
    dump = read_topology(args.dump)
    catalog = load_catalog(args.catalog)
    result = system_from_dump(dump, catalog, ident=args.system_id,
                              accelerator=args.accelerator)
    text = overlay_yaml(result)
    with tempfile.TemporaryDirectory() as folder:  # the overlay must load before it is written
        trial = Path(folder) / Path(args.output).name
        trial.write_text(text, encoding="utf-8")
        try:
            load_catalog([*args.catalog, trial])
        except InputError as exc:  # say it of the dump, not of a temporary file
            first = exc.problems[0]
            where = f"{first.key_path}: " if first.key_path else ""
            raise InputError([Problem(dump.file, None, "", "the system made of it is not"
                                      f" a valid catalog system: {where}{first.message}")]
                             ) from None
    path = atomic_bytes(args.output, text.encode("utf-8"))
    return topology_import_report(result, str(path))
