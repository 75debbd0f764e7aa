"""``ares acls``: one Kafka principal per service, with exactly the ACLs its code needs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click

from ares.cli.common import err_console, run_async, settings_of
from ares.errors import ConfigError
from ares.security.acls import (
    FEATURES,
    SERVICES,
    Acl,
    AclPlan,
    kafka_acls_commands,
    markdown,
    plan_acls,
)
from ares.security.admin import apply_acls
from ares.topics import load_topics

_SERVICES_HELP = f"only this service (repeatable): {', '.join(SERVICES)}  [default: all]"


def _selection(func: click.decorators.FC) -> click.decorators.FC:
    options = [
        click.option("--file", "file", type=click.Path(dir_okay=False, path_type=Path),
                     help="topics file  [default: $ARES_TOPICS_FILE, else topics.yaml of the "
                          "checkout, else the packaged copy]"),
        click.option("--environment",
                     help="section of environments: of topics.yaml  "
                          "[default: $ARES_TOPIC_ENVIRONMENT]"),
        click.option("--service", "services", multiple=True, metavar="SERVICE",
                     help=_SERVICES_HELP),
        click.option("--principal", "principals", multiple=True, metavar="SERVICE=User:NAME",
                     help="the principal of a service (repeatable)  "
                          "[default: User:ares-<service>]"),
        click.option("--with", "features", multiple=True,
                     type=click.Choice(sorted(FEATURES)),
                     help="an optional feature's ACLs (repeatable): "
                          + "; ".join(f"{k}: {v}" for k, v in FEATURES.items())),
        click.option("--legacy-idempotence", is_flag=True,
                     help="add Cluster IdempotentWrite for idempotent producers (brokers "
                          "before Kafka 3.0; later ones imply it from Write on a topic)"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _plan(ctx: click.Context, file: Path | None, environment: str | None,
          services: Sequence[str], principals: Sequence[str], features: Sequence[str],
          legacy_idempotence: bool) -> AclPlan:
    settings = settings_of(ctx)
    topics = load_topics(settings, file, environment=environment)
    named: dict[str, str] = {}
    for item in principals:
        service, sep, principal = item.partition("=")
        if not sep or not principal:
            raise ConfigError(f"--principal {item!r}: expected SERVICE=User:NAME")
        named[service.strip()] = principal.strip()
    return plan_acls(topics, services=services or None, principals=named, features=features,
                     legacy_idempotence=legacy_idempotence)


_GROUP_HELP = """Kafka ACLs: one principal per service, each with exactly what its code needs.

\b
The services and what each runs as:
""" + "\n".join(f"  {name:<16} {spec.runs}" for name, spec in SERVICES.items()) + """

\b
Only the runtime managers may write ares.events and ares.snapshots; an external
producer may write ares.commands only. Names come from topics.yaml and
ARES_TOPIC_PREFIX. Exit codes: 1 the broker refused, 2 bad option, 4 no broker.
"""


@click.group(help=_GROUP_HELP)
def acls() -> None:
    pass


@acls.command()
@_selection
@click.option("--format", "output", default="table", show_default=True,
              type=click.Choice(["table", "json", "markdown", "kafka-acls"]),
              help="markdown: the table of docs/operations.md; kafka-acls: kafka-acls.sh "
                   "commands, for ACLs set without ares")
@click.option("--json", "as_json", is_flag=True, help="the same as --format json")
@click.pass_context
def plan(ctx: click.Context, *, file: Path | None, environment: str | None,
         services: tuple[str, ...], principals: tuple[str, ...], features: tuple[str, ...],
         legacy_idempotence: bool, output: str, as_json: bool) -> None:
    """Print the ACLs of every service (no broker needed)."""
    acl_plan = _plan(ctx, file, environment, services, principals, features,
                     legacy_idempotence)
    if output == "markdown":
        click.echo(markdown(acl_plan), nl=False)
        return
    if output == "kafka-acls":
        click.echo(kafka_acls_commands(acl_plan), nl=False)
        return
    if as_json or output == "json":
        click.echo(json.dumps({
            "prefix": acl_plan.prefix, "features": sorted(acl_plan.features),
            "principals": dict(acl_plan.principals),
            "rows": [row.to_json() for row in acl_plan.rows],
            "acls": [_acl_json(acl) for acl in acl_plan.acls]}, indent=2))
        return
    width = max((len(row.name) for row in acl_plan.rows), default=0)
    for service, principal in acl_plan.principals.items():
        click.echo(f"{service}  {principal}  ({SERVICES[service].runs})")
        for row in (r for r in acl_plan.rows if r.service == service):
            name = row.name + ("*" if row.pattern == "PREFIXED" else "")
            click.echo(f"  {row.resource_type:<16} {name:<{width + 1}}  "
                       f"{', '.join(row.operations):<28} {row.why}")
        click.echo("")
    click.echo(f"{len(acl_plan.acls)} ACLs for {len(acl_plan.principals)} principal(s)"
               " (* = prefixed; ALLOW from any host)")


@acls.command()
@_selection
@click.option("--dry-run", is_flag=True, help="print what would change; change nothing")
@click.option("--prune", is_flag=True,
              help="also delete ALLOW rules of these principals that the plan does not hold")
@click.pass_context
def apply(ctx: click.Context, *, file: Path | None, environment: str | None,
          services: tuple[str, ...], principals: tuple[str, ...], features: tuple[str, ...],
          legacy_idempotence: bool, dry_run: bool, prune: bool) -> None:
    """Create the planned ACLs that the broker lacks (idempotent), through the Admin API.

    Run it as a principal allowed to change ACLs (Alter and Describe on the cluster: a
    super user). Rules of these principals that the plan does not hold are listed, and
    deleted with --prune.
    """
    acl_plan = _plan(ctx, file, environment, services, principals, features,
                     legacy_idempotence)
    changes = run_async(apply_acls(settings_of(ctx), acl_plan.acls, dry_run=dry_run,
                                   prune=prune))
    verb = "would create" if dry_run else "created"
    for acl in changes.created:
        click.echo(f"  {verb:<13} {_show(acl)}")
    for acl in changes.extra:
        gone = acl in changes.deleted
        click.echo(f"  {('would delete' if dry_run else 'deleted') if gone else 'not planned':<13}"
                   f" {_show(acl)}")
    for line in changes.other:
        err_console.print(f"[bold yellow]NOTE:[/] left alone: {line}", highlight=False)
    if changes.extra and not prune:
        err_console.print(f"[bold yellow]WARNING:[/] {len(changes.extra)} ACL(s) of these "
                          "principals are not in the plan (--prune deletes them)",
                          highlight=False)
    click.echo(f"{len(changes.created)} {verb}, {len(changes.present)} present, "
               f"{len(changes.deleted)} {'to delete' if dry_run else 'deleted'}, "
               f"{len(acl_plan.principals)} principal(s)")


def _show(acl: Acl) -> str:
    star = "*" if acl.pattern == "PREFIXED" else ""
    return f"{acl.principal:<28} {acl.operation:<16} {acl.resource_type} {acl.name}{star}"


def _acl_json(acl: Acl) -> dict[str, str]:
    return {"principal": acl.principal, "resource_type": acl.resource_type, "name": acl.name,
            "pattern": acl.pattern, "operation": acl.operation}
