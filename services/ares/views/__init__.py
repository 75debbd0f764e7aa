"""Read models: what the CLI (and later the replay reader) shows, derived from events.

Pure functions and values over a stream's events: no I/O, nothing stored. PostgreSQL
projections will hold the same shapes once they exist; until then the CLI folds them from a
read-only scan of ``ares.events``.

``tally.AgentTally`` is the one read model of an agent (its lifecycle fold and counters):
the replay reader's projection stores it, ``agents.AgentView`` is built on it, and
``team.team_tree`` builds a team's tree (who delegated to whom) from it, for ``ares agents
tree`` and the replay reader alike.
"""
