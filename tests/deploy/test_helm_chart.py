"""The Helm chart, checked with the real tools: helm (built from source) lints and renders
it, kubernetes-validate --strict validates every rendered object against the Kubernetes
OpenAPI schemas, the ServiceMonitor is validated against the Prometheus Operator's CRD, and
values.schema.json rejects wrong values. Then what the chart promises: static membership,
the topics hook, probes, the grace period, secrets."""

from __future__ import annotations

import base64
import copy
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate.utils as kubernetes_validate_utils
import pytest
import yaml

from ares.cli.run import FAST_FAILOVER_GROUP_HEARTBEAT_MS, FAST_FAILOVER_HEARTBEAT_S
from ares.config import bool_setting
from ares.health_checker.config import HealthConfig
from ares.probes import DEFAULT_PORTS
from tests.deploy.tools import (
    CHART,
    PRODUCTION_VALUES,
    PROMETHEUS_OPERATOR,
    REPO,
    REQUIRED_SETS,
    build_helm,
    documents,
    go_module_dir,
    merged_values,
    run,
    sum_shutdown_phases,
    venv_tool,
)

# Building helm the first time takes minutes; the session fixture runs inside the first test.
pytestmark = pytest.mark.timeout(1800)

# The chart's kubeVersion floor, and the newest Kubernetes the installed kubernetes-validate
# carries schemas for (1.37 with kubernetes-validate 1.37).
OLDEST_KUBERNETES = "1.31.0"
CURRENT_KUBERNETES = kubernetes_validate_utils.latest_version()

# name -> (values files, --set values)
VALUE_SETS: dict[str, tuple[tuple[Path, ...], tuple[str, ...]]] = {
    "default": ((), REQUIRED_SETS),
    "production": ((PRODUCTION_VALUES,), ()),
}
SERVICE_COMPONENTS = ("runtime-manager", "health-checker", "compactor", "replay-reader")
# component -> its key in values.yaml (templates/_helpers.tpl, "ares-mesh.components").
VALUES_KEYS = {"runtime-manager": "runtimeManager", "health-checker": "healthChecker",
               "compactor": "compactor", "replay-reader": "replayReader"}

# ARES_* names the chart sets that no code reads yet; docs/operations.md says so too.
# When config.py starts reading one, it drops off this list (the test below tells).
PLANNED_SETTINGS = {
    "ARES_KAFKA_SECURITY_PROTOCOL", "ARES_KAFKA_SASL_MECHANISM", "ARES_KAFKA_SASL_USERNAME",
    "ARES_KAFKA_SASL_PASSWORD", "ARES_KAFKA_SSL_CA_FILE", "ARES_KAFKA_SSL_CERT_FILE",
    "ARES_KAFKA_SSL_KEY_FILE",
}

Render = Callable[..., str]


@pytest.fixture(scope="session")
def helm() -> str:
    return build_helm()


@pytest.fixture(scope="session")
def render(helm: str) -> Render:
    cache: dict[tuple[Any, ...], str] = {}

    def render(values: str = "default", *extra_sets: str,
               kube: str = CURRENT_KUBERNETES, chart: Path = CHART) -> str:
        key = (values, extra_sets, kube, chart)
        if key not in cache:
            files, sets = VALUE_SETS[values]
            cache[key] = run(template_args(helm, files, (*sets, *extra_sets), kube, chart)
                             ).stdout
        return cache[key]

    return render


def template_args(helm: str, files: tuple[Path, ...], sets: tuple[str, ...],
                  kube: str = CURRENT_KUBERNETES, chart: Path = CHART) -> list[str]:
    args = [helm, "template", "ares-mesh", str(chart), "--namespace", "ares",
            "--kube-version", kube]
    for file in files:
        args += ["--values", str(file)]
    for value in sets:
        args += ["--set", value]
    return args


def objects(text: str, kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in documents(text) if doc["kind"] == kind}


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    return result


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom"))
            for item in container.get("env", [])}


# -- the tools ---------------------------------------------------------------------------

def test_helm_is_the_pinned_build(helm: str) -> None:
    helm_sh = (REPO / "scripts" / "helm.sh").read_text()
    pinned = re.search(r'ARES_HELM_VERSION:-(v3\.[0-9.]+)', helm_sh)
    assert pinned is not None
    assert run([helm, "version", "--short"]).stdout.startswith(pinned.group(1))


def test_chart_topics_file_is_the_repository_one() -> None:
    """The chart ships its own copy (charts cannot read outside their directory)."""
    copy_ = (CHART / "files" / "topics.yaml").read_bytes()
    assert copy_ == (REPO / "topics.yaml").read_bytes(), (
        "helm/ares-mesh/files/topics.yaml drifted: cp topics.yaml helm/ares-mesh/files/")


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_helm_lint_strict(helm: str, values: str) -> None:
    files, sets = VALUE_SETS[values]
    args = [helm, "lint", "--strict", str(CHART), "--kube-version", CURRENT_KUBERNETES]
    for file in files:
        args += ["--values", str(file)]
    for value in sets:
        args += ["--set", value]
    result = run(args)
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("kube", [OLDEST_KUBERNETES, CURRENT_KUBERNETES])
@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_rendered_manifests_pass_kubernetes_validate_strict(
        render: Render, values: str, kube: str, tmp_path: Path) -> None:
    manifest = tmp_path / f"{values}.yaml"
    manifest.write_text(render(values, kube=kube))
    tool = venv_tool("kubernetes-validate", "kubernetes-validate")
    result = run([tool, "--strict", "--quiet", "--kubernetes-version", kube, str(manifest)],
                 check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # Kinds without a bundled schema are only warned about: only the CRD may be one.
    unvalidated = [line for line in result.stdout.splitlines() if line.startswith("WARN")]
    assert all("kind ServiceMonitor " in line for line in unvalidated), unvalidated


def test_service_monitor_matches_the_prometheus_operator_crd(render: Render) -> None:
    crd_file = (go_module_dir(*PROMETHEUS_OPERATOR) / "example" /
                "prometheus-operator-crd-full" / "monitoring.coreos.com_servicemonitors.yaml")
    crd = yaml.safe_load(crd_file.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    validator = jsonschema.Draft7Validator(strict(version["schema"]["openAPIV3Schema"]))
    monitors = list(objects(render("production"), "ServiceMonitor").values())
    assert len(monitors) == 1
    problems = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(monitors[0])]
    assert problems == []
    broken = copy.deepcopy(monitors[0])
    broken["spec"]["endpoints"][0]["intervall"] = "30s"
    assert list(validator.iter_errors(broken)), "the strict CRD schema rejects unknown fields"
    assert "ServiceMonitor" not in {doc["kind"] for doc in documents(render("default"))}


def strict(schema: Any) -> Any:
    """Reject unknown fields, as `kubectl apply --validate=strict` does."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: strict(value) for key, value in schema.items()}
    if ("properties" in result and "additionalProperties" not in result
            and not result.get("x-kubernetes-preserve-unknown-fields")):
        result["additionalProperties"] = False
    return result


# -- values.schema.json ------------------------------------------------------------------

def test_required_values_have_no_default(helm: str) -> None:
    result = run(template_args(helm, (), ()), check=False)
    assert result.returncode != 0
    assert "/kafka/bootstrapServers" in result.stderr
    assert "/postgres" in result.stderr


@pytest.mark.parametrize(("bad", "message"), [
    ("kafka.bootstrapServers=kafka", "/kafka/bootstrapServers"),
    ("kafka.securityProtocol=TLS", "/kafka/securityProtocol"),
    ("kafka.securityProtocol=SASL_SSL", "/kafka/sasl"),       # no mechanism, no credentials
    ("runtimeManager.replicas=0", "/runtimeManager/replicas"),
    ("runtimeManager.replica=2", "replica"),                  # a typo is not ignored
    ("runtimeManager.sessionTimeoutMs=500", "/runtimeManager/sessionTimeoutMs"),
    ("settings.logLevel=verbose", "/settings/logLevel"),
    ("settings.httpPort=8080", "httpPort"),                   # per service: <key>.httpPort
    ("compactor.httpPort=0", "/compactor/httpPort"),          # a containerPort is 1-65535
    ("replayReader.httpPort=http", "/replayReader/httpPort"),
    ("settings.extraEnv.LOG_LEVEL=debug", "'LOG_LEVEL' does not match pattern"),
    ("postgres.dsn=mysql://a@b/c", "/postgres"),
    ("topics.prefix=a/b", "/topics/prefix"),
    ("shutdown.finishSeconds=-1", "/shutdown/finishSeconds"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
])
def test_values_schema_rejects_bad_values(helm: str, bad: str, message: str) -> None:
    sets = ("kafka.bootstrapServers=kafka:9092", "postgres.dsn=postgresql://a:b@db/ares", bad)
    result = run(template_args(helm, (), sets), check=False)
    assert result.returncode != 0, f"{bad} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr


def test_an_unknown_topics_environment_fails_with_the_defined_ones(helm: str) -> None:
    result = run(template_args(helm, (), (*REQUIRED_SETS, "topics.environment=prod")),
                 check=False)
    assert result.returncode != 0
    assert 'topics.environment "prod" is not an environment of topics.yaml' in result.stderr
    assert "production, staging" in result.stderr


def test_sasl_with_inline_credentials_renders_a_secret(render: Render) -> None:
    text = render("default", "kafka.securityProtocol=SASL_PLAINTEXT",
                  "kafka.sasl.mechanism=SCRAM-SHA-256", "kafka.sasl.username=ares",
                  "kafka.sasl.password=s3cret")
    secrets = objects(text, "Secret")
    assert set(secrets) == {"ares-mesh-kafka", "ares-mesh-topics-apply-kafka"}
    job = objects(text, "Job")["ares-mesh-topics-apply"]
    env = env_of(containers(job)[0])
    assert password_secret(job, env["ARES_KAFKA_SASL_PASSWORD_FILE"])[0] == \
        "ares-mesh-topics-apply-kafka"


# One Kafka principal per service: component -> its key under kafka.sasl.services.
PRINCIPAL_KEYS = {**VALUES_KEYS, "topics-apply": "topicsApply"}
INLINE_PRINCIPALS = tuple(
    f"kafka.sasl.services.{key}.{field}={field[0]}-{component}"
    for component, key in PRINCIPAL_KEYS.items() for field in ("username", "password"))
SASL_SETS = ("kafka.securityProtocol=SASL_SSL", "kafka.sasl.mechanism=SCRAM-SHA-512")


def password_secret(workload: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret, key) of the file at ``path`` in the workload's first container."""
    pod = workload["spec"]["template"]["spec"]
    directory, _, filename = path.rpartition("/")
    [mount] = [m for m in containers(workload)[0]["volumeMounts"]
               if m["mountPath"] == directory]
    assert mount["readOnly"] is True
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    [item] = [i for i in volume["secret"]["items"] if i["path"] == filename]
    return volume["secret"]["secretName"], item["key"]


def kafka_secrets(text: str) -> dict[str, tuple[str, str]]:
    """component -> the Secrets its username and password come from (the hook Job too)."""
    workloads = {**objects(text, "StatefulSet"), **objects(text, "Deployment"),
                 **objects(text, "Job")}
    result = {}
    for name, workload in workloads.items():
        env = env_of(containers(workload)[0])
        assert "ARES_KAFKA_SASL_PASSWORD" not in env, name
        secret, key = password_secret(workload, env["ARES_KAFKA_SASL_PASSWORD_FILE"])
        assert key == "password"
        result[name.removeprefix("ares-mesh-")] = (
            env["ARES_KAFKA_SASL_USERNAME"]["secretKeyRef"]["name"], secret)
    return result


def test_each_service_takes_its_own_kafka_secret_in_production(render: Render) -> None:
    text = render("production")
    assert kafka_secrets(text) == {
        component: (f"ares-kafka-{name}",) * 2 for component, name in (
            ("runtime-manager", "runtime-manager"), ("health-checker", "health-checker"),
            ("compactor", "compactor"), ("replay-reader", "replay-reader"),
            ("topics-apply", "topics"))}
    assert objects(text, "Secret") == {}  # the operator's Secrets, none of the chart's


def test_inline_credentials_render_one_secret_per_service(render: Render) -> None:
    text = render("default", *SASL_SETS, *INLINE_PRINCIPALS)
    secrets = objects(text, "Secret")
    used = kafka_secrets(text)
    assert set(used) == set(PRINCIPAL_KEYS)
    for component, (username_secret, password_secret) in used.items():
        assert username_secret == password_secret
        data = secrets[username_secret]["data"]
        assert base64.b64decode(data["username"]).decode() == f"u-{component}", component
        assert base64.b64decode(data["password"]).decode() == f"p-{component}", component
    # One Secret per principal and nothing shared between two services.
    assert len({secret for secret, _ in used.values()}) == len(PRINCIPAL_KEYS)
    assert set(secrets) == {secret for secret, _ in used.values()}
    hook = secrets[used["topics-apply"][0]]["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == "pre-install,pre-upgrade"  # it exists before the Job


def test_a_service_without_its_own_credentials_falls_back_to_the_shared_ones(
        render: Render) -> None:
    text = render("default", *SASL_SETS, "kafka.sasl.existingSecret=ares-kafka-shared",
                  "kafka.sasl.services.compactor.existingSecret=ares-kafka-trimmer")
    used = kafka_secrets(text)
    assert used.pop("compactor") == ("ares-kafka-trimmer",) * 2
    assert set(used.values()) == {("ares-kafka-shared",) * 2}


def test_sasl_needs_shared_or_every_services_credentials(helm: str) -> None:
    partial = tuple(s for s in INLINE_PRINCIPALS if "replayReader" not in s)
    result = run(template_args(helm, (), (*REQUIRED_SETS, *SASL_SETS, *partial)), check=False)
    assert result.returncode != 0, "a service without credentials was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert "/kafka/sasl" in result.stderr
    bad = run(template_args(helm, (), (*REQUIRED_SETS, "kafka.sasl.services.runtime.username=x")),
              check=False)
    assert bad.returncode != 0
    assert "runtime" in bad.stderr


# -- what the chart promises ---------------------------------------------------------------

@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_runtime_manager_is_a_statefulset_with_static_membership(render: Render,
                                                                  values: str) -> None:
    text = render(values)
    sets = objects(text, "StatefulSet")
    assert set(sets) == {"ares-mesh-runtime-manager"}
    manager = sets["ares-mesh-runtime-manager"]
    headless = objects(text, "Service")[manager["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    container = containers(manager)[0]
    assert container["args"][:2] == ["run", "runtime-manager"]
    env = env_of(container)
    assert env["ARES_INSTANCE_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert int(env["ARES_SESSION_TIMEOUT_MS"]) >= 1000
    grace = manager["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    files = VALUE_SETS[values][0]
    assert grace == sum_shutdown_phases(merged_values(*files))


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_every_service_runs_with_probes_and_resources(render: Render, values: str) -> None:
    text = render(values)
    workloads = {**objects(text, "StatefulSet"), **objects(text, "Deployment")}
    assert {name.removeprefix("ares-mesh-") for name in workloads} == set(SERVICE_COMPONENTS)
    pdbs = objects(text, "PodDisruptionBudget")
    for name, workload in workloads.items():
        container = containers(workload)[0]
        component = name.removeprefix("ares-mesh-")
        assert container["args"][:2] == ["run", component]
        assert container["ports"] == [{"name": "http",
                                       "containerPort": DEFAULT_PORTS[component],
                                       "protocol": "TCP"}]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
        assert container["resources"]["requests"]
        assert container["resources"]["limits"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        pod = workload["spec"]["template"]
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        # The PDB selects exactly this component's pods.
        selector = pdbs[name]["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert selector == workload["spec"]["selector"]["matchLabels"]


def http_ports(text: str) -> dict[str, tuple[int, str, int]]:
    """component -> (containerPort "http", ARES_HTTP_PORT, its Service's port "http")."""
    workloads = {**objects(text, "StatefulSet"), **objects(text, "Deployment")}
    services = objects(text, "Service")
    result = {}
    for name, workload in workloads.items():
        container = containers(workload)[0]
        (port,) = [p for p in container["ports"] if p["name"] == "http"]
        (service_port,) = services[name]["spec"]["ports"]
        assert service_port["name"] == service_port["targetPort"] == "http"
        result[name.removeprefix("ares-mesh-")] = (port["containerPort"],
                                                   env_of(container)["ARES_HTTP_PORT"],
                                                   service_port["port"])
    return result


def test_the_values_give_each_service_its_default_port() -> None:
    values = merged_values()
    assert "httpPort" not in values["settings"]
    assert {component: values[key]["httpPort"] for component, key in VALUES_KEYS.items()} \
        == DEFAULT_PORTS


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_each_service_listens_and_is_served_on_its_own_port(render: Render,
                                                            values: str) -> None:
    """The process (ARES_HTTP_PORT), the container, the probes (port "http") and the Service
    agree, per service, on its entry of ares.probes.DEFAULT_PORTS."""
    text = render(values)
    assert http_ports(text) == {component: (port, str(port), port)
                                for component, port in DEFAULT_PORTS.items()}
    # Not a shared setting: the ConfigMap (and so the topics Job) carries none.
    assert "ARES_HTTP_PORT" not in objects(text, "ConfigMap")["ares-mesh-config"]["data"]
    assert "ARES_HTTP_PORT" not in env_of(containers(objects(text, "Job")[
        "ares-mesh-topics-apply"])[0])


def test_one_services_port_changes_only_that_service(render: Render) -> None:
    ports = http_ports(render("default", "compactor.httpPort=9100"))
    assert ports.pop("compactor") == (9100, "9100", 9100)
    assert ports == {component: (port, str(port), port)
                     for component, port in DEFAULT_PORTS.items() if component != "compactor"}


@pytest.mark.parametrize(("bad", "message"), [
    ("settings.extraEnv.ARES_HTTP_PORT=9000", "settings.extraEnv.ARES_HTTP_PORT"),
    ("healthChecker.extraEnv[0].name=ARES_HTTP_PORT",
     "healthChecker.extraEnv: ARES_HTTP_PORT comes from healthChecker.httpPort"),
])
def test_extra_env_cannot_move_a_port_behind_the_charts_back(helm: str, bad: str,
                                                             message: str) -> None:
    result = run(template_args(helm, (), (*REQUIRED_SETS, bad)), check=False)
    assert result.returncode != 0, f"{bad} was accepted"
    assert message in result.stderr


def test_the_arena_is_off_by_default_and_on_only_where_asked(render: Render) -> None:
    for values in VALUE_SETS:
        assert objects(render(values), "ConfigMap")["ares-mesh-config"]["data"][
            "ARES_ARENA"] == "0", values
    demo = objects(render("default", "settings.arena=true"), "ConfigMap")
    assert demo["ares-mesh-config"]["data"]["ARES_ARENA"] == "1"


@pytest.mark.parametrize(("values", "bad", "message"), [
    # The production values refuse the arena: worker.crash makes runtime managers exit.
    ("production", "settings.arena=true", "settings.arena: the arena"),
    ("default", "topics.environment=production,settings.arena=true",
     "refused with topics.environment production"),
    # ... and it cannot come in behind the chart's back.
    ("production", "settings.extraEnv.ARES_ARENA=1", "settings.extraEnv.ARES_ARENA"),
    ("production", "runtimeManager.extraEnv[0].name=ARES_ARENA,"
                   "runtimeManager.extraEnv[0].value=1",
     "runtimeManager.extraEnv: ARES_ARENA comes from settings.arena"),
    ("default", "settings.arena=yes", "/settings/arena"),
])
def test_the_arena_is_refused_in_production(helm: str, values: str, bad: str,
                                            message: str) -> None:
    files, sets = VALUE_SETS[values]
    result = run(template_args(helm, files, (*sets, bad)), check=False)
    assert result.returncode != 0, f"{bad} was accepted with the {values} values"
    assert message in result.stderr


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_fast_failover_is_the_charts_default_as_it_is_the_clis(render: Render,
                                                               values: str) -> None:
    """The chart sets what `ares run` defaults to: a lost runtime manager removed from its
    group by the health checker after 3 silent 0.25 s heartbeats (docs/health.md)."""
    text = render(values)
    manager = env_of(containers(objects(text, "StatefulSet")["ares-mesh-runtime-manager"])[0])
    assert float(manager["ARES_HEARTBEAT_INTERVAL_S"]) == FAST_FAILOVER_HEARTBEAT_S
    assert int(manager["ARES_GROUP_HEARTBEAT_MS"]) == FAST_FAILOVER_GROUP_HEARTBEAT_MS
    checker = env_of(containers(objects(text, "Deployment")["ares-mesh-health-checker"])[0])
    assert bool_setting(checker, "ARES_HEALTH_REMOVE_LOST_WORKERS") is True
    assert HealthConfig().remove_lost_workers is True
    others = {name for name, workload in objects(text, "Deployment").items()
              if "ARES_HEALTH_REMOVE_LOST_WORKERS" in env_of(containers(workload)[0])}
    assert others == {"ares-mesh-health-checker"}


def test_only_the_replay_reader_gets_the_database(render: Render) -> None:
    workloads = {**objects(render("production"), "StatefulSet"),
                 **objects(render("production"), "Deployment")}
    with_dsn = {name for name, workload in workloads.items()
                if "ARES_POSTGRES_DSN" in env_of(containers(workload)[0])}
    assert with_dsn == {"ares-mesh-replay-reader"}
    reader = env_of(containers(workloads["ares-mesh-replay-reader"])[0])
    assert reader["ARES_POSTGRES_DSN"]["secretKeyRef"] == {"name": "ares-postgres",
                                                           "key": "dsn"}


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_topics_are_applied_by_a_pre_install_hook_from_topics_yaml(render: Render,
                                                                   values: str) -> None:
    text = render(values)
    job = objects(text, "Job")["ares-mesh-topics-apply"]
    hooks = job["metadata"]["annotations"]
    assert hooks["helm.sh/hook"] == "pre-install,pre-upgrade"
    container = containers(job)[0]
    assert container["args"] == ["topics", "apply", "--file", "/etc/ares/topics/topics.yaml"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in job["spec"]["template"]["spec"]["volumes"]}
    hook_config = volumes[mounts["/etc/ares/topics"]]["configMap"]["name"]
    config_maps = objects(text, "ConfigMap")
    # Its ConfigMap is a hook too, created first: pre-install hooks run before the release.
    annotations = config_maps[hook_config]["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == hooks["helm.sh/hook"]
    assert int(annotations["helm.sh/hook-weight"]) < int(hooks["helm.sh/hook-weight"])
    topics = (REPO / "topics.yaml").read_text()
    assert config_maps[hook_config]["data"]["topics.yaml"] == topics
    assert config_maps["ares-mesh-topics"]["data"]["topics.yaml"] == topics


def test_settings_reach_the_services_through_the_configmap(render: Render) -> None:
    text = render("production")
    config = objects(text, "ConfigMap")["ares-mesh-config"]["data"]
    assert config["ARES_KAFKA_BOOTSTRAP"].count(":9094") == 3
    assert config["ARES_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert config["ARES_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert config["ARES_TOPIC_ENVIRONMENT"] == "production"
    assert config["ARES_TOPICS_FILE"] == "/etc/ares/topics/topics.yaml"
    manager = objects(text, "StatefulSet")["ares-mesh-runtime-manager"]
    container = containers(manager)[0]
    assert container["envFrom"] == [{"configMapRef": {"name": "ares-mesh-config"}}]
    env = env_of(container)
    assert env["ARES_KAFKA_SASL_USERNAME"]["secretKeyRef"] == {
        "name": "ares-kafka-runtime-manager", "key": "username"}
    # The password is a file of the service's Secret, never an environment variable.
    assert "ARES_KAFKA_SASL_PASSWORD" not in env
    assert password_secret(manager, env["ARES_KAFKA_SASL_PASSWORD_FILE"]) == (
        "ares-kafka-runtime-manager", "password")
    # The CA file the setting names is where the Secret is mounted.
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert config["ARES_KAFKA_SSL_CA_FILE"] == f"{mounts['kafka-tls']}/ca.crt"
    # Credentials come from the operator's Secrets: the chart renders none of its own.
    assert objects(text, "Secret") == {}


def test_every_setting_the_chart_sets_is_read_by_ares_or_marked_planned(
        render: Render) -> None:
    text = render("production") + render("default")
    names = set(re.findall(r"\bARES_[A-Z0-9_]+", text))
    sources = "\n".join(path.read_text() for path in (REPO / "services" / "ares").rglob("*.py"))
    unread = {name for name in names if name not in sources}
    assert unread <= PLANNED_SETTINGS, (
        f"set by the chart, read by nothing: {unread - PLANNED_SETTINGS}")
    operations = (REPO / "docs" / "operations.md").read_text()
    for name in unread:
        assert name in operations, f"docs/operations.md must say {name} is planned"


def test_notes_tell_the_operator_what_to_do_next(helm: str, tmp_path: Path) -> None:
    # helm template does not render NOTES.txt: render it through tpl in a copy of the chart.
    chart = tmp_path / "ares-mesh"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "NOTES.txt")
    (chart / "templates" / "notes-for-test.yaml").write_text(
        'notes: {{ tpl (.Files.Get "files/NOTES.txt") . | toJson }}\n')
    files, _ = VALUE_SETS["production"]
    args = template_args(helm, files, ("runtimeManager.replicas=50",), chart=chart)
    notes = yaml.safe_load(run([*args, "--show-only", "templates/notes-for-test.yaml"]
                               ).stdout)["notes"]
    assert "48 partitions per agent topic" in notes
    assert "WARNING: 50 runtime managers for 48 partitions: 2 of them will own" in notes
    assert "rollout status statefulset/ares-mesh-runtime-manager" in notes
    port = DEFAULT_PORTS["runtime-manager"]
    assert f"runtime-manager  50 replica(s), port {port}" in notes
    assert f"port-forward pod/ares-mesh-runtime-manager-0 {port}\n" in notes
    assert f"curl -s localhost:{port}/readyz" in notes
    assert "docs/operations.md" in notes
    # The production values give every service its own Kafka principal: no shared one.
    assert "share one Kafka principal" not in notes
    shared = yaml.safe_load(run([*template_args(helm, (), (
        *REQUIRED_SETS, *SASL_SETS, "kafka.sasl.existingSecret=ares-kafka",
        "kafka.sasl.services.compactor.existingSecret=ares-kafka-compactor"), chart=chart),
        "--show-only", "templates/notes-for-test.yaml"]).stdout)["notes"]
    assert ("share one Kafka principal (kafka.sasl.username or existingSecret), so each may do\n"
            "what any of them may: health-checker, replay-reader, runtime-manager, topics-apply."
            ) in shared
