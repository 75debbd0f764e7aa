"""Who reaches which broker through which proxy: the chaos run's network, as data. Pure.

Every proxied client (a service, the load) has a listener of its own on every broker,
advertised at that client's proxy in front of it, so metadata never routes the client
around its proxy. On a cluster the brokers reach each other through proxies too, which is
what lets a run cut one broker off from the rest (``broker_partition``) or slow it down:

* inter-broker traffic: broker *n* speaks to the others on its own listener ``BROKER<n>``
  (``inter.broker.listener.name`` is a per-broker setting), which every broker advertises
  at the proxy ``broker.<n>-<m>`` in front of it: one proxy per ordered pair of brokers;
* controller traffic: node *n*'s ``controller.quorum.voters`` names the other voters at
  the proxies ``controller.<n>-<m>`` (the quorum is static, so each node may see its own
  addresses), and itself at its real controller port.

Each node keeps a direct ``PLAINTEXT`` listener: the run's own observer (readiness, the
settle reads, the audit) and ``ares dev``'s probes use it, never a service.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ares.devenv.kafka import HOST, KafkaCluster

# Routes between brokers: their source is "node-<n>".
NODE = "node-"


@dataclass(frozen=True, slots=True)
class Route:
    """One proxy: ``listen_port`` forwards to ``upstream_port`` of broker ``node``."""

    name: str  # the proxy's name ("runtime-manager-1.n2", "broker.1-2", "controller.1-2")
    source: str  # the client's name, or "node-<n>" for a broker's own traffic
    node: int  # the broker it leads to
    listen_port: int
    upstream_port: int


@dataclass(slots=True)
class Mesh:
    routes: list[Route] = field(default_factory=list)
    overrides: dict[int, dict[str, str]] = field(default_factory=dict)  # node -> properties

    def of_client(self, client: str) -> list[Route]:
        return [route for route in self.routes if route.source == client]

    def of_node(self, node: int) -> list[Route]:
        """Every route into or out of ``node``: cut them all and it is alone."""
        return [route for route in self.routes
                if route.node == node or route.source == f"{NODE}{node}"]

    def bootstrap(self, client: str) -> str:
        return ",".join(f"{HOST}:{route.listen_port}" for route in self.of_client(client))

    @property
    def clients(self) -> list[str]:
        return list(dict.fromkeys(r.source for r in self.routes if not r.source.startswith(NODE)))


def build_mesh(cluster: KafkaCluster, clients: Sequence[str],
               free_port: Callable[[], int]) -> Mesh:
    """The routes and the per-node broker properties for ``clients`` on ``cluster``."""
    mesh = Mesh()
    nodes = [node.node_id for node in cluster.nodes]

    def route(name: str, source: str, node: int, upstream: int) -> Route:
        made = Route(name, source, node, free_port(), upstream)
        mesh.routes.append(made)
        return made

    listeners: dict[int, list[tuple[str, int, int]]] = {n: [] for n in nodes}  # name, bind, ad
    for index, client in enumerate(clients, start=1):
        for node in nodes:
            bind = free_port()
            proxy = route(f"{client}.n{node}" if len(nodes) > 1 else client, client, node, bind)
            listeners[node].append((f"PROXY{index}", bind, proxy.listen_port))
    if len(nodes) > 1:
        for source in nodes:
            for node in nodes:
                bind = free_port()
                advertised = bind if source == node else route(
                    f"broker.{source}-{node}", f"{NODE}{source}", node, bind).listen_port
                listeners[node].append((f"BROKER{source}", bind, advertised))
    voters = {node: _voters(cluster, node, route) for node in nodes} if len(nodes) > 1 else {}
    for node in nodes:
        layout = cluster.node(node)
        names = [("PLAINTEXT", layout.port, layout.port), *listeners[node]]
        props = {
            "listeners": ",".join([f"{n}://{HOST}:{bind}" for n, bind, _ in names]
                                  + [f"CONTROLLER://{HOST}:{layout.controller_port}"]),
            "advertised.listeners": ",".join(f"{n}://{HOST}:{ad}" for n, _, ad in names),
            "listener.security.protocol.map": ",".join(
                f"{n}:PLAINTEXT" for n in [*(n for n, _, _ in names), "CONTROLLER"]),
        }
        if len(nodes) > 1:
            props["inter.broker.listener.name"] = f"BROKER{node}"
            props["controller.quorum.voters"] = voters[node]
        mesh.overrides[node] = props
    return mesh


def _voters(cluster: KafkaCluster, node: int, route: Callable[[str, str, int, int], Route]
            ) -> str:
    """Node ``node``'s view of the quorum: itself directly, the others through proxies."""
    entries = []
    for voter in cluster.nodes:
        port = voter.controller_port if voter.node_id == node else route(
            f"controller.{node}-{voter.node_id}", f"{NODE}{node}", voter.node_id,
            voter.controller_port).listen_port
        entries.append(f"{voter.node_id}@{HOST}:{port}")
    return ",".join(entries)
