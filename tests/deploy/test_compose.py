"""docker-compose.yml against the Compose specification's JSON schema, plus what the
schema cannot know: dependencies exist, health conditions have health checks, the services
run the way the chart runs them."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
import yaml

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
        assert service["environment"]["ARES_HTTP_PORT"] == "8080"
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
