"""`ares run replay-reader` with its API over HTTPS (ARES_HTTP_TLS_*) and its probes and
metrics on a listener of their own (ARES_METRICS_PORT), on the real broker and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from ares.config import Settings
from ares.topics import TopicPlan
from tests.integration.replay.conftest import env_of
from tests.support.processes import ares, service


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


async def until_answers(session: aiohttp.ClientSession, url: str, timeout_s: float = 90,
                        **kwargs: object) -> aiohttp.ClientResponse:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            response = await session.get(url, **kwargs)  # type: ignore[arg-type]
            if response.status == 200:
                return response
            response.release()
        except aiohttp.ClientConnectionError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer 200 in {timeout_s} s"
        await asyncio.sleep(0.3)


async def plain_http(session: aiohttp.ClientSession, url: str) -> int | str:
    """The status a plain-HTTP request gets, or "refused" when the connection fails."""
    try:
        async with session.get(url) as response:
            return response.status
    except aiohttp.ClientError:
        return "refused"


async def test_the_api_over_https_and_the_probes_on_their_own_port(
        rp_settings: Settings, plan: TopicPlan, schema: str, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    api_port, metrics_port = free_port(), free_port()
    env = env_of(rp_settings, schema, ARES_HTTP_TLS_CERT_FILE=str(cert),
                 ARES_HTTP_TLS_KEY_FILE=str(key), ARES_METRICS_PORT=str(metrics_port),
                 ARES_LOG_LEVEL="info")
    trusted = ssl.create_default_context(cafile=str(cert))
    with service("replay-reader", env, tmp_path, "--http-port", str(api_port),
                 "--no-projector") as proc:
        async with aiohttp.ClientSession() as session:
            ready = await until_answers(session, f"http://127.0.0.1:{metrics_port}/readyz")
            assert (await ready.json()) == {"status": "ready"}
            metrics = await session.get(f"http://127.0.0.1:{metrics_port}/metrics")
            assert metrics.status == 200
            assert "process_cpu_seconds_total" in await metrics.text()

            agents = await until_answers(session, f"https://127.0.0.1:{api_port}/agents",
                                         ssl=trusted)
            assert isinstance((await agents.json())["items"], list)
            # The probes and the metrics are not on the API's port any more.
            for path in ("/metrics", "/healthz", "/readyz"):
                moved = await session.get(f"https://127.0.0.1:{api_port}{path}", ssl=trusted)
                assert moved.status == 404, path
            # Plain HTTP to the HTTPS port gets no API answer.
            assert await plain_http(session, f"http://127.0.0.1:{api_port}/agents") in (
                "refused", 400)
            # A client that does not trust the certificate is refused by TLS, not served.
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.get(f"https://127.0.0.1:{api_port}/agents")
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_half_a_tls_setting_or_a_shared_port_is_refused_at_start(
        rp_settings: Settings, schema: str, tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    half = ares("run", "replay-reader", "--http-port", "0", env=env_of(
        rp_settings, schema, ARES_HTTP_TLS_CERT_FILE=str(cert)))
    assert half.returncode == 2
    assert "ARES_HTTP_TLS_KEY_FILE is not" in half.stderr

    port = free_port()
    shared = ares("run", "replay-reader", "--http-port", str(port), env=env_of(
        rp_settings, schema, ARES_METRICS_PORT=str(port)))
    assert shared.returncode == 2
    assert "ARES_METRICS_PORT" in shared.stderr
