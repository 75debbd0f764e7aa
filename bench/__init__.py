"""Benchmarks of ares-mesh, each measured against its raw ceiling in the same run.

Every module is runnable alone (``python bench/<name>.py [--json]``) and importable:
``await bench.<name>.run(settings, **opts)`` returns one report section (see
``bench.harness.section``), the unit a later ``ares bench`` aggregates.
"""
