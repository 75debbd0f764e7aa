"""The runtime manager: owner of partitions, their streams and (later) their agents."""

from ares.runtime_manager.owner import PartitionHost, PartitionOwner, StreamsOnly, runtime_group

__all__ = ["PartitionHost", "PartitionOwner", "StreamsOnly", "runtime_group"]
