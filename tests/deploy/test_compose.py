"""docker-compose.yml against the Compose specification's JSON schema, plus what the
schema cannot know: dependencies exist, health conditions have health checks, the services
run the way the chart runs them."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jsonschema
import pytest
import yaml

from ares.probes import DEFAULT_PORTS
from tests.deploy.tools import COMPOSE_GO, REPO, go_module_dir, merged_values, sum_shutdown_phases

ARES_SERVICES = {"runtime-manager", "health-checker", "compactor", "replay-reader"}


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    """The schema docker compose itself validates with (compose-go, pinned)."""
    schema = json.loads((go_module_dir(*COMPOSE_GO) / "schema" / "compose-spec.json")
                        .read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # safe_load resolves the `<<` merge keys, as Compose does before validating.
    document: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return document


def errors(validator: jsonschema.protocols.Validator, document: dict[str, Any]) -> list[str]:
    return [f"{error.json_path}: {error.message}" for error in validator.iter_errors(document)]


def test_compose_file_matches_the_compose_specification(
        validator: jsonschema.protocols.Validator, compose: dict[str, Any]) -> None:
    assert errors(validator, compose) == []


@pytest.mark.parametrize(("path", "value"), [
    (("services", "kafka", "healthcheck", "intervall"), "5s"),
    (("services", "topics", "depends_on", "kafka", "condition"), "service_ready"),
    (("services", "postgres", "ports"), "5432"),
])
def test_the_schema_rejects_mistakes(validator: jsonschema.protocols.Validator,
                                     compose: dict[str, Any], path: tuple[str, ...],
                                     value: object) -> None:
    broken = copy.deepcopy(compose)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert errors(validator, broken)


def test_dependencies_exist_and_health_conditions_have_health_checks(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, spec in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[dependency], (name, dependency)
            if condition == "service_completed_successfully":
                assert services[dependency].get("restart") == "no", (name, dependency)


def test_infrastructure_is_apache_kafka_kraft_and_postgres_15(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert kafka["environment"]["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert compose["services"]["postgres"]["image"] == "postgres:15"


def test_topics_are_applied_once_before_every_service(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["topics"]["command"] == ["topics", "apply"]
    started = {name for name, service in services.items()
               if service.get("command", [None])[0] == "run"}
    assert started
    for name in started:
        assert services[name]["depends_on"]["topics"]["condition"] == \
            "service_completed_successfully"


def test_the_four_services_run_with_readiness_checks_and_restarts(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    run = {name: service for name, service in services.items()
           if service.get("command", [None])[0] == "run"}
    assert {service["command"][1] for service in run.values()} == ARES_SERVICES
    for name, service in run.items():
        assert service["image"] == "ares-mesh:dev", name
        assert service["restart"] == "unless-stopped", name
        assert "/readyz" in " ".join(service["healthcheck"]["test"]), name
    assert "ARES_POSTGRES_DSN" in run["replay-reader"]["environment"]
    assert run["replay-reader"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_runtime_managers_have_distinct_stable_ids_and_the_charts_grace_period(
        compose: dict[str, Any]) -> None:
    managers = [service for service in compose["services"].values()
                if service.get("command") == ["run", "runtime-manager"]]
    assert len(managers) == 2
    ids = {manager["environment"]["ARES_INSTANCE_ID"] for manager in managers}
    assert len(ids) == 2, "static membership needs one id per member"
    grace = f"{sum_shutdown_phases(merged_values())}s"
    assert {manager["stop_grace_period"] for manager in managers} == {grace}


def ares_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: service for name, service in compose["services"].items()
            if service.get("command", [None])[0] == "run"}


def test_each_service_listens_on_its_own_port_and_publishes_it(
        compose: dict[str, Any]) -> None:
    """ARES_HTTP_PORT and the container side of the port mapping are the service's entry of
    ares.probes.DEFAULT_PORTS (what it uses without ARES_HTTP_PORT, and the Helm chart's)."""
    host_ports = []
    for name, service in ares_services(compose).items():
        port = DEFAULT_PORTS[service["command"][1]]
        assert service["environment"]["ARES_HTTP_PORT"] == str(port), name
        (mapping,) = service["ports"]
        host, _, container = mapping.partition(":")
        assert int(container) == port, name
        host_ports.append(int(host))
    assert len(set(host_ports)) == len(host_ports), "one host port per container"
    # The header comment's promise.
    assert sorted(host_ports) == list(range(8081, 8086))
    # The one-shot topics job serves nothing.
    assert "ARES_HTTP_PORT" not in compose["services"]["topics"]["environment"]


class ReadyzServer(ThreadingHTTPServer):
    """Answers /readyz with ``status``, like a service's probe server."""

    status = 200


class _Readyz(BaseHTTPRequestHandler):
    server: ReadyzServer

    def do_GET(self) -> None:
        self.send_response(self.server.status if self.path == "/readyz" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def readyz() -> Iterator[ReadyzServer]:
    server = ReadyzServer(("127.0.0.1", 0), _Readyz)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_the_health_check_asks_readyz_on_the_containers_own_port(
        compose: dict[str, Any], readyz: ReadyzServer) -> None:
    """The one x-ready anchor serves every service: its command reads ARES_HTTP_PORT."""
    commands = {json.dumps(service["healthcheck"]["test"])
                for service in ares_services(compose).values()}
    assert len(commands) == 1
    kind, program, flag, code = json.loads(commands.pop())
    assert (kind, program, flag) == ("CMD", "python", "-c")

    def check(port: int) -> int:
        env = {**os.environ, "ARES_HTTP_PORT": str(port)}
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              timeout=30, check=False).returncode

    port = readyz.server_address[1]
    assert check(port) == 0
    readyz.status = 503
    assert check(port) != 0, "not ready: unhealthy"
    readyz.status = 200
    assert check(free_port()) != 0, "nothing on that port: unhealthy"
