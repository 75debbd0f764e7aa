"""Read models: what the CLI (and later the replay reader) shows, derived from events.

Pure functions and values over a stream's events: no I/O, nothing stored. PostgreSQL
projections will hold the same shapes once they exist; until then the CLI folds them from a
read-only scan of ``ares.events``.
"""
