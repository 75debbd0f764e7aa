"""The Kafka adapters of the event log: the EventStore (``store``), bounded partition scans
(``reader``), the fenced writer of one partition (``partition_writer``), what the broker
knows of transactions (``transactions``), snapshots, dead letters, partition routing, and the
one place that decides which Kafka errors are retried (``errors``, ``retry``)."""
