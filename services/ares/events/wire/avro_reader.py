"""Compiled Avro readers: one generated Python function per parsed schema.

fastavro's ``schemaless_reader`` walks the schema on every call (type names compared as
strings, the union's branches resolved, options looked up per value): most of what
decoding a replayed event costs, and decoding was two thirds of a recovery's CPU. ares
reads the same few schemas millions of times, so ``compile_reader`` turns a parsed writer
schema into straight-line Python once — each field a varint and a slice, single-byte
varints inline: an Event body of the recovery benchmark reads in about half the time
(docs/development.md, "The compiled append path: why each trick").

It covers what ares' schemas use: null, boolean, int, long, float, double, string, bytes,
fixed, enum, records (also named references), arrays, maps, unions, and the
``timestamp-micros`` logical type. Any other logical type, or a schema it does not know,
gives ``None`` and the caller keeps fastavro. The result is fastavro's for the options
ares reads with (``return_record_name`` and ``return_record_name_override``).

A compiled reader is strict where fastavro is lenient or undefined (a boolean byte other
than 0 or 1, a negative length, a varint of more than ten bytes, trailing garbage is the
caller's): it raises ``MalformedAvro`` (or an ``IndexError``/``UnicodeDecodeError``) and
the caller re-reads the same bytes with fastavro, whose result or error is then the
answer. So bad input is reported exactly as before; that the fast path returns only
what fastavro returns is property-tested in tests/unit/test_avro_reader.py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

Reader = Callable[[bytes, int], tuple[Any, int]]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Unions of up to this many branches are an if-chain, longer ones a table of functions.
_INLINE_BRANCHES = 4
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "string", "bytes"}


class MalformedAvro(ValueError):
    """The bytes are not what the schema says; re-read them with fastavro for its error."""


# What a compiled reader raises on malformed bytes (MalformedAvro and UnicodeDecodeError are
# ValueErrors; IndexError: past the end; struct.error: a short float or double;
# OverflowError: a timestamp no datetime can hold).
READ_ERRORS: tuple[type[Exception], ...] = (ValueError, IndexError, struct.error,
                                            OverflowError)


class _Unsupported(Exception):
    """A schema construct the compiler does not handle: fastavro reads that schema."""


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``: its value and the position after it."""
    b = data[pos]
    n = b & 0x7F
    shift = 7
    pos += 1
    while b & 0x80:
        if shift > 63:
            raise MalformedAvro("varint longer than ten bytes")
        b = data[pos]
        n |= (b & 0x7F) << shift
        shift += 7
        pos += 1
    if n >> 64:  # a tenth byte above 1: no Avro long (fastavro would wrap it to 64 bits)
        raise MalformedAvro("varint beyond 64 bits")
    return (n >> 1) ^ -(n & 1), pos


def read_span(data: bytes, pos: int) -> tuple[int, int]:
    """The length of a string or bytes at ``pos``: where its bytes start and end (the
    readers inline the one-byte lengths; two bytes, up to 8 KiB, are common too)."""
    b = data[pos]
    if b & 0x80 and not b & 1:
        c = data[pos + 1]
        if c < 0x80:
            return pos + 2, pos + 2 + (((b & 0x7F) | (c << 7)) >> 1)
    n, pos = read_long(data, pos)
    if n < 0:
        raise MalformedAvro(f"negative length {n}")
    return pos, pos + n


def _timestamp_micros() -> Callable[[int], datetime]:
    """``epoch + timedelta(microseconds=n)`` as fastavro computes it, remembering the last
    value: the events of one transaction share their timestamp."""
    last: list[Any] = [None, None]

    def convert(n: int) -> datetime:
        if n != last[0]:
            last[0], last[1] = n, _EPOCH + timedelta(microseconds=n)
        value: datetime = last[1]
        return value

    return convert


class _Compiler:
    """Writes the source of one function per record (and one for the whole schema)."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named  # full name -> parsed named schema (fastavro's __named_schemas)
        self.functions: dict[str, str] = {}  # function name -> source
        self.function_of: dict[str, str] = {}  # record full name -> its function
        self.globals: dict[str, Any] = {
            "MalformedAvro": MalformedAvro, "read_long": read_long, "read_span": read_span,
            "unpack_float": struct.Struct("<f").unpack_from,
            "unpack_double": struct.Struct("<d").unpack_from,
        }
        self.tables: list[str] = []  # tuples of functions, defined after all functions
        self._counter = 0

    def fresh(self, stem: str) -> str:
        self._counter += 1
        return f"{stem}{self._counter}"

    def constant(self, stem: str, value: Any) -> str:
        name = self.fresh(f"_{stem}")
        self.globals[name] = value
        return name

    # -- one value ------------------------------------------------------------------------

    def value(self, schema: Any, target: str, lines: list[str], indent: str) -> None:
        """Lines that read one value of ``schema`` at ``pos`` into ``target``."""
        if isinstance(schema, list):
            self.union(schema, target, lines, indent)
            return
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                self.primitive(schema, target, lines, indent)
                return
            if schema in self.named:
                self.value(self.named[schema], target, lines, indent)
                return
            raise _Unsupported(f"type {schema!r}")
        if not isinstance(schema, dict):
            raise _Unsupported(f"schema {schema!r}")
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if logical is not None:
            if logical != "timestamp-micros" or kind != "long":
                raise _Unsupported(f"logical type {logical!r}")
            self.primitive("long", target, lines, indent)
            convert = self.constant("timestamp", _timestamp_micros())
            lines.append(f"{indent}{target} = {convert}({target})")
            return
        if kind == "record":
            function = self.record(schema)
            lines.append(f"{indent}{target}, pos = {function}(data, pos)")
        elif kind == "enum":
            symbols = self.constant("symbols", tuple(schema["symbols"]))
            self.primitive("long", target, lines, indent)
            lines.append(f"{indent}if {target} < 0: raise MalformedAvro('enum index')")
            lines.append(f"{indent}{target} = {symbols}[{target}]")
        elif kind == "fixed":
            size = int(schema["size"])
            lines.append(f"{indent}end = pos + {size}")
            lines.append(f"{indent}{target} = data[pos:end]; pos = end")
        elif kind in ("array", "map"):
            self.blocks(schema, target, lines, indent)
        elif isinstance(kind, str) and kind in _PRIMITIVES:
            self.primitive(kind, target, lines, indent)
        else:
            raise _Unsupported(f"type {kind!r}")

    def primitive(self, kind: str, target: str, lines: list[str], indent: str) -> None:
        i = indent
        if kind == "null":
            lines.append(f"{i}{target} = None")
        elif kind == "boolean":
            lines.append(f"{i}b = data[pos]; pos += 1")
            lines.append(f"{i}if b > 1: raise MalformedAvro('boolean byte')")
            lines.append(f"{i}{target} = b == 1")
        elif kind in ("int", "long"):
            self.varint(target, lines, i)
        elif kind == "float":
            lines.append(f"{i}{target}, = unpack_float(data, pos); pos += 4")
        elif kind == "double":
            lines.append(f"{i}{target}, = unpack_double(data, pos); pos += 8")
        elif kind in ("string", "bytes"):
            # A slice past the end is short, not an error: the position then lies past the
            # end, and the next read of a byte or the reader's final check raises.
            lines.append(f"{i}b = data[pos]")
            lines.append(f"{i}if b & 0x81: pos, end = read_span(data, pos)")
            lines.append(f"{i}else: pos += 1; end = pos + (b >> 1)")
            decode = ".decode()" if kind == "string" else ""
            lines.append(f"{i}{target} = data[pos:end]{decode}; pos = end")

    @staticmethod
    def varint(target: str, lines: list[str], i: str) -> None:
        """A zig-zag varint, its common single-byte form inline."""
        lines.append(f"{i}b = data[pos]")
        lines.append(f"{i}if b < 0x80: {target} = (b >> 1) ^ -(b & 1); pos += 1")
        lines.append(f"{i}else: {target}, pos = read_long(data, pos)")

    def union(self, branches: list[Any], target: str, lines: list[str], indent: str) -> None:
        # fastavro with return_record_name(+_override): a record branch, or a branch that
        # names a type, is (name, value), unless the union has only one such branch.
        tagged = [_tag_of(b, self.named) for b in branches]
        if sum(name is not None for name in tagged) == 1:
            tagged = [None] * len(branches)
        self.varint("k", lines, indent)
        if len(branches) > _INLINE_BRANCHES:
            self.union_table(branches, tagged, target, lines, indent)
            return
        for index, (branch, name) in enumerate(zip(branches, tagged, strict=True)):
            keyword = "if" if index == 0 else "elif"
            lines.append(f"{indent}{keyword} k == {index}:")
            inner = indent + "    "
            self.value(branch, target, lines, inner)
            if name is not None:
                lines.append(f"{inner}{target} = ({name!r}, {target})")
        lines.append(f"{indent}else: raise MalformedAvro('union index')")

    def union_table(self, branches: list[Any], tagged: list[str | None], target: str,
                    lines: list[str], indent: str) -> None:
        """A long union (ares' payloads: twenty records) dispatches through a tuple of
        functions, one per branch, instead of a chain of comparisons."""
        functions = []
        for branch, name in zip(branches, tagged, strict=True):
            function = self.fresh("_branch")
            body = [f"def {function}(data, pos):"]
            self.value(branch, "value", body, "    ")
            tag = "" if name is None else f"{name!r}, "
            body.append(f"    return ({tag}value), pos" if tag else "    return value, pos")
            self.functions[function] = "\n".join(body)
            functions.append(function)
        table = self.fresh("_union")
        self.tables.append(f"{table} = ({', '.join(functions)},)")
        lines.append(f"{indent}if k < 0: raise MalformedAvro('union index')")
        lines.append(f"{indent}{target}, pos = {table}[k](data, pos)")

    def blocks(self, schema: Mapping[str, Any], target: str, lines: list[str],
               indent: str) -> None:
        """An array or a map: blocks of items, a negative count followed by a byte size,
        a zero count at the end."""
        i, j = indent, indent + "    "
        is_map = schema["type"] == "map"
        item = self.fresh("item")
        count = self.fresh("count")
        lines.append(f"{i}{target} = {{}}" if is_map else f"{i}{target} = []")
        self.varint(count, lines, i)
        lines.append(f"{i}while {count}:")
        lines.append(f"{j}if {count} < 0:")
        lines.append(f"{j}    {count} = -{count}")
        self.varint("_", lines, j + "    ")
        lines.append(f"{j}for _ in range({count}):")
        k = j + "    "
        if is_map:
            key = self.fresh("key")
            self.primitive("string", key, lines, k)
            self.value(schema["values"], item, lines, k)
            lines.append(f"{k}{target}[{key}] = {item}")
        else:
            self.value(schema["items"], item, lines, k)
            lines.append(f"{k}{target}.append({item})")
        self.varint(count, lines, j)

    def record(self, schema: Mapping[str, Any]) -> str:
        """The function that reads this record (written once per record name)."""
        name = schema["name"]
        if name in self.function_of:
            return self.function_of[name]
        function = self.fresh("_record")
        self.function_of[name] = function  # before the fields: a record may refer to itself
        lines = [f"def {function}(data, pos):"]
        targets = []
        for field in schema["fields"]:
            target = self.fresh("f")
            targets.append((field["name"], target))
            self.value(field["type"], target, lines, "    ")
        items = ", ".join(f"{field!r}: {target}" for field, target in targets)
        lines.append(f"    return {{{items}}}, pos")
        self.functions[function] = "\n".join(lines)
        return function


def _tag_of(branch: Any, named: Mapping[str, Any]) -> str | None:
    """The name fastavro pairs with a union branch's value: an inline record's, or the
    named type's a branch refers to (whatever its kind); None for any other branch."""
    if isinstance(branch, str):
        if branch in _PRIMITIVES:
            return None
        return str(named[branch]["name"])
    if isinstance(branch, dict) and branch.get("type") == "record":
        return str(branch["name"])
    return None


def compile_reader(parsed: Any) -> Reader | None:
    """A reader of values written with the fastavro-parsed ``parsed`` schema, or None when
    the schema uses what the compiler does not cover (read it with fastavro then).

    ``reader(data, pos)`` returns the value at ``pos`` and the position after it, as
    ``schemaless_reader(..., return_record_name=True, return_record_name_override=True)``
    would; on malformed bytes it raises one of ``READ_ERRORS``: read them with fastavro to
    learn why.
    """
    named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
    compiler = _Compiler(named)
    lines = ["def read(data, pos):"]
    try:
        compiler.value(parsed, "value", lines, "    ")
    except (_Unsupported, KeyError, TypeError, ValueError):
        return None
    lines.append("    if pos > len(data): raise MalformedAvro('ends early')")
    lines.append("    return value, pos")
    source = "\n\n".join([*compiler.functions.values(), *compiler.tables, "\n".join(lines)])
    namespace = dict(compiler.globals)
    exec(compile(source, "<ares.avro_reader>", "exec"), namespace)
    reader: Reader = namespace["read"]
    return reader


__all__ = ["READ_ERRORS", "MalformedAvro", "Reader", "compile_reader", "read_long"]
