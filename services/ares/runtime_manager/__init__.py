"""The runtime manager: owner of partitions, their streams and their agents.

Nothing is imported here: ``ares.runtime_manager.owner`` (the Kafka side) is loaded only by
what runs a runtime manager, never by the pure lifecycle code or the views.
"""
