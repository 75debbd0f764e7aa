"""The protocol servers as a standalone process (as integration tests run them beside
runtime-manager subprocesses): the URL on stdout, each request a JSON line in the log."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from ares.llm import OpenAIProvider, offline_turn
from ares.llm.anthropic_provider import AnthropicProvider
from ares.llm.chat import conversation_hash, user
from ares.llm.openai_provider import LlmSettings
from ares.tasks import wait_for

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_standalone_server_logs_each_request(tmp_path: Path, protocol: str) -> None:
    log = tmp_path / "requests.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.llm_servers", "--protocol", protocol,
        "--port", "0", "--requests-log", str(log), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        base_url = (await wait_for(process.stdout.readline(), 30)).decode().strip()
        assert base_url.startswith("http://127.0.0.1:")
        cls = OpenAIProvider if protocol == "openai" else AnthropicProvider
        provider = cls(LlmSettings(base_url, "key", "m"))
        try:
            first = await provider.chat([user("one")])
            await provider.chat([user("two")], on_delta=_ignore)
        finally:
            await provider.close()
        assert first.text == offline_turn([user("one")], [], "m").text
    finally:
        process.send_signal(signal.SIGTERM)
        assert await wait_for(process.wait(), 30) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["streamed"], r["status"], r["model"]) for r in records] == [
        (False, 200, "m"), (True, 200, "m")]
    assert records[0]["conversation_hash"] == conversation_hash([user("one")], [], {})
    assert records[0]["path"] == ("/v1/chat/completions" if protocol == "openai"
                                  else "/v1/messages")


async def _ignore(_: str) -> None:
    return None
