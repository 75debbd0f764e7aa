"""The runtime manager: owner of partitions, their streams and (later) their agents."""

from ares.events.groups import runtime_group
from ares.runtime_manager.owner import PartitionHost, PartitionOwner, StreamsOnly

__all__ = ["PartitionHost", "PartitionOwner", "StreamsOnly", "runtime_group"]
