"""``ares schemas``: the Avro schemas — list, check their evolution, sync the package copy,
export them for consumers in other languages."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ares.events.wire.compat import check_directory, copy_drift, sync_copy
from ares.events.wire.export import EXTENSIONS, FORMATS, collect, dumps, export
from ares.events.wire.schemas import load_directory, package_schema_dir, repo_schema_dir, schema_dir

console = Console(highlight=False)

_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


@click.group()
def schemas() -> None:
    """The Avro schemas of every ares record (schemas/*.avsc).

    \b
    schemas/released/vN/ holds each released version; decoding accepts them all, and
    `ares schemas check` proves the current schemas can read their records.
    """


@schemas.command("list")
@click.option("--dir", "directory", type=_DIR, help="schema directory [default: the loaded one]")
def list_(directory: Path | None) -> None:
    """Record names, single-object fingerprints and files."""
    directory = directory or schema_dir()
    table = Table(box=None)
    table.add_column("record")
    table.add_column("fingerprint (CRC-64-AVRO, LE)")
    table.add_column("file", overflow="fold")
    for sf in load_directory(directory).values():
        table.add_row(sf.name, sf.fingerprint.hex(), str(sf.path))
    console.print(table)


@schemas.command()
@click.option("--dir", "directory", type=_DIR,
              help="the schemas to check [default: the loaded schema directory]")
@click.option("--against", "against", type=_DIR, multiple=True,
              help="a released version to check against (repeatable) "
                   "[default: every directory under <dir>/released/]")
def check(directory: Path | None, against: tuple[Path, ...]) -> None:
    """Prove BACKWARD compatibility with released versions; exit 1 on any problem.

    Two proofs per schema and release: Avro resolution rules (added fields have
    defaults, type changes are promotions, ...) and a data check (sample records written
    with the old schema are read with the new one). Plus ares's policies: docs on every
    record and field, `hash` last in the Event, no field removed from the Event.
    """
    directory = directory or schema_dir()
    report = check_directory(directory, list(against) or None)
    problems = [str(p) for p in report.problems]
    if directory.resolve() == repo_schema_dir().resolve():
        problems += [f"package copy {package_schema_dir()}: {d} (run `ares schemas sync`)"
                     for d in copy_drift(directory, package_schema_dir())]
    for name, release, samples in report.checked:
        console.print(f"checked {name}: {release} -> current ({samples} sample records)")
    if not report.checked:
        console.print(f"no released version to compare with under {directory}")
    if problems:
        for problem in problems:
            console.print(f"[red]incompatible[/] {problem}")
        console.print(f"[bold red]{len(problems)} problem(s)[/]")
        # Not ctx.exit(1): run_cli runs click with standalone_mode=False, where Exit becomes
        # a return value that run_cli drops; SystemExit reaches the process.
        raise SystemExit(1)
    console.print(f"[green]ok[/]: {len(report.checked)} comparison(s), no problem")


@schemas.command()
@click.option("--dir", "directory", type=_DIR, help="the source [default: the repository's]")
def sync(directory: Path | None) -> None:
    """Copy schemas/ into the package (ares/events/wire/avsc), for non-editable installs."""
    source = directory or repo_schema_dir()
    target = package_schema_dir()
    changed = sync_copy(source, target)
    for rel in changed:
        console.print(f"updated {target / rel}")
    console.print(f"{target} is in sync with {source}" if not changed else
                  f"{len(changed)} file(s) updated")


@schemas.command("export")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="avsc", show_default=True,
              help="avsc: the Avro schema with an x-ares attribute (version, fingerprint, "
                   "canonical form); json-schema: JSON Schema 2020-12 of the Avro JSON "
                   "encoding; markdown: a page per schema")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              help="write one file per schema and version, <name>.<version>.<ext> "
                   f"({', '.join(f'.{e}' for e in EXTENSIONS.values())}) "
                   "[default: print to stdout]")
@click.option("--released/--no-released", default=True, show_default=True,
              help="include every released version (schemas/released/vN/)")
@click.option("--dir", "directory", type=_DIR, help="schema directory [default: the loaded one]")
def export_(fmt: str, out: Path | None, released: bool, directory: Path | None) -> None:
    """Schema documents for consumers: generate types in another language from them.

    \b
    Example:
      ares schemas export --format json-schema --out build/schemas

    Every document names its version (`current`, or the release `vN`) and the schema's
    fingerprint: the CRC-64-AVRO of its Parsing Canonical Form, as hex of the 8 bytes in
    little-endian order (as in the single-object header `C3 01` + fingerprint), and as
    the signed int64 Java's `SchemaNormalization.parsingFingerprint64` returns.
    json-schema describes the Avro JSON encoding (JsonEncoder, fastavro.json_writer): a
    non-null union value is wrapped, {"string": "x"}; bytes are ISO-8859-1 strings.

    Without --out the JSON formats print one JSON array (one document per schema and
    version) and markdown prints the pages one after the other.
    """
    directory = directory or schema_dir()
    files = collect(directory, released=released)
    if not files:
        raise click.UsageError(f"no .avsc file in {directory}", click.get_current_context())
    documents = export(files, fmt)
    if out is None:
        if fmt == "markdown":
            click.echo("\n".join(d.text for d in documents), nl=False)
        else:
            click.echo(dumps([d.document for d in documents]), nl=False)
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        for d in documents:
            (out / d.file_name).write_text(d.text, encoding="utf-8")
    except OSError as e:
        raise click.UsageError(f"--out {out}: {e}", click.get_current_context()) from e
    console.print(f"wrote {len(documents)} {fmt} document(s) to {out}")
