"""`ares audit verify --state` on the real broker: each recovery record's state hash is
recomputed from the log; an honest record passes (exit 0), a record whose hash the log
contradicts fails like a broken chain (exit 5), and one the audit cannot rebuild (a kind
it has no registry for) is reported unknown, not passed."""

from __future__ import annotations

import json
import uuid

from ares.config import Settings
from ares.events.model import NewEvent
from ares.events.wire.codec import decode_event
from ares.lifecycle.recovery import RecoveryRecord
from ares.runtime_manager.replay import state_hash_at
from ares.topics import EVENTS
from tests.integration.replay.conftest import PARTITIONS, write_streams
from tests.support.agents import REGISTRY
from tests.support.kafka import applied_topics, drain_records
from tests.support.processes import ares, ares_env
from tests.support.workers import TEST_AGENTS


def history() -> list[NewEvent]:
    """An agent started with one open task (new event ids each call)."""
    return [NewEvent("agent.started", "tests", {"kind": "test.waiter", "config_json": "{}",
                                                "incarnation": 1, "worker": "w1"}),
            NewEvent("task.assigned", "tests", {"task_id": "t1",
                                                "input_json": '{"signal": "go"}'})]


def resurrected(state_hash: str, version: int) -> NewEvent:
    record = RecoveryRecord("x", None, None, version, 0.001, 0.002, 0.001,
                            verified=True, resulting_version=version, state_hash=state_hash,
                            checks=("chain", "versions", "head"))
    return NewEvent("agent.resurrected", "tests",
                    record.to_payload(incarnation=2, parent_incarnation=1, worker="w2"),
                    record.to_metadata())


async def test_recovery_records_are_rechecked_against_the_log(rp_settings: Settings) -> None:
    settings = rp_settings.with_overrides(topic_prefix=f"state-{uuid.uuid4().hex[:8]}.")
    async with applied_topics(settings, partitions=PARTITIONS) as plan:
        await write_streams(settings, plan, {"honest": history(), "forged": history()})
        await write_streams(settings, plan, {"forged": [resurrected("0" * 64, 2)]})
        env = ares_env(settings, PARTITIONS)

        def verify(*args: str) -> tuple[int, dict[str, object]]:
            done = ares("audit", "verify", "--json", "--no-index", "--state", *args, env=env,
                        timeout=120)
            assert done.stdout, done.stderr
            return done.returncode, json.loads(done.stdout)

        # The honest record: the hash a runtime manager rebuilding "honest" at version 2
        # computes (its open task's journal starts at a real log offset).
        records = await drain_records(settings.kafka_bootstrap, plan.name(EVENTS),
                                      partitions=PARTITIONS)
        logged = sorted((r.offset, e) for r in records
                        if (e := decode_event(r.value)).stream_id == "honest")
        digest, why = state_hash_at("honest", logged, 2, REGISTRY)
        assert digest is not None, why
        await write_streams(settings, plan, {"honest": [resurrected(digest, 2)]})

        code, report = verify("--agents", TEST_AGENTS, "honest")
        assert code == 0, report
        state = report["state"]
        assert isinstance(state, dict)
        assert [r["status"] for r in state["records"]] == ["ok"]

        code, report = verify("--agents", TEST_AGENTS, "forged")
        assert code == 5, report
        state = report["state"]
        assert isinstance(state, dict)
        assert [r["status"] for r in state["records"]] == ["mismatch"]

        # Without the registry of test.waiter the audit cannot rebuild it: unknown, not ok.
        code, report = verify("honest")
        state = report["state"]
        assert isinstance(state, dict)
        assert [r["status"] for r in state["records"]] == ["unknown"]
