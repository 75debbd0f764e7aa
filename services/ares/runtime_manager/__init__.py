"""The runtime manager: owner of partitions, their streams and (later) their agents."""

from ares.runtime_manager.owner import CommandHandler, PartitionOwner

__all__ = ["CommandHandler", "PartitionOwner"]
