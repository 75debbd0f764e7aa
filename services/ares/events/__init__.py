"""The event log, in three layers.

* this package: the domain of the log — values (``model``), the hash chain (``chain``), the
  pure logic of an append (``writer``), the ports every adapter implements (``ports``) and
  the in-memory adapter for unit tests (``memory``);
* ``ares.events.wire``: the bytes — the Avro schemas, the single-object codec, the
  append path's envelope encoder and compiled readers, canonical JSON, schema evolution;
* ``ares.events.kafka``: the Kafka adapters — the store, readers, the fenced partition
  writer, transactions, snapshots, dead letters, partition routing, retries.

Imports run one way: ``kafka`` uses ``wire`` and the domain; ``wire`` uses only the values of
``model``; no module outside ``kafka`` imports it, so the domain and the codec load no Kafka
client (``tests/unit/test_package_graph.py``).
"""
