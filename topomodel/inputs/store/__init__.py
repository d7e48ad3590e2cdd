"""What the command line keeps on disk between processes, so a later command skips work
whose inputs have not changed (the built-in catalog, parsed once:
:mod:`~topomodel.inputs.store.catalogstore`). Every store falls back silently to doing
the work when its file is missing, stale, corrupt or cannot be written."""
