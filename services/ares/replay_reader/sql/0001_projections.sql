-- Read models of the replay reader (derived data only: `ares projections rebuild` recreates
-- every table from Kafka). Applied by the projector at start, in the projections schema
-- (ARES_PROJECTIONS_SCHEMA, default ares_projections), recorded in schema_migrations.

-- Where the projector is on each partition it consumes: written in the same transaction as
-- the rows derived from the records before it, so a crash never applies a record twice.
CREATE TABLE projector_offsets (
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);

-- Every stream of ares.events: its head and where it lives.
CREATE TABLE streams (
    stream_id       text        PRIMARY KEY,
    partition       integer     NOT NULL,
    version         bigint      NOT NULL,
    last_hash       text        NOT NULL,
    first_offset    bigint      NOT NULL,
    last_offset     bigint      NOT NULL,
    events          bigint      NOT NULL,
    first_event_at  timestamptz NOT NULL,
    last_event_at   timestamptz NOT NULL,
    last_event_type text        NOT NULL
);

-- (stream, version) -> (partition, offset): reads seek instead of scanning, `--at T` finds
-- the version as of T. The first record of a (stream, version) wins; a duplicate in the
-- log is the audit's business, not the index's.
CREATE TABLE stream_index (
    stream_id  text        NOT NULL,
    version    bigint      NOT NULL,
    partition  integer     NOT NULL,
    "offset"   bigint      NOT NULL,
    event_type text        NOT NULL,
    module     text        NOT NULL,
    ts         timestamptz NOT NULL,
    hash       text        NOT NULL,
    PRIMARY KEY (stream_id, version)
);
CREATE INDEX stream_index_by_time ON stream_index (stream_id, ts);

-- One row per agent (a stream with an agent.started), folded by the runtime's own
-- lifecycle fold; `lifecycle` is AgentLifecycle.to_json(), what the projector resumes from.
CREATE TABLE agents (
    agent_id          text        PRIMARY KEY,
    kind              text        NOT NULL,
    status            text        NOT NULL,
    incarnation       integer     NOT NULL,
    restarts          integer     NOT NULL,
    deaths            integer     NOT NULL,
    resurrections     integer     NOT NULL,
    worker            text,
    version           bigint      NOT NULL,
    last_event_type   text,
    last_event_at     timestamptz,
    last_death_cause  text,
    quarantine_reason text,
    tasks_assigned    integer     NOT NULL,
    tasks_completed   integer     NOT NULL,
    tasks_failed      integer     NOT NULL,
    tasks_pending     integer     NOT NULL,
    llm_calls         bigint      NOT NULL,
    tokens_prompt     bigint      NOT NULL,
    tokens_completion bigint      NOT NULL,
    tokens_reused     bigint      NOT NULL,
    resumes           integer     NOT NULL,
    lifecycle         jsonb       NOT NULL
);
CREATE INDEX agents_by_status ON agents (status, agent_id);
CREATE INDEX agents_by_kind ON agents (kind, agent_id);

-- The lifecycle events of every agent: what its genealogy is computed from.
CREATE TABLE lifecycle_events (
    agent_id   text        NOT NULL,
    version    bigint      NOT NULL,
    event_id   text        NOT NULL,
    event_type text        NOT NULL,
    ts         timestamptz NOT NULL,
    payload    jsonb       NOT NULL,
    metadata   jsonb       NOT NULL,
    PRIMARY KEY (agent_id, version)
);

-- Incarnations of every agent (ares.runtime_manager.genealogy), oldest first (seq).
CREATE TABLE genealogy (
    agent_id       text             NOT NULL,
    seq            integer          NOT NULL,
    incarnation    integer          NOT NULL,
    parent         integer,
    started_at     timestamptz      NOT NULL,
    ended_at       timestamptz,
    lifetime_s     double precision,
    end_kind       text,
    cause_of_death text,
    stop_reason    text,
    quarantined    text,
    worker         text,
    attempts       integer          NOT NULL,
    backoff_ms     jsonb            NOT NULL,
    first_version  bigint           NOT NULL,
    last_version   bigint           NOT NULL,
    recovery       jsonb,
    PRIMARY KEY (agent_id, seq)
);

-- ares.alerts, as raised.
CREATE TABLE alerts (
    alert_id  text        PRIMARY KEY,
    stream_id text        NOT NULL,
    kind      text        NOT NULL,
    severity  text        NOT NULL,
    message   text        NOT NULL,
    source    text        NOT NULL,
    ts        timestamptz NOT NULL,
    details   jsonb       NOT NULL,
    partition integer     NOT NULL,
    "offset"  bigint      NOT NULL
);
CREATE INDEX alerts_by_stream ON alerts (stream_id, ts);
CREATE INDEX alerts_by_time ON alerts (ts);
