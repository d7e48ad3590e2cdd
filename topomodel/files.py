"""Files: reading inputs safely, writing outputs atomically, values as plain JSON types.

Inputs (:func:`read_input_text`) are regular files of at most
:data:`MAX_INPUT_FILE_BYTES`: a device (``/dev/zero``), a pipe or terminal
(``/dev/stdin``) or a folder is refused at once instead of read until memory runs out or
blocking. A file another file names (a design's or sweep file's ``catalogs:``) must lie
in the naming file's folder tree or in a folder the user allowed (:func:`outside_folders`).

Outputs (:func:`atomic_write`) are written to an unnamed temporary file in the target's
folder (Linux ``O_TMPFILE``; elsewhere a named one removed on every error, Ctrl-C
included), then moved into place: a failed, interrupted or killed write leaves nothing
half-written, and a ``kill -9`` leaves no temporary file behind either. A symbolic link
where an output goes is refused (:func:`refuse_symlink`), never replaced or written
through; a folder output (a review, a table per file) that is itself a symbolic link is
refused too (:func:`refuse_output_folder`), and nothing is written into a system folder
(:data:`SYSTEM_FOLDERS`, :data:`SYSTEM_TREES`). The file gets the mode an ordinary
``open`` would give it (0666 less the umask).
Several files of one output (:func:`atomic_files`: a table per file, an export's nodes
and links) are all written before any is moved into place, so a failure leaves none of
them; the folders made for a failed write are removed again.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from topomodel.errors import UsageError

MAX_INPUT_FILE_BYTES = 16 * 1024 * 1024
"""Largest input file (catalog, design, sweep), bytes. The built-in catalogs together are
under 200 kB and a design or sweep file a few kB, so 16 MiB is generous for any real
input while refusing a runaway read at once."""


SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
                "/proc", "/sbin", "/sys", "/usr")
"""Folders of the operating system (symbolic links resolved): no output is written in
them or anywhere under them. Nothing of a user's belongs there, and /dev, /proc and /sys
are not even files."""

SYSTEM_FOLDERS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/var",
                  "/var/cache", "/var/lib", "/var/log", "/var/spool")
"""Folders (symbolic links resolved) no output is written directly into, though a folder
under them may hold one (``/var/tmp/run1``, ``/home/me``): their entries are the
system's, not a report's."""


def read_input_text(path: str | Path, *, limit_bytes: int = MAX_INPUT_FILE_BYTES) -> str:
    """The text (UTF-8) of the regular file ``path``, at most ``limit_bytes`` bytes.

    Opened without blocking (a FIFO with no writer does not hang) and checked before a
    byte is read.

    Raises
    ------
    OSError
        With a ``strerror`` saying what is wrong: missing, unreadable, not a regular
        file, or larger than ``limit_bytes``; never with the file's content.
    UnicodeDecodeError
        For a file that is not UTF-8 text.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = "a folder" if stat.S_ISDIR(info.st_mode) else (
                "a device, pipe or socket")
            raise OSError(errno.EINVAL, f"not a regular file ({what})", str(path))
        if info.st_size > limit_bytes:
            raise OSError(errno.EFBIG, f"larger than the {limit_bytes:,} bytes an input"
                          " file may have", str(path))
        chunks, left = [], limit_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:  # it grew while being read
            raise OSError(errno.EFBIG, f"larger than the {limit_bytes:,} bytes an input"
                          " file may have", str(path))
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def outside_folders(path: str | Path, folders: Iterable[str | Path]) -> bool:
    """Whether ``path``, symbolic links resolved, lies outside every one of ``folders``
    (each resolved too, and taken with everything under it).

    Examples
    --------
    >>> outside_folders("/srv/designs/catalogs/x.yaml", ["/srv/designs"])
    False
    >>> outside_folders("/srv/designs/../secret.yaml", ["/srv/designs"])
    True
    """
    real = Path(os.path.realpath(path))
    return not any(real.is_relative_to(os.path.realpath(folder)) for folder in folders)


def refuse_symlink(path: str | Path) -> None:
    """Refuse to write where a symbolic link is: it would be replaced, or written through
    to whatever it points at.

    Raises
    ------
    UsageError
        When ``path`` is a symbolic link (dangling or not).
    """
    if os.path.islink(path):
        raise UsageError(f"{path}: is a symbolic link; refusing to write through it or"
                         " replace it (give the real path, or remove the link)")


def system_folder(folder: str | Path) -> str | None:
    """The system folder ``folder`` is, or lies under (:data:`SYSTEM_TREES`,
    :data:`SYSTEM_FOLDERS`; symbolic links resolved), or ``None``.

    Examples
    --------
    >>> system_folder("/"), system_folder("/etc/ssh"), system_folder("/var/tmp/run1")
    ('/', '/etc', None)
    """
    real = Path(os.path.realpath(folder))
    if str(real) in SYSTEM_FOLDERS:
        return str(real)
    return next((tree for tree in SYSTEM_TREES if real.is_relative_to(tree)), None)


def refuse_system_folder(folder: str | Path) -> None:
    """Refuse to write into ``folder`` when it is a system folder (:func:`system_folder`).

    Raises
    ------
    UsageError
        When it is one.
    """
    if (system := system_folder(folder)) is not None:
        where = "" if os.path.realpath(folder) == system else f" ({system})"
        raise UsageError(f"{folder}: is a system folder{where}; refusing to write into it"
                         " (give a folder of your own)")


def refuse_output_folder(folder: str | Path) -> None:
    """Refuse a folder output (``-o DIR``) that is a symbolic link or a system folder.

    Raises
    ------
    UsageError
        When ``folder`` is a symbolic link (dangling or not) or a system folder.
    """
    if os.path.islink(folder):
        raise UsageError(f"{folder}: is a symbolic link; refusing to write through it"
                         " (give the real folder, or remove the link)")
    refuse_system_folder(folder)


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Create ``path`` (and its folders) through ``write(stream)``; return the path.

    Raises
    ------
    UsageError
        When ``path`` is a symbolic link.
    OSError
        When the folder cannot be written; nothing is left behind.
    """
    return atomic_files(Path(path).parent, [(Path(path).name, write)])[0]


def atomic_files(folder: str | Path, parts: Sequence[tuple[str, Callable[[IO[bytes]], object]]]
                 ) -> list[Path]:
    """Create the files ``folder / name`` through ``write(stream)``, for each (name,
    write) of ``parts``, all or none: each is written whole to a temporary file first,
    and only when every one is written are they moved into place; on an error (a full
    disk, Ctrl-C) the temporary files and the folders made for them are removed. A
    folder that does not exist yet is made only once every file is written (they are
    written in the nearest folder above it that exists, and moved in): a process killed
    while it writes (``kill -9``, which nothing can clean up after) leaves no empty one.

    Raises
    ------
    UsageError
        When a target is a symbolic link, or the folder a system folder.
    OSError
        When the folder cannot be written; nothing is left behind.
    """
    base = Path(folder)
    refuse_system_folder(base)
    targets = [base / name for name, _ in parts]
    for target in targets:
        refuse_symlink(target)
    staging = nearest_existing(base)  # base itself, if it exists
    if not staging.is_dir():  # a file where a folder should be: say so, not "file exists"
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(staging))
    made: list[Path] = []
    streams: list[tuple[IO[bytes], str | None]] = []  # each file, and its temporary name

    def clean_up() -> None:
        for _, named in streams:
            if named is not None and os.path.lexists(named):
                os.unlink(named)
        remove_folders(made)

    target = targets[0] if targets else base
    try:
        for (_, write), target in zip(parts, targets, strict=True):
            handle = _unnamed_file(staging)
            temporary: str | None = None
            if handle is None:  # a named temporary file, removed on every error
                handle, temporary = tempfile.mkstemp(dir=staging, prefix=f".{target.name}.")
                os.fchmod(handle, 0o666 & ~umask())
            streams.append((os.fdopen(handle, "wb"), temporary))
            write(streams[-1][0])
            streams[-1][0].flush()
        made = make_folders(base)  # every file written: the folders only now
        for k, ((stream, named), target) in enumerate(zip(streams, targets, strict=True)):
            if named is None:  # name the finished file beside the target, then move it:
                name = _free_name(target)  # the name exists only between these calls
                streams[k] = (stream, name)
                _link_unnamed(stream.fileno(), name)
            else:
                name = named
            os.replace(name, target)
            streams[k] = (stream, None)
    except OSError as exc:
        clean_up()
        if exc.filename is None:  # a full disk says so without a name: name the file
            raise OSError(exc.errno, exc.strerror, str(target)) from None
        raise
    except BaseException:
        clean_up()
        raise
    finally:
        for stream, _ in streams:
            stream.close()
    return targets


def make_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and the folders above it that are missing; those made, outermost
    first."""
    here = nearest_existing(folder)
    missing = [folder, *folder.parents][:len(folder.parts) - len(here.parts)]
    if not here.is_dir():  # a file where a folder should be: say so, not "file exists"
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(here))
    folder.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def nearest_existing(path: Path) -> Path:
    """``path``, or the nearest folder above it, that exists (or the root)."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def remove_folders(made: Sequence[Path]) -> None:
    """Remove the folders :func:`make_folders` made, innermost first, while empty."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return


def _unnamed_file(folder: Path) -> int | None:
    """A file descriptor of a new unnamed file in ``folder`` (``O_TMPFILE``), or None
    where the platform or file system has none."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not os.path.isdir("/proc/self/fd"):  # the file is named through /proc
        return None
    try:
        return os.open(folder, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
            return None
        raise


def _link_unnamed(fd: int, name: str) -> None:
    """Give the unnamed file open as ``fd`` the name ``name`` (``linkat`` following the
    ``/proc/self/fd`` link, which a ``dir_fd`` makes Python ask for)."""
    proc = os.open("/proc/self/fd", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.link(str(fd), name, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)


def _free_name(target: Path) -> str:
    """A name beside ``target`` that no file has: ``.NAME.`` and 8 random hex digits."""
    for _ in range(100):
        name = target.parent / f".{target.name}.{os.urandom(4).hex()}"
        if not os.path.lexists(name):
            return str(name)
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target))


def atomic_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda stream: stream.write(data))


def umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_json(value: Any) -> Any:
    """``value`` in plain JSON types: tuples to lists, numpy scalars to Python, NaN and
    infinities to None (JSON has none), keys to text.

    Examples
    --------
    >>> plain_json({"a": (1, float("nan")), 2: [0.5]})
    {'a': [1, None], '2': [0.5]}
    """
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
