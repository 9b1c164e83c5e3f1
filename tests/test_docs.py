"""The documents agree with the code.

docs/format.md marks its tables with HTML comments on the line before them:

* ``<!-- layout: NAME -->``: an ``Offset | Size | Field | Type | ...`` table of one
  struct layout, followed by a ``Size: a + b + ... = N bytes`` line. Rows whose
  Size is a number are fixed fields; they must match the fields of the structs
  in ``LAYOUTS`` one for one (size, integer width, byte order), their offsets
  must add up, and the Size line must be their sum. store/codec.py's encoders, some
  of which pack with structs of their own, must write those layouts.
* ``<!-- values: NAME -->``: a table whose first column is a constant's name and
  whose second is its value, both in backticks (a Python literal: ``0xA1``,
  ``b"format"``). Every row must equal the constant in the code.
* ``<!-- example: NAME -->``: an ``xxd`` dump of a file the test makes again with
  the library and compares byte for byte.

docs/tuning.md marks its settings table with ``<!-- settings -->``: first column
the option name, a ``Default`` column holding a Python expression in backticks.
docs/tuning.md's ``<!-- queuesettings -->`` table names every keyword of
``store.queue()``, and its ``<!-- clisettings -->`` table lists every option of
``msgcask compact`` and ``msgcask bench`` that sets a store setting, with the
command's default. ``max_file_size``'s bounds are the same in the settings table and in
the ``--help`` of every option that takes a data-file size.
docs/design.md must name every crash point in the source. docs/operations.md must
list every command of the CLI, and its session's ``$ msgcask ...`` outputs must be
what the CLI prints for the store the session's own snippet makes; so must its
damaged copy's ``msgcask check``, with the lines it says an open and a drain log,
and the ``StoreFullError`` and ``StoreLockedError`` it quotes are what msgcask raises.
docs/pipeline.md's audit transcript must hold the figures of the store its snippet
makes. The commands README.md's command-line block, docs/operations.md's command
table and docs/pipeline.md's synopses write name the arguments, in order, and the
options' values as ``--help`` does (``STORE``, not ``PATH``), and pipeline.md's
``<!-- commandoptions -->`` table gives every pipeline option with its commands and
the default and choices its ``--help`` states. bench/README.md names every directory of ``bench/results``, and
docs/benchmarks.md's method gives the span of dates of its results; every field of a
result's runs it names (``space.samples_over_bound``) is in the result's schema.

Every ``python`` code block of README.md and docs/*.md runs as written (with its
``/tmp/...`` paths moved into a temporary directory), except the ones that start
Spark; every ``--option`` a doc writes after ``msgcask COMMAND`` is an option of that
command, every ``bench/``, ``tests/``, ``src/`` or ``docs/`` path a doc names exists, and
so does every ``Class.attribute`` or ``module.name`` it names of msgcask's source,
and every name of a chain such as ``store.recovery.unclean`` or
``stats().compaction.failed_passes``.
"""

from __future__ import annotations

import ast
import inspect
import re
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
from xxhash import xxh3_64_intdigest

import msgcask
from msgcask import db, options, puts
from msgcask.compactor import needed, pacing, policy, rewrite, runner
from msgcask.index import accounting, env, keys
from msgcask.options import Options
from msgcask.store import codec, filenames, fs, recovery
from msgcask.store import format as fmt

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "msgcask"

# layout name in docs/format.md -> the structs it documents, in order, and the size
# the Size line must add up to (None: the structs repeat, no single total).
LAYOUTS: dict[str, tuple[list[struct.Struct], int | None]] = {
    "file-header": ([fmt.FILE_HEADER, fmt.FILE_HEADER_CHECKSUM], fmt.FILE_HEADER_SIZE),
    "record-header": ([fmt.RECORD_HEADER], fmt.RECORD_HEADER_SIZE),
    "put-payload": ([fmt.PUT_FIXED], fmt.PUT_FIXED_SIZE),
    "headers-block": ([fmt.HEADER_COUNT, fmt.HEADER_KEY_LEN, fmt.HEADER_VALUE_LEN], None),
    "ack-payload": ([fmt.ACK_PAYLOAD], fmt.ACK_PAYLOAD.size),
    "deliver-payload": ([fmt.DELIVER_PAYLOAD], fmt.DELIVER_PAYLOAD.size),
    "batch-payload": ([fmt.BATCH_PAYLOAD], fmt.BATCH_PAYLOAD.size),
    "manifest-payload": ([fmt.MANIFEST_COUNT, fmt.MANIFEST_ENTRY], None),
    "index-order-key": ([keys.ORDER_KEY], keys.ORDER_KEY.size),
    "index-queue-value": ([keys.QUEUE_VALUE], keys.QUEUE_VALUE.size),
    "index-msg-key": ([keys.MSG_KEY], keys.MSG_KEY.size),
    "index-file-key": ([keys.FILE_KEY], keys.FILE_KEY.size),
    "index-live-entry": ([keys._LIVE], keys._LIVE.size),
    "index-acked-entry": ([keys._ACKED], keys._ACKED.size),
    "index-file-value": ([accounting._FILE_VALUE, accounting._ACKED_IN], None),
    "index-checkpoint": ([keys.CHECKPOINT], keys.CHECKPOINT.size),
}

# Structs that need no table of their own, and why.
UNDOCUMENTED_STRUCTS = {
    "ORDER_PREFIX": "the first field of the order key",
    "U64": "the u64 LE meta values, described in the meta keys table",
}

# Modules whose constants the values tables may name: bare names are looked up in
# these, in order; a name like ``policy.MARK_COST`` names its module.
CONSTANT_MODULES: list[ModuleType] = [fmt, keys, env, filenames, fs]
QUALIFIED_MODULES: dict[str, ModuleType] = {
    "db": db,
    "needed": needed,
    "options": options,
    "pacing": pacing,
    "policy": policy,
    "puts": puts,
    "recovery": recovery,
    "rewrite": rewrite,
    "runner": runner,
}

_TYPE_WIDTH = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "f64": 8}
_FLOAT_CHARS = {"d": 8, "f": 4, "e": 2}


# -- reading markdown ----------------------------------------------------------------


@dataclass
class Table:
    marker: str  # "layout", "values", "settings", ...
    name: str
    header: list[str]
    rows: list[list[str]]
    after: list[str]  # the lines after the table, up to the next blank-separated block


def _cells(line: str) -> list[str]:
    inner = line.strip()
    if inner.startswith("|"):
        inner = inner[1:]
    if inner.endswith("|"):
        inner = inner[:-1]
    return [c.strip() for c in inner.split("|")]


def marked_tables(path: Path) -> list[Table]:
    """Every table that follows a ``<!-- marker: name -->`` (or ``<!-- marker -->``) line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tables = []
    for i, line in enumerate(lines):
        match = re.fullmatch(r"<!--\s*([a-z]+)(?::\s*([\w-]+))?\s*-->", line.strip())
        if not match:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not lines[j].lstrip().startswith("|"):
            continue
        header = _cells(lines[j])
        rows = []
        j += 2  # skip the |---| line
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            rows.append(_cells(lines[j]))
            j += 1
        after = []
        while j < len(lines) and not lines[j].strip():
            j += 1
        while j < len(lines) and lines[j].strip():
            after.append(lines[j])
            j += 1
        tables.append(Table(match.group(1), match.group(2) or "", header, rows, after))
    return tables


def fenced_blocks(text: str, lang: str | None = None) -> list[str]:
    """The bodies of the ```-fenced code blocks of ``text`` (of one language if given)."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)
    return [body for tag, body in blocks if lang is None or tag == lang]


def run_snippet(code: str, tmp_path: Path) -> None:
    """Run a doc's Python snippet, its ``/tmp/...`` paths moved under ``tmp_path``."""
    moved = re.sub(r"([\"'])/tmp/", lambda m: f"{m.group(1)}{tmp_path}/", code)
    exec(compile(moved, "<doc snippet>", "exec"), {"__name__": "doc_snippet"})


def snippet_making(page: Path, path: str) -> str:
    """The one Python block of ``page`` that opens the store at ``path``."""
    blocks = fenced_blocks(page.read_text(encoding="utf-8"), "python")
    (code,) = [c for c in blocks if f'msgcask.open("{path}"' in c]
    return code


def code_span(cell: str) -> str:
    match = re.search(r"`([^`]+)`", cell)
    assert match, f"expected a value in backticks in table cell {cell!r}"
    return match.group(1)


def literal(text: str) -> Any:
    """Evaluate a documented value: a Python literal or simple arithmetic on numbers."""
    return eval(text, {"__builtins__": {}}, {})


def as_int(cell: str) -> int | None:
    cell = cell.strip()
    return int(cell) if re.fullmatch(r"\d+", cell) else None


# -- struct fields ---------------------------------------------------------------------


def struct_fields(s: struct.Struct) -> list[tuple[str, int, str]]:
    """(format char, size, byte order) of each field of ``s``."""
    text = s.format
    order = text[0] if text[0] in "<>=!@" else "@"
    out = []
    for count, char in re.findall(r"(\d*)([a-zA-Z?])", text.lstrip("<>=!@")):
        n = int(count) if count else 1
        if char in "sp":
            out.append((char, n, order))
        else:
            out += [(char, struct.calcsize("<" + char), order)] * n
    return out


def check_type_cell(layout: str, field: str, type_cell: str, char: str, order: str) -> None:
    words = type_cell.split()
    size = struct.calcsize("<" + char) if char not in "sp" else None
    if char in "sp":
        assert words[0] == "bytes", f"{layout}.{field}: type {type_cell!r}, code has bytes"
        return
    kind = words[0]
    assert kind in _TYPE_WIDTH, f"{layout}.{field}: unknown type {type_cell!r}"
    assert _TYPE_WIDTH[kind] == size, f"{layout}.{field}: {type_cell!r} is not {size} bytes"
    assert (kind[0] == "f") == (char in _FLOAT_CHARS), f"{layout}.{field}: int/float mismatch"
    if size and size > 1:
        want = {"<": "LE", ">": "BE", "!": "BE"}.get(order)
        assert want is not None, f"{layout}: the code uses native byte order"
        assert want in words, f"{layout}.{field}: documented {type_cell!r}, code is {want}"


# -- format.md -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def format_tables() -> list[Table]:
    return marked_tables(DOCS / "format.md")


def test_every_layout_is_documented(format_tables: list[Table]) -> None:
    names = {t.name for t in format_tables if t.marker == "layout"}
    assert names == set(LAYOUTS), f"missing {set(LAYOUTS) - names}, unknown {names - set(LAYOUTS)}"


def test_every_struct_in_the_code_has_a_layout() -> None:
    documented = {id(s) for structs, _ in LAYOUTS.values() for s in structs}
    for module in (fmt, keys, accounting):
        for name, value in vars(module).items():
            if isinstance(value, struct.Struct) and id(value) not in documented:
                assert name in UNDOCUMENTED_STRUCTS, (
                    f"{module.__name__}.{name} ({value.format}) has no table in docs/format.md"
                )
    assert keys.ORDER_PREFIX.format == ">I" and keys.ORDER_KEY.format.startswith(">I")
    assert keys.U64.format == "<Q"


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layout_table_matches_structs(name: str, format_tables: list[Table]) -> None:
    (table,) = [t for t in format_tables if t.marker == "layout" and t.name == name]
    assert table.header[:4] == ["Offset", "Size", "Field", "Type"], table.header
    structs, total = LAYOUTS[name]
    expected = [f for s in structs for f in struct_fields(s)]
    fixed = [row for row in table.rows if as_int(row[1]) is not None]
    assert [as_int(r[1]) for r in fixed] == [size for _, size, _ in expected], (
        f"{name}: documented field sizes differ from {[s.format for s in structs]}"
    )
    for row, (char, _, order) in zip(fixed, expected, strict=True):
        check_type_cell(name, row[2], row[3], char, order)
    # Offsets: the leading run of numeric offsets must be contiguous from 0.
    running = 0
    for row in table.rows:
        offset, size = as_int(row[0]), as_int(row[1])
        if offset is None or size is None:
            break
        assert offset == running, (
            f"{name}.{row[2]}: offset {offset}, fields before add to {running}"
        )
        running += size
    # The Size line: the sum of the fixed fields, term by term.
    size_line = next((line for line in table.after if line.startswith("Size:")), None)
    assert size_line, f"{name}: no 'Size:' line after the table"
    match = re.match(r"Size:\s*([\d\s+]+?)(?:\s*=\s*(\d+))?\s+bytes", size_line)
    assert match, f"{name}: cannot read {size_line!r}"
    terms = [int(t) for t in match.group(1).split("+")]
    stated = int(match.group(2)) if match.group(2) else terms[0]
    assert sum(terms) == stated, f"{name}: {size_line!r} does not add up"
    if total is not None:
        assert terms == [size for _, size, _ in expected], f"{name}: {size_line!r}"
        assert stated == total == sum(s.size for s in structs), f"{name}: {size_line!r}"


def _constant(name: str) -> Any:
    if "." in name:
        module_name, attr = name.split(".", 1)
        assert module_name in QUALIFIED_MODULES, f"unknown module in {name}"
        module = QUALIFIED_MODULES[module_name]
        assert hasattr(module, attr), f"{name} does not exist in the code"
        return getattr(module, attr)
    for module in CONSTANT_MODULES:
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"docs/format.md names {name}, which no module defines")


@pytest.mark.parametrize("page", ["format.md", "design.md", "tuning.md"])
def test_values_tables_match_constants(page: str) -> None:
    tables = [t for t in marked_tables(DOCS / page) if t.marker == "values"]
    assert tables or page == "tuning.md"
    for table in tables:
        for row in table.rows:
            name, value = code_span(row[0]), literal(code_span(row[1]))
            assert _constant(name) == value, f"{page} {table.name}: {name} is {_constant(name)!r}"


def _documented_constants(format_tables: list[Table]) -> set[str]:
    return {code_span(r[0]) for t in format_tables if t.marker == "values" for r in t.rows}


def test_every_format_constant_is_documented(format_tables: list[Table]) -> None:
    documented = _documented_constants(format_tables)
    for name, value in vars(fmt).items():
        if name.isupper() and isinstance(value, int | bytes) and not isinstance(value, bool):
            assert name in documented, f"format.{name} = {value!r} is not in docs/format.md"
    for prefix in ("STATE_", "META_"):
        for name in dir(keys):
            if name.startswith(prefix):
                assert name in documented, f"keys.{name} is not in docs/format.md"
    assert "INDEX_FORMAT_VERSION" in documented


def test_record_types_table_is_complete(format_tables: list[Table]) -> None:
    (table,) = [t for t in format_tables if t.name == "record-types"]
    assert {literal(code_span(r[1])) for r in table.rows} == set(fmt.RECORD_TYPES)
    (kinds,) = [t for t in format_tables if t.name == "file-kinds"]
    assert {code_span(r[0]) for r in kinds.rows} == {n for n in vars(fmt) if n.startswith("KIND_")}


def _record(raw: bytes) -> tuple[int, bytes]:
    """(type, payload) of one record, once its header is as format.md says: the
    checksum is xxh3_64 of every byte after itself, the length counts the payload."""
    checksum, length, rtype = fmt.RECORD_HEADER.unpack_from(raw)
    assert checksum == xxh3_64_intdigest(raw[fmt.CHECKSUM_SIZE :])
    assert length == len(raw) - fmt.RECORD_HEADER_SIZE
    return rtype, raw[fmt.RECORD_HEADER_SIZE :]


def test_the_codec_writes_the_documented_layouts() -> None:
    """store/codec.py packs some records with structs of its own: they must write what
    the layouts above (format.py's structs) describe, field by field."""
    assert _record(codec.encode_ack(7)) == (fmt.TYPE_ACK, fmt.ACK_PAYLOAD.pack(7))
    assert _record(codec.encode_deliver(7, 3)) == (fmt.TYPE_DELIVER, fmt.DELIVER_PAYLOAD.pack(7, 3))
    assert _record(codec.encode_batch_header(2, 64)) == (
        fmt.TYPE_BATCH,
        fmt.BATCH_PAYLOAD.pack(2, 64),
    )
    victims = fmt.MANIFEST_ENTRY.pack(3) + fmt.MANIFEST_ENTRY.pack(9)
    assert _record(codec.encode_manifest([3, 9])) == (
        fmt.TYPE_MANIFEST,
        fmt.MANIFEST_COUNT.pack(2) + victims,
    )
    headers = codec.encode_headers({"k": "v", "ké": "vvv"})
    assert headers == b"".join(
        (
            fmt.HEADER_COUNT.pack(2),
            *(fmt.HEADER_KEY_LEN.pack(1), b"k", fmt.HEADER_VALUE_LEN.pack(1), b"v"),
            *(fmt.HEADER_KEY_LEN.pack(3), "ké".encode(), fmt.HEADER_VALUE_LEN.pack(3), b"vvv"),
        )
    )
    put = codec.encode_put(7, b"q", 5, 2, headers, b"body")
    fixed = fmt.PUT_FIXED.pack(7, 5, 2, 1, len(headers))
    assert _record(put) == (fmt.TYPE_PUT, fixed + b"q" + headers + b"body")
    assert len(put) == codec.put_record_size(b"q", headers, 4)
    header = codec.encode_file_header(fmt.KIND_COMPACTED, 12, 99)
    header_fields = (fmt.MAGIC, fmt.FORMAT_VERSION, fmt.KIND_COMPACTED, 0, 12, 99)
    checksum = fmt.FILE_HEADER_CHECKSUM.pack(xxh3_64_intdigest(header[:24]))
    assert header == fmt.FILE_HEADER.pack(*header_fields) + checksum
    assert len(header) == fmt.FILE_HEADER_SIZE


def _dump_bytes(path: Path, name: str) -> bytes:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- example: {name} -->")
    assert lines[start + 1].startswith("```"), f"example {name}: no code block"
    out = bytearray()
    for line in lines[start + 2 :]:
        if line.startswith("```"):
            break
        offset, rest = line.split(":", 1)
        assert int(offset, 16) == len(out), f"example {name}: offset {offset}"
        hex_part = rest[1:40]  # xxd: 8 groups of 4 hex digits, then the text column
        out += bytes.fromhex(hex_part.replace(" ", ""))
    return bytes(out)


def _put_get_ack(tmp_path: Path) -> Path:
    """The worked example's own snippet."""
    run_snippet(snippet_making(DOCS / "format.md", "/tmp/example"), tmp_path)
    return tmp_path / "example"


def _put_many(tmp_path: Path) -> Path:
    """``q.put_many([b"a", b"b"])`` on a new store, as the text says."""
    with msgcask.open(tmp_path / "store", compaction_interval=None) as store:
        store.queue("q").put_many([b"a", b"b"])
    return tmp_path / "store"


# example name -> makes the store it dumps, returns the store's directory
EXAMPLES: dict[str, Callable[[Path], Path]] = {
    "put-get-ack": _put_get_ack,
    "put-many": _put_many,
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_worked_example_is_what_the_library_writes(name: str, tmp_path: Path) -> None:
    store = EXAMPLES[name](tmp_path)
    written = (store / filenames.data_file_name(1)).read_bytes()
    assert _dump_bytes(DOCS / "format.md", name) == written


# -- tuning.md -------------------------------------------------------------------------


def _options() -> dict[str, inspect.Parameter]:
    params = inspect.signature(msgcask.Store.__init__).parameters
    return {
        n: p
        for n, p in params.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not n.startswith("_")
    }


def test_every_option_is_in_the_settings_table_with_its_default() -> None:
    tables = [t for t in marked_tables(DOCS / "tuning.md") if t.marker == "settings"]
    assert len(tables) == 1, "docs/tuning.md needs exactly one <!-- settings --> table"
    (table,) = tables
    column = table.header.index("Default")
    rows = {code_span(r[0]): r for r in table.rows}
    options = _options()
    assert set(rows) == set(options), (
        f"undocumented {set(options) - set(rows)}, not options {set(rows) - set(options)}"
    )
    for name, param in options.items():
        documented = literal(code_span(rows[name][column]))
        assert documented == param.default, f"{name}: docs say {documented!r}"
        assert type(documented) is type(param.default), f"{name}: {documented!r}"


def test_every_option_has_a_section_that_gives_its_default() -> None:
    text = (DOCS / "tuning.md").read_text(encoding="utf-8")
    for name, param in _options().items():
        section = re.search(rf"^### `{name}`\n\nDefault `([^`]+)`", text, re.M)
        assert section, f"docs/tuning.md: no section {name} starting 'Default `...`'"
        assert literal(section.group(1)) == param.default, f"tuning.md, {name}: {section[0]!r}"
        assert f"Increasing `{name}`" in text, f"docs/tuning.md: no 'Increasing `{name}`'"


def test_every_queue_setting_is_in_the_queue_table() -> None:
    (table,) = [t for t in marked_tables(DOCS / "tuning.md") if t.marker == "queuesettings"]
    params = inspect.signature(msgcask.Store.queue).parameters
    assert [code_span(r[0]) for r in table.rows] == [n for n in params if n not in ("self", "name")]
    allowed = {code_span(r[0]): r[table.header.index("Allowed")] for r in table.rows}
    assert allowed["max_deliveries"] == f"1 to {fmt.MAX_DELIVERIES_COUNTED:,}, or `None`"


def test_options_record_has_the_same_defaults() -> None:
    defaults = {f.name: f.default for f in fields(Options) if f.default is not MISSING}
    for name, param in _options().items():
        assert defaults[name] == param.default, f"Options.{name} differs from Store()"


# Options of these commands that set no store setting: they shape the workload, the
# measurement or the output. Every other option is in tuning.md's clisettings table.
CLI_NOT_SETTINGS: dict[str, set[str]] = {
    "msgcask compact": set(),
    "msgcask bench": {
        *("--messages", "--size", "--size-mix", "--pin-every", "--window", "--rounds"),
        *("--depth", "--fill", "--repeat", "--seed", "--peers"),
        *("--interval", "--crash-messages", "--time-limit", "--no-reopen"),
        *("--out", "--workdir", "--no-plots", "--no-progress"),
    },
}


def cli_command(words: list[str]) -> click.Command | None:
    """The CLI (sub)command ``msgcask WORDS...`` names, or None if it names none."""
    from msgcask.cli.main import main

    command: click.Command = main
    for word in words:
        if not isinstance(command, click.Group) or word not in command.commands:
            return None
        command = command.commands[word]
    return command


def cli_options(command: click.Command) -> dict[str, click.Option]:
    """``--name`` -> option, for every option of ``command``."""
    return {
        name: p
        for p in command.params
        if isinstance(p, click.Option)
        for name in (*p.opts, *p.secondary_opts)
        if name.startswith("--")
    }


def test_every_cli_setting_is_in_the_tuning_table_with_its_default() -> None:
    (table,) = [t for t in marked_tables(DOCS / "tuning.md") if t.marker == "clisettings"]
    column = table.header.index("Default")
    rows = {(code_span(r[0]), code_span(r[1])): r for r in table.rows}
    for name, not_settings in CLI_NOT_SETTINGS.items():
        command = cli_command(name.split()[1:])
        assert command is not None, name
        options = cli_options(command)
        assert not_settings <= set(options), f"{name} has no {not_settings - set(options)}"
        documented = {option for cmd, option in rows if cmd == name}
        settings = set(options) - not_settings
        assert documented == settings, (
            f"docs/tuning.md clisettings: {name} lacks {settings - documented}, "
            f"has no {documented - settings}"
        )
        for option in documented:
            row = rows[name, option]
            default = options[option].get_default(click.Context(command))
            assert literal(code_span(row[column])) == default, f"{name} {option}: {row}"
            assert row[-1], f"{name} {option}: no direction of its effect"
    assert {cmd for cmd, _ in rows} == set(CLI_NOT_SETTINGS)


# -- design.md -------------------------------------------------------------------------


def _crash_points() -> set[str]:
    names = set()
    for path in SRC.rglob("*.py"):
        names |= set(re.findall(r"crash_point\(\"([^\"]+)\"\)", path.read_text(encoding="utf-8")))
    return names


def test_every_crash_point_is_explained() -> None:
    points = _crash_points()
    assert len(points) >= 7, points
    text = (DOCS / "design.md").read_text(encoding="utf-8")
    for name in sorted(points):
        assert f"`{name}`" in text, f"docs/design.md does not explain crash point {name}"


def _anchors(text: str) -> set[str]:
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def test_docs_link_to_existing_pages_and_anchors() -> None:
    pages = {p.name: p.read_text(encoding="utf-8") for p in DOCS.glob("*.md")}
    owned = ("index.md", "format.md", "design.md", "tuning.md", "operations.md")
    for name in owned:
        assert name in pages, f"docs/{name} is missing"

    for name, text in pages.items():
        for target, anchor in re.findall(r"\]\(([\w.-]*\.md|)(?:#([\w-]+))?\)", text):
            page = target or name
            if page not in owned and page not in pages:
                continue  # a page another part of the project provides
            assert page in pages, f"docs/{name} links to missing {page}"
            if anchor:
                assert anchor in _anchors(pages[page]), f"docs/{name}: no #{anchor} in {page}"


def test_readme_links_to_existing_files_and_anchors() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]*)(?:#([\w-]+))?\)", text)
    assert links
    for target, anchor in links:
        if "://" in target:
            continue
        path = ROOT / target if target else ROOT / "README.md"
        assert path.exists(), f"README.md links to missing {target}"
        if anchor:
            assert anchor in _anchors(path.read_text(encoding="utf-8")), (
                f"README.md: no #{anchor} in {target or 'README.md'}"
            )


# -- operations.md ---------------------------------------------------------------------


def _command_table_names() -> set[str]:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `msgcask ([a-z-]+)", text, re.M))


def test_every_cli_command_is_in_the_command_table() -> None:
    from msgcask.cli.main import main

    assert _command_table_names() == set(main.commands), (
        f"docs/operations.md lists {_command_table_names()}, the CLI has {set(main.commands)}"
    )


def _synopsis(line: str) -> tuple[click.Command, list[str], dict[str, str | None]]:
    """A documented ``msgcask WORDS ARGS... [--option VALUE] ...`` line as the
    command it names, its positional arguments' names, and each option with the
    name the line gives its value (None for a flag, ``a|b`` for choices)."""
    tokens = [t for t in line.replace("[", " ").replace("]", " ").split() if t != "..."]
    assert tokens[0] == "msgcask", line
    words = []
    while cli_command([*words, tokens[len(words) + 1]]) is not None:
        words.append(tokens[len(words) + 1])
        if len(words) + 1 == len(tokens):
            break
    command = cli_command(words)
    assert command is not None and words, line
    arguments: list[str] = []
    options: dict[str, str | None] = {}
    rest = tokens[len(words) + 1 :]
    for i, token in enumerate(rest):
        if token.startswith("--"):
            value = rest[i + 1] if i + 1 < len(rest) and not rest[i + 1].startswith("--") else None
            flag = cli_options(command)[token].is_flag
            options[token] = None if flag else value
        elif i and rest[i - 1].startswith("--") and options[rest[i - 1]] == token:
            continue  # an option's value
        else:
            arguments.append(token)
    return command, arguments, options


def _help_metavars(command: click.Command) -> tuple[list[str], dict[str, str | None]]:
    """The names ``--help`` gives: its usage line's arguments, and each option's value."""
    ctx = click.Context(command, info_name="msgcask")
    arguments = [p.make_metavar(ctx) for p in command.params if isinstance(p, click.Argument)]
    options = {
        name: None if option.is_flag else option.make_metavar(ctx)
        for name, option in cli_options(command).items()
    }
    return arguments, options


def _check_synopsis(page: str, line: str, every_option: bool) -> None:
    command, arguments, options = _synopsis(line)
    help_arguments, help_options = _help_metavars(command)
    assert arguments == help_arguments, f"{page}: {line!r}: --help says {help_arguments}"
    for name, value in options.items():
        said = help_options[name]
        option = cli_options(command)[name]
        if isinstance(option.type, click.Choice):
            assert value == "|".join(map(str, option.type.choices)), f"{page}: {line!r}: {name}"
        else:
            assert value == said, f"{page}: {line!r}: {name} {value}, --help: {name} {said}"
        if option.multiple:
            assert f"{name} {value} ..." in line, f"{page}: {line!r}: {name} is repeatable"
    if every_option:
        missing = set(help_options) - set(options) - {"--help"}
        assert not missing, f"{page}: {line!r} lacks {sorted(missing)}"


def test_the_command_table_names_arguments_and_options_as_help_does() -> None:
    """docs/operations.md's table writes each command as its ``--help`` does: the
    same names for the arguments, in the same order, and for the options' values."""
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    lines = re.findall(r"^\| `(msgcask [^`]+)`", text, re.M)
    assert len(lines) >= 10, lines
    for line in lines:
        _check_synopsis("operations.md", line, every_option=False)


def test_the_readme_names_arguments_and_options_as_help_does() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The command line") :]
    lines = [line.split("#")[0].strip() for line in fenced_blocks(section, "sh")[0].splitlines()]
    assert len(lines) >= 10, lines
    for line in lines:
        _check_synopsis("README.md", line, every_option=False)


def test_the_bench_workloads_are_named_in_its_help_and_the_docs() -> None:
    from msgcask.cli.bench import bench
    from msgcask.workloads.config import WORKLOAD_NAMES

    ctx = click.Context(bench, info_name="bench")
    said = bench.get_help(ctx)
    for name in WORKLOAD_NAMES:
        assert name in said.replace("\n", " "), f"msgcask bench --help does not name {name}"
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert f"workload spec ({', '.join(WORKLOAD_NAMES)})" in " ".join(text.split())


def transcripts(text: str) -> list[tuple[str, list[str]]]:
    """(command line, output lines) of every ``$ msgcask`` line in ``text``'s code blocks."""
    out: list[tuple[str, list[str]]] = []
    fenced = in_shell = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced, in_shell = not fenced, False
        elif fenced and line.startswith("$ msgcask "):
            out.append((line[2:], []))
            in_shell = True
        elif fenced and in_shell:
            out[-1][1].append(line)
    return out


def _session_commands() -> list[tuple[str, list[str]]]:
    """(command line, output lines) of every ``$ msgcask`` line in the session."""
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    return transcripts(text[text.index("### A session") : text.index("### Finding damage")])


def _normalize(line: str) -> str:
    return re.sub(r"in \d+\.\d+ s", "in N s", line)


def test_session_output_is_what_the_cli_prints(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from msgcask.cli.main import main

    doc_path = "/tmp/orders-store"
    path = tmp_path / "orders-store"
    run_snippet(snippet_making(DOCS / "operations.md", doc_path), tmp_path)
    commands = _session_commands()
    assert len(commands) >= 6, commands
    runner = CliRunner()
    for command, expected in commands:
        args = command.split()[1:]
        assert doc_path in args, command
        args = [str(path) if a == doc_path else a for a in args]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (command, result.output)
        got = result.output.replace(str(path), doc_path).splitlines()
        if "..." in expected:  # an abridged listing: compare the lines shown
            assert set(expected) - {"..."} <= set(got), command
            continue
        # The index's size on disk depends on the file system.
        keep = [i for i, line in enumerate(expected) if not line.startswith("disk bytes")]
        assert len(got) == len(expected), (command, got)
        assert [_normalize(got[i]) for i in keep] == [_normalize(expected[i]) for i in keep], (
            command
        )


# -- pipeline.md -----------------------------------------------------------------------


def _pipeline_table(marker: str) -> Table:
    (table,) = [t for t in marked_tables(DOCS / "pipeline.md") if t.marker == marker]
    return table


def _names(table: Table) -> list[str]:
    return [n for row in table.rows for n in re.findall(r"`([a-z_]+)`", row[0])]


def _pipeline_synopses() -> list[str]:
    """The lines of the first shell block of pipeline.md's "The commands"."""
    text = (DOCS / "pipeline.md").read_text(encoding="utf-8")
    return fenced_blocks(text[text.index("## The commands") :], "sh")[0].splitlines()


def test_the_pipeline_synopses_are_what_help_says() -> None:
    """Every option of each command, with its value named as ``--help`` names it,
    and its arguments in order (``STORE``, not ``PATH``)."""
    from msgcask.cli.pipeline import pipeline

    lines = _pipeline_synopses()
    assert sorted(line.split()[2] for line in lines) == sorted(pipeline.commands), lines
    for line in lines:
        _check_synopsis("pipeline.md", line, every_option=True)


_HELP_DEFAULT = re.compile(r"\[default: (.+?)(?:; [^\]]*)?\]$")


def test_the_pipeline_options_table_gives_what_help_gives() -> None:
    """Each option of the pipeline commands is a row: the commands that have it,
    its value's name, the default ``--help`` states (or none), and its choices."""
    from msgcask.cli.pipeline import pipeline

    table = _pipeline_table("commandoptions")
    rows = {code_span(r[0]).split()[0]: r for r in table.rows}
    seen = set()
    for name, command in pipeline.commands.items():
        ctx = click.Context(command, info_name=name)
        _, metavars = _help_metavars(command)
        for option_name, option in cli_options(command).items():
            if option_name == "--help":
                continue
            seen.add(option_name)
            assert option_name in rows, f"pipeline.md commandoptions: no {option_name}"
            row = rows[option_name]
            assert f"`{name}`" in row[1], f"{option_name}: {name} is not in {row[1]!r}"
            value = metavars[option_name]
            if value is None or isinstance(option.type, click.Choice):
                assert code_span(row[0]) == option_name, row
            else:
                assert code_span(row[0]) == f"{option_name} {value}", (row, value)
            record = option.get_help_record(ctx)
            assert record is not None
            default = _HELP_DEFAULT.search(record[1])
            if default is None:
                assert "`" not in row[2], f"{option_name}: --help states no default: {row}"
            else:
                assert code_span(row[2]) == default.group(1), (row, record[1])
            if isinstance(option.type, click.Choice):
                for choice in option.type.choices:
                    assert f"`{choice}`" in row[3], f"{option_name}: {row} lacks {choice}"
    for option_name, row in rows.items():
        commands = set(re.findall(r"`([a-z-]+)`", row[1]))
        having = {n for n, c in pipeline.commands.items() if option_name in cli_options(c)}
        assert commands == having, f"{option_name}: the table says {commands}, the CLI {having}"
    assert set(rows) == seen


def test_pipeline_columns_are_the_data_sources() -> None:
    from msgcask.pipeline.rows import COLUMNS

    table = _pipeline_table("columns")
    documented = [
        (code_span(r[0]), r[1].replace("&lt;", "<").replace("&gt;", ">")) for r in table.rows
    ]
    assert documented == list(COLUMNS)


def test_pipeline_source_options_have_their_defaults() -> None:
    from msgcask.pipeline import source

    rows = {
        code_span(r[0]): literal(code_span(r[1])) for r in _pipeline_table("sourceoptions").rows
    }
    assert rows == {
        "payload": "false",
        "partition_bytes": source.DEFAULT_PARTITION_BYTES,
        "deleted": "fail",
    }


def test_pipeline_job_columns_are_documented() -> None:
    from msgcask.pipeline import audit, dead_letters

    assert _names(_pipeline_table("auditcolumns")) == list(audit.FILE_COLUMNS)
    assert _names(_pipeline_table("deadletters")) == list(dead_letters.COLUMNS)


def test_pipeline_audit_transcript_is_what_its_snippet_makes(tmp_path: Path) -> None:
    """The audit's figures are the index's, file by file (tests/pipeline checks that
    they agree), so the transcript is checked against ``stats()``, without Spark."""
    doc_path = "/tmp/dlq-store"
    run_snippet(snippet_making(DOCS / "pipeline.md", doc_path), tmp_path)
    text = (DOCS / "pipeline.md").read_text(encoding="utf-8")
    (lines,) = [
        out for cmd, out in transcripts(text) if cmd == f"msgcask pipeline audit {doc_path}"
    ]
    summary = re.fullmatch(
        r"(\d+) data files, (\d+) bytes on disk; (\d+) live messages, (\d+) live bytes "
        r"\(disk/live [\d.]+\); (\d+) needed acks or delivery counts; (\d+) damaged bytes",
        lines[0],
    )
    assert summary, lines[0]
    assert lines[1].split()[:6] == ["file", "kind", "size", "live", "ratio", "needed"]
    rows = [line.split() for line in lines[2:]]
    documented = [(*row[:4], row[5]) for row in rows]
    opts: dict[str, Any] = {"compaction_interval": None, "keep_data_files": True}
    with msgcask.open(tmp_path / "dlq-store", **opts) as store:
        stats = store.stats()
    needed = sum(f.needed_acks for f in stats.files)
    totals = (stats.data_files, stats.data_bytes, stats.live_messages, stats.live_bytes, needed, 0)
    assert tuple(int(n) for n in summary.groups()) == totals
    assert documented == [
        (str(f.file_id), f.kind, str(f.size), str(f.live_bytes), str(f.needed_acks))
        for f in stats.files
    ]


def test_pipeline_sweep_transcript_is_what_its_replays_give(tmp_path: Path) -> None:
    """A sweep's figures are its replays' (tests/pipeline checks a sweep's rows are
    replay()'s), the same every run, so the transcript, made with the default
    settings, is checked against replay() without Spark: all but the seconds."""
    from msgcask.cli.pipeline import sweep as sweep_command
    from msgcask.cli.pipeline import sweep_line
    from msgcask.pipeline.replay import replay
    from msgcask.pipeline.sweep import settings

    doc_path = "/tmp/dlq-recording"
    run_snippet(snippet_making(DOCS / "pipeline.md", doc_path), tmp_path)
    text = (DOCS / "pipeline.md").read_text(encoding="utf-8")
    (lines,) = [
        out for cmd, out in transcripts(text) if cmd == f"msgcask pipeline sweep {doc_path}"
    ]
    defaults = {
        p.name: p.type.convert(p.default, p, None)
        for p in sweep_command.params
        if p.name in ("thresholds", "file_sizes")
    }
    grid = settings(defaults["thresholds"], defaults["file_sizes"])
    documented = [line.split() for line in lines[1:-1]]
    assert [(float(row[0]), int(row[1])) for row in documented] == [
        (s.compaction_threshold, s.max_file_size) for s in grid
    ]
    for setting, row in zip(grid, documented, strict=True):
        result = replay(tmp_path / "dlq-recording", setting)
        assert sweep_line(result.as_dict()).split()[:-1] == row[:-1], setting
    assert lines[-1] == f"{result.records} records replayed per setting"


def test_pipeline_sweep_columns_are_documented() -> None:
    from msgcask.pipeline import sweep

    assert _names(_pipeline_table("sweepcolumns")) == sweep.FIELDS


# -- snippets, options and paths in every document -------------------------------------

PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "bench" / "README.md"]


def _python_snippets() -> list[Any]:
    """Every Python block of the pages, but those that start Spark (tests/pipeline
    runs the jobs; starting Spark takes longer than this whole file)."""
    return [
        pytest.param(code, id=f"{page.name}-{i}")
        for page in PAGES
        for i, code in enumerate(fenced_blocks(page.read_text(encoding="utf-8"), "python"))
        if "spark" not in code
    ]


@pytest.mark.parametrize("code", _python_snippets())
def test_python_snippet_runs(code: str) -> None:
    # Not tmp_path, which pytest keeps for its last three runs: pipeline.md's
    # snippets make stores of 50 and 200 MiB.
    with tempfile.TemporaryDirectory() as directory:
        run_snippet(code, Path(directory))


def _command_lines(text: str) -> list[str]:
    """Code spans and lines of code blocks: where a doc writes a command."""
    lines = [line for block in fenced_blocks(text) for line in block.splitlines()]
    return re.findall(r"`([^`\n]+)`", text) + lines


def test_cli_options_named_in_the_docs_exist() -> None:
    for page in PAGES:
        for line in _command_lines(page.read_text(encoding="utf-8")):
            # up to a comment or a table cell's end: what follows is prose
            for match in re.finditer(r"msgcask ((?:pipeline )?[a-z-]+)([^|#]*)", line):
                command = cli_command(match.group(1).split())
                if command is None:
                    continue  # no command follows: "the `msgcask` logger", say
                known = {*cli_options(command), "--help"}
                for option in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", match.group(2)):
                    assert option in known, f"{page.name}: {line.strip()!r}: no {option}"


def test_paths_named_in_the_docs_exist() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"`((?:bench|tests|src|docs|scripts)/[^`\s<*]+)`", text):
            assert (ROOT / path).exists(), f"{page.name} names {path}, which does not exist"


def _source_names() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(class name -> its attributes, module file stem -> its top-level names) of the
    source, read from the syntax tree: instance attributes are assigned, not declared."""
    classes: dict[str, set[str]] = {}
    modules: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = modules.setdefault(path.stem, set())
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                top |= {alias.asname or alias.name for alias in node.names}
            else:
                top |= _bound_names(node)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                attrs = classes.setdefault(node.name, set())
                for sub in ast.walk(node):
                    attrs |= _bound_names(sub)
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.ctx, ast.Store)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in ("self", "cls")
                    ):
                        attrs.add(sub.attr)
    return classes, modules


def _bound_names(node: ast.AST) -> set[str]:
    """The names a definition or an assignment statement binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return set()
    return {target.id for target in targets if isinstance(target, ast.Name)}


def test_source_names_in_the_docs_exist() -> None:
    classes, modules = _source_names()
    crash_points = _crash_points()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for owner, attr in re.findall(r"`([A-Za-z_]\w*)\.([A-Za-z_]\w*)[^`]*`", text):
            if attr == "py" or owner in sys.stdlib_module_names:
                continue  # a file name, or `queue.Empty` and the like
            if f"{owner}.{attr}" in crash_points:
                continue
            names = classes.get(owner, modules.get(owner))
            if names is not None:
                assert attr in names, f"{page.name} names {owner}.{attr}, which does not exist"


def test_the_settings_table_states_the_interval_bounds() -> None:
    (table,) = [t for t in marked_tables(DOCS / "tuning.md") if t.marker == "settings"]
    column = table.header.index("Allowed")
    allowed = {code_span(r[0]): r[column] for r in table.rows}
    assert allowed["sync_interval"] == (
        f"≥ {options.MIN_SYNC_INTERVAL:g}, ≤ {options.MAX_SYNC_INTERVAL:g}"
    )
    assert allowed["compaction_interval"].startswith(
        f"≥ {options.MIN_COMPACTION_INTERVAL:g}, ≤ {options.MAX_COMPACTION_INTERVAL:,.0f}"
    )


# -- benchmarks.md and bench/README.md -------------------------------------------------


def test_bench_readme_names_every_results_directory() -> None:
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`bench/results/([\w-]+)/`", text))
    on_disk = {p.name for p in (ROOT / "bench" / "results").iterdir() if p.is_dir()}
    assert named == on_disk, f"bench/README.md lacks {on_disk - named}, names {named - on_disk}"


def test_the_benchmarks_method_spans_every_dated_result() -> None:
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    match = re.search(r"measured between (\d{4}-\d\d-\d\d) and (\d{4}-\d\d-\d\d)", text)
    assert match, "docs/benchmarks.md: no 'measured between DATE and DATE' in its method"
    dates = set(re.findall(r"^## Results: (\d{4}-\d\d-\d\d)", text, re.M))
    assert dates, "docs/benchmarks.md: no '## Results: DATE' sections"
    assert (match[1], match[2]) == (min(dates), max(dates)), (match[0], sorted(dates))


# The keys of a run in a workload result that docs/benchmarks.md names fields under.
RESULT_RUN_KEYS = ("space", "phases", "reopen", "throughput", "latency", "counts")


def test_the_result_fields_benchmarks_md_names_are_in_the_schema() -> None:
    """``space.samples_over_bound``, ``reopen.crash.messages`` and the like name a run's
    fields in the JSON result: each must be in result.schema.json. A ``.name`` right
    after such a path (``.round_bytes`` after ``phases.priority_pin.high_messages_per_round``)
    is a sibling of its last field."""
    from msgcask.workloads.result import load_schema

    schema = load_schema()
    run = schema["$defs"]["run"]
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    keys = "|".join(RESULT_RUN_KEYS)
    named = re.findall(rf"`((?:{keys})(?:\.\w+)+)`((?:,\s*`\.\w+`)*)", text)
    assert named, "docs/benchmarks.md names no field of a result's runs"
    paths = []
    for path, siblings in named:
        parts = path.split(".")
        paths.append(parts)
        paths += [[*parts[:-1], s] for s in re.findall(r"`\.(\w+)`", siblings)]
    for parts in paths:
        node = run
        for i, part in enumerate(parts):
            while "$ref" in node:
                node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
            props = node.get("properties", {})
            where = ".".join(parts[:i]) or "a run"
            assert part in props, f"benchmarks.md names {'.'.join(parts)}: no {part} in {where}"
            node = props[part]


# What a doc writes ``store.``, ``Store.`` or ``stats().`` before: the class whose
# attribute the first link of the chain names.
ATTRIBUTE_CHAINS: dict[str, str] = {"store": "Store", "Store": "Store", "stats()": "StoreStats"}
# The class an attribute of those classes is, where a doc goes on past it.
ATTRIBUTE_CLASSES: dict[tuple[str, str], str] = {
    ("Store", "stats()"): "StoreStats",
    ("Store", "recovery"): "RecoveryReport",
    ("StoreStats", "compaction"): "CompactionStats",
}


def test_store_and_stats_attributes_in_the_docs_exist() -> None:
    """``store.why_kept(...)``, ``stats().compaction.failed_passes``,
    ``store.recovery.unclean``: every name in such a chain is one the class has."""
    classes, _ = _source_names()
    checked = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for span in re.findall(r"`([^`\n]+)`", text):
            chain = re.match(r"(store|Store|stats\(\))((?:\.\w+(?:\([^()]*\))?)+)", span)
            if not chain:
                continue
            owner = ATTRIBUTE_CHAINS[chain[1]]
            for name, call in re.findall(r"\.(\w+)(\([^()]*\))?", chain[2]):
                assert name in classes[owner], f"{page.name}: {span!r}: {owner} has no {name}"
                checked += 1
                link = f"{name}()" if call else name
                if (owner, link) not in ATTRIBUTE_CLASSES:
                    break  # a method's result or a value: the chain's end
                owner = ATTRIBUTE_CLASSES[owner, link]
    assert checked >= 20, checked


def test_finding_damage_output_is_what_check_prints(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The damaged copy is made by the section's own commands, from the session's
    store after its first ``msgcask compact``; ``PROBLEM`` lines go to stderr. Then
    the store is opened and ``orders`` drained: what the section says is logged is."""
    import subprocess

    from click.testing import CliRunner

    from msgcask.cli.main import main

    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("### Finding damage") : text.index("## When an error names")]
    run_snippet(snippet_making(DOCS / "operations.md", "/tmp/orders-store"), tmp_path)
    runner = CliRunner()
    assert runner.invoke(main, ["compact", str(tmp_path / "orders-store")]).exit_code == 0
    (script,) = fenced_blocks(section, "sh")
    moved = script.replace("/tmp/", f"{tmp_path}/")
    subprocess.run(["bash", "-euo", "pipefail", "-c", moved], check=True, timeout=60)
    (command, expected), *_ = transcripts(section)
    assert command == "msgcask check /tmp/damaged", command
    damaged = tmp_path / "damaged"
    result = runner.invoke(main, ["check", str(damaged)])
    assert result.exit_code == 1, result.output
    out, err = (
        [line.replace(str(damaged), "/tmp/damaged") for line in stream.splitlines()]
        for stream in (result.stdout, result.stderr)
    )
    assert err and all(line.startswith("PROBLEM: ") for line in err), err
    assert out + err == expected

    logged = [
        line
        for block in fenced_blocks(section, "")
        for line in block.splitlines()
        if line.startswith("msgcask: ")
    ]
    assert len(logged) == 2, logged
    with caplog.at_level("WARNING", logger="msgcask"):
        with msgcask.open(damaged, max_file_size=64 * 1024, compaction_interval=None) as store:
            orders = store.queue("orders")
            delivered = 0
            while True:
                try:
                    orders.ack(orders.get(block=False))
                except msgcask.Empty:
                    break
                delivered += 1
    messages = [r.getMessage().replace(str(damaged), "/tmp/damaged") for r in caplog.records]
    for line in logged:
        assert line in messages, (line, messages)
    assert delivered == 199


def _quoted_error(name: str) -> str:
    """The message docs/operations.md quotes for ``msgcask.errors.NAME``."""
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    (line,) = re.findall(rf"^msgcask\.errors\.{name}: (.+)$", text, re.M)
    return line


def test_the_quoted_store_full_error_is_what_the_put_raises(tmp_path: Path) -> None:
    """As the text says: the 191st put of 1,000 bytes in queue ``q`` of a new store
    with 64 KiB data files and a cap of four."""
    options: dict[str, Any] = {"max_file_size": 64 * 1024, "max_store_size": 4 * 64 * 1024}
    with msgcask.open(tmp_path / "full", compaction_interval=None, **options) as store:
        q = store.queue("q")
        for _ in range(190):
            q.put(b"x" * 1000)
        with pytest.raises(msgcask.StoreFullError) as refused:
            q.put(b"x" * 1000)
    assert str(refused.value) == _quoted_error("StoreFullError")


def test_the_quoted_store_locked_error_is_what_open_raises(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "demo-store"
    code = "import msgcask, sys; s = msgcask.open(sys.argv[1]); print('open', flush=True); input()"
    holder = subprocess.Popen(
        [sys.executable, "-c", code, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "open\n"
        with pytest.raises(msgcask.StoreLockedError) as refused:
            msgcask.open(path)
    finally:
        holder.communicate("\n", timeout=60)
    got = str(refused.value).replace(str(path), "/tmp/demo-store")
    assert got.replace(f"pid {holder.pid}", "pid 1108") == _quoted_error("StoreLockedError")


def _every_command(
    command: click.Command, words: str = "msgcask"
) -> list[tuple[str, click.Command]]:
    out = [(words, command)]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            out += _every_command(sub, f"{words} {name}")
    return out


def test_the_file_size_bounds_are_the_same_in_the_docs_and_every_help() -> None:
    """``max_file_size``'s bounds, as the settings table and every size option's help
    state them, are the ones ``msgcask.open`` enforces."""
    from msgcask.cli.bench import _human
    from msgcask.cli.main import main

    bounds = f"{_human(options.MIN_FILE_SIZE)} to {_human(options.MAX_FILE_SIZE_LIMIT)}"
    (table,) = [t for t in marked_tables(DOCS / "tuning.md") if t.marker == "settings"]
    column = table.header.index("Allowed")
    allowed = {code_span(r[0]): r[column] for r in table.rows}
    assert allowed["max_file_size"] == bounds
    assert allowed["max_store_size"] == f"`None`, or ≥ {options.MIN_STORE_FILES} × `max_file_size`"
    helps = [
        (f"{words} {p.opts[0]}", p.help or "")
        for words, command in _every_command(main)
        for p in command.params
        if isinstance(p, click.Option) and p.opts[0] in ("--max-file-size", "--file-sizes")
    ]
    assert len(helps) >= 6, helps
    for option, text in helps:
        assert bounds in text, f"{option} --help: {text!r} does not say {bounds}"
