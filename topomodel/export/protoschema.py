"""Protocol Buffers message classes from a ``.proto`` file, made at run time.

A shipped schema (``et_def.proto``, Chakra's execution trace) becomes Python classes
without ``protoc``: the file is read into a ``FileDescriptorProto`` and protobuf's
message factory makes a class per message. The reader takes the part of proto3 that
schema uses: ``syntax``, ``package``, ``message`` with scalar, message and enum fields
(``repeated`` or not) and ``oneof`` groups, top-level ``enum``, and ``//`` comments.
Anything else is refused with its line, so a schema edited past that subset fails
loudly instead of losing fields. protobuf is imported only here, when a class is made
(the ``export`` extra installs it).

Length-delimited streams (:func:`write_delimited`, :func:`read_delimited`) are how
Chakra frames a trace file: each message is preceded by its size as a varint (Chakra's
``encodeMessage``/``decodeMessage``, src/third_party/utils/protolib.py, and the feeder's
``ProtoInputStream``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from topomodel.errors import UsageError

SCALARS = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
           "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes")
"""proto3 scalar types, named as FieldDescriptorProto's ``TYPE_`` constants are."""

_TOKEN = re.compile(r'[A-Za-z_][A-Za-z0-9_.]*|\d+|"[^"]*"|[{};=]')


def _tokens(text: str, source: str) -> Iterator[tuple[str, int]]:
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("//", 1)[0]
        rest = _TOKEN.sub(" ", code).strip()
        if rest:
            raise UsageError(f"{source}:{number}: cannot read {rest!r} in a .proto schema")
        for tok in _TOKEN.findall(code):
            yield tok, number


# C901: a recursive-descent reader, one branch per statement of the grammar it reads
def file_descriptor(text: str, name: str) -> Any:  # noqa: C901
    """The ``FileDescriptorProto`` of the proto3 schema ``text`` (file name ``name``).

    Raises
    ------
    UsageError
        ``name:line: ...`` for syntax outside the subset this module reads.
    """
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FileDescriptorProto(name=name, syntax="proto3")
    toks = list(_tokens(text, name))
    pos = 0

    def take(expected: str | None = None) -> str:
        nonlocal pos
        if pos >= len(toks):
            raise UsageError(f"{name}: ends early")
        tok, line = toks[pos]
        if expected is not None and tok != expected:
            raise UsageError(f"{name}:{line}: expected {expected!r}, found {tok!r}")
        pos += 1
        return tok

    def field(msg: Any, label: int, oneof: int | None) -> None:
        kind, fname = take(), take()
        take("=")
        number = int(take())
        take(";")
        f = msg.field.add(name=fname, number=number, label=label)
        if kind in SCALARS:
            f.type = getattr(descriptor_pb2.FieldDescriptorProto, "TYPE_" + kind.upper())
        else:  # a message or enum of this package: resolved once every name is known
            f.type_name = kind
        if oneof is not None:
            f.oneof_index = oneof

    def message() -> None:
        msg = fd.message_type.add(name=take())
        take("{")
        optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
        while toks[pos][0] != "}":
            if toks[pos][0] == "oneof":
                take()
                msg.oneof_decl.add(name=take())
                take("{")
                while toks[pos][0] != "}":
                    field(msg, optional, len(msg.oneof_decl) - 1)
                take("}")
            elif toks[pos][0] == "repeated":
                take()
                field(msg, descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED, None)
            else:
                field(msg, optional, None)
        take("}")

    while pos < len(toks):
        tok, line = toks[pos]
        if tok == "syntax":
            take(), take("="), take('"proto3"'), take(";")
        elif tok == "package":
            take()
            fd.package = take()
            take(";")
        elif tok == "message":
            take()
            message()
        elif tok == "enum":
            take()
            enum = fd.enum_type.add(name=take())
            take("{")
            while toks[pos][0] != "}":
                value = take()
                take("=")
                enum.value.add(name=value, number=int(take()))
                take(";")
            take("}")
        else:
            raise UsageError(f"{name}:{line}: cannot read {tok!r} in a .proto schema")
    _resolve(fd, name)
    return fd


def _resolve(fd: Any, name: str) -> None:
    """Point every message or enum field at its type, by full name."""
    from google.protobuf import descriptor_pb2

    messages = {m.name for m in fd.message_type}
    enums = {e.name for e in fd.enum_type}
    for msg in fd.message_type:
        for f in msg.field:
            if not f.type_name:
                continue
            if f.type_name in messages:
                f.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
            elif f.type_name in enums:
                f.type = descriptor_pb2.FieldDescriptorProto.TYPE_ENUM
            else:
                raise UsageError(f"{name}: {msg.name}.{f.name} has unknown type {f.type_name}")
            f.type_name = f".{fd.package}.{f.type_name}"


@functools.cache
def messages(path: str) -> dict[str, Any]:
    """The message classes of the schema at ``path``, by message name, with its enums'
    values by name under ``"enums"`` (made once per process).

    Raises
    ------
    UsageError
        When protobuf is not installed (``pip install 'topomodel[export]'``).
    """
    try:
        from google.protobuf import descriptor_pool, message_factory
    except ImportError:
        raise UsageError("this export needs protobuf: pip install 'topomodel[export]'"
                         ) from None
    fd = file_descriptor(Path(path).read_text(encoding="utf-8"), Path(path).name)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fd.SerializeToString())
    file = pool.FindFileByName(fd.name)
    out: dict[str, Any] = {m: message_factory.GetMessageClass(d)
                           for m, d in file.message_types_by_name.items()}
    out["enums"] = {v.name: v.number for e in fd.enum_type for v in e.value}
    return out


def write_delimited(stream: IO[bytes], message: Any) -> None:
    """Write ``message`` preceded by its size in bytes as a base-128 varint."""
    data = message.SerializeToString()
    size = len(data)
    head = bytearray()
    while True:
        low, size = size & 0x7F, size >> 7
        head.append(low | (0x80 if size else 0))
        if not size:
            break
    stream.write(bytes(head) + data)


def read_delimited(data: bytes) -> Iterator[bytes]:
    """The messages of a length-delimited stream, as serialized bytes.

    Raises
    ------
    ValueError
        When a size runs past the end of ``data``.
    """
    pos = 0
    while pos < len(data):
        size = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if pos + size > len(data):
            raise ValueError(f"a message of {size} bytes runs past the end at byte {pos}")
        yield data[pos:pos + size]
        pos += size
