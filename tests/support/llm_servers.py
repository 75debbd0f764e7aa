"""Local HTTP servers that speak the OpenAI chat-completions and Anthropic Messages wire
protocols well enough for the official SDKs, so tests drive the real SDKs over real HTTP
with no network and no mocks.

By default they answer like a model: the request's conversation, translated back to the
neutral format of ``ares.llm.chat``, goes through ``ares.llm.offline.offline_turn`` (tool
calls first, then a final text), so an agent runs a real tool loop against them. Tests
script failures (``fail_next``, ``malformed_next``), slow answers (``delay_s``,
``delay_next``) and slow streams (``stream_pause``), and count requests (``requests``).

In a test's event loop::

    async with OpenAIProtocolServer() as server:
        provider = OpenAIProvider(LlmSettings(server.base_url, "key", "m"))

As a process beside runtime-manager subprocesses (requests logged as JSON lines, so a
test counts them across a SIGKILL of a worker)::

    python -m tests.support.llm_servers --protocol openai --port 0 --requests-log PATH
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

from aiohttp import web

from ares.llm.chat import (
    STOP_MAX_TOKENS,
    STOP_TOOL_CALLS,
    ChatResponse,
    ToolSpec,
    conversation_hash,
)
from ares.llm.offline import offline_turn, stream_pieces

NOT_JSON = "<html>502 bad gateway, or so</html>"


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the server saw it. ``conversation_hash`` is
    ``conversation_hash(neutral messages, tools, {})`` (``None`` for an unreadable body)."""

    path: str
    streamed: bool
    conversation_hash: str | None
    status: int
    model: str | None = None
    at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class _Scripted:
    """One scripted answer: an error status, a malformed 200, or a normal but late one."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    malformed: bool = False


class ProtocolServer:
    """What both protocols share: the script, the records, the HTTP plumbing."""

    path = ""
    protocol = ""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, delay_s: float = 0.0,
                 stream_pause: float = 0.0, requests_log: str | Path | None = None) -> None:
        self.host = host
        self.port = port
        self.delay_s = delay_s
        self.stream_pause = stream_pause
        self.requests: list[RequestRecord] = []
        self._script: deque[_Scripted] = deque()
        self._log = Path(requests_log) if requests_log is not None else None
        self._runner: web.AppRunner | None = None

    # -- scripting ------------------------------------------------------------------------

    def fail_next(self, status: int, body: Any = None, headers: Mapping[str, str] | None = None,
                  times: int = 1, delay_s: float = 0.0) -> None:
        """The next ``times`` requests get ``status`` (body: the protocol's error JSON
        unless given; a str is sent as is)."""
        for _ in range(times):
            self._script.append(_Scripted(status, body, dict(headers or {}), delay_s))

    def malformed_next(self, body: Any = NOT_JSON, times: int = 1) -> None:
        """The next ``times`` requests get a 200 whose body is ``body`` (a str as is: by
        default not JSON at all; a dict as JSON: e.g. ``{"choices": []}``)."""
        for _ in range(times):
            self._script.append(_Scripted(200, body, {}, 0.0, malformed=True))

    def delay_next(self, delay_s: float, times: int = 1) -> None:
        """The next ``times`` requests are answered normally, ``delay_s`` late."""
        for _ in range(times):
            self._script.append(_Scripted(delay_s=delay_s))

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(self.path, self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- requests -------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        scripted = self._script.popleft() if self._script else _Scripted()
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            self._record(request.path, False, None, 400, None)
            return self._error(400, f"the request body is not a JSON object: {e}")
        streamed = bool(body.get("stream"))
        try:
            messages, tools = self.conversation(body)
            digest: str | None = conversation_hash(messages, tools, {})
        except (KeyError, TypeError, ValueError) as e:
            self._record(request.path, streamed, None, 400, body.get("model"))
            return self._error(400, f"unreadable conversation: {e}")
        delay = scripted.delay_s or self.delay_s
        if delay:
            await asyncio.sleep(delay)
        model = str(body.get("model") or "")
        self._record(request.path, streamed, digest, scripted.status, model)
        if scripted.malformed:
            text = scripted.body if isinstance(scripted.body, str) else json.dumps(scripted.body)
            return web.Response(status=200, text=text, content_type="application/json")
        if scripted.status >= 400:
            if isinstance(scripted.body, str):
                return web.Response(status=scripted.status, text=scripted.body,
                                    headers=scripted.headers, content_type="application/json")
            payload = scripted.body if scripted.body is not None else self.error_body(
                scripted.status, f"scripted failure {scripted.status}")
            return web.json_response(payload, status=scripted.status,
                                     headers=scripted.headers)
        turn = offline_turn(messages, tools, model, self.max_tokens(body))
        if not streamed:
            return web.json_response(self.completion(turn))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            for index, event in enumerate(self.events(turn, body)):
                if index and self.stream_pause:
                    await asyncio.sleep(self.stream_pause)
                await response.write(event.encode())
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client went away mid-stream (a killed worker)
        return response

    def _record(self, path: str, streamed: bool, digest: str | None, status: int,
                model: Any) -> None:
        record = RequestRecord(path, streamed, digest, status,
                               None if model is None else str(model), time.time())
        self.requests.append(record)
        if self._log is not None:
            with self._log.open("a", encoding="utf-8") as out:
                out.write(json.dumps(record.to_json()) + "\n")

    def _error(self, status: int, message: str) -> web.Response:
        return web.json_response(self.error_body(status, message), status=status)

    # -- the protocol ---------------------------------------------------------------------

    def conversation(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]],
                                                             list[ToolSpec]]:
        raise NotImplementedError

    def max_tokens(self, body: Mapping[str, Any]) -> int | None:
        value = body.get("max_tokens")
        return int(value) if isinstance(value, int) else None

    def completion(self, turn: ChatResponse) -> dict[str, Any]:
        raise NotImplementedError

    def events(self, turn: ChatResponse, body: Mapping[str, Any]) -> list[str]:
        raise NotImplementedError

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError


def _text(content: Any) -> str:
    """A message's text: a str, or the text parts/blocks of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content
                       if isinstance(part, Mapping) and part.get("type") == "text")
    raise TypeError(f"content is a {type(content).__name__}")


def _named(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results carry their tool's name in the neutral format; neither wire format
    repeats it, so take it from the call they answer."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[call["id"]] = call["name"]
        if message["role"] == "tool" and "name" not in message:
            message["name"] = names.get(message["tool_call_id"], "")
    return messages


class OpenAIProtocolServer(ProtocolServer):
    """``POST /v1/chat/completions``: JSON, or SSE chunks and ``[DONE]`` when streamed."""

    path = "/v1/chat/completions"
    protocol = "openai"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def conversation(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]],
                                                             list[ToolSpec]]:
        messages: list[dict[str, Any]] = []
        for message in body["messages"]:
            role = message["role"]
            if role == "tool":
                messages.append({"role": "tool", "tool_call_id": message["tool_call_id"],
                                 "content": _text(message.get("content"))})
            elif role == "assistant":
                neutral: dict[str, Any] = {"role": "assistant",
                                           "content": _text(message.get("content"))}
                calls = [{"id": c["id"], "name": c["function"]["name"],
                          "arguments": json.loads(c["function"]["arguments"] or "{}")}
                         for c in message.get("tool_calls") or ()]
                if calls:
                    neutral["tool_calls"] = calls
                messages.append(neutral)
            else:
                messages.append({"role": "system" if role == "developer" else role,
                                 "content": _text(message.get("content"))})
        tools = [ToolSpec(t["function"]["name"], t["function"].get("description") or "",
                          t["function"].get("parameters") or {"type": "object",
                                                              "properties": {}})
                 for t in body.get("tools") or ()]
        return _named(messages), tools

    def max_tokens(self, body: Mapping[str, Any]) -> int | None:
        value = body.get("max_completion_tokens", body.get("max_tokens"))
        return int(value) if isinstance(value, int) else None

    def completion(self, turn: ChatResponse) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))}}
                for c in turn.tool_calls]
        return {"id": f"chatcmpl-{_id(turn)}", "object": "chat.completion",
                "created": int(time.time()), "model": turn.model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": _finish(turn)}],
                "usage": _usage(turn)}

    def events(self, turn: ChatResponse, body: Mapping[str, Any]) -> list[str]:
        base = {"id": f"chatcmpl-{_id(turn)}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": turn.model}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            data = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": finish}]}
            return f"data: {json.dumps(data)}\n\n"

        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": piece}) for piece in stream_pieces(turn.text)]
        for index, call in enumerate(turn.tool_calls):
            arguments = json.dumps(dict(call.arguments))
            half = len(arguments) // 2
            events.append(chunk({"tool_calls": [
                {"index": index, "id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": arguments[:half]}}]}))
            events.append(chunk({"tool_calls": [
                {"index": index, "function": {"arguments": arguments[half:]}}]}))
        events.append(chunk({}, _finish(turn)))
        options = body.get("stream_options") or {}
        if isinstance(options, Mapping) and options.get("include_usage"):
            events.append(f"data: {json.dumps({**base, 'choices': [], 'usage': _usage(turn)})}"
                          "\n\n")
        events.append("data: [DONE]\n\n")
        return events

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "rate_limit_exceeded" if status == 429 else (
            "server_error" if status >= 500 else "invalid_request_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class AnthropicProtocolServer(ProtocolServer):
    """``POST /v1/messages``: JSON, or the SSE events message_start, content_block_start /
    delta / stop, message_delta, message_stop when streamed."""

    path = "/v1/messages"
    protocol = "anthropic"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def conversation(self, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]],
                                                             list[ToolSpec]]:
        messages: list[dict[str, Any]] = []
        system = body.get("system")
        if system:
            messages.append({"role": "system", "content": _text(system)})
        for message in body["messages"]:
            role, content = message["role"], message.get("content")
            if isinstance(content, str):
                messages.append({"role": role, "content": content})
                continue
            if role == "assistant":
                neutral: dict[str, Any] = {"role": "assistant", "content": _text(content)}
                calls = [{"id": b["id"], "name": b["name"], "arguments": b.get("input") or {}}
                         for b in content if b.get("type") == "tool_use"]
                if calls:
                    neutral["tool_calls"] = calls
                messages.append(neutral)
                continue
            texts: list[str] = []
            for block in content:
                if block.get("type") == "tool_result":
                    messages.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                                     "content": _text(block.get("content"))})
                elif block.get("type") == "text":
                    texts.append(str(block.get("text") or ""))
            if texts:
                messages.append({"role": "user", "content": "".join(texts)})
        tools = [ToolSpec(t["name"], t.get("description") or "",
                          t.get("input_schema") or {"type": "object", "properties": {}})
                 for t in body.get("tools") or ()]
        return _named(messages), tools

    def completion(self, turn: ChatResponse) -> dict[str, Any]:
        return {"id": f"msg_{_id(turn)}", "type": "message", "role": "assistant",
                "model": turn.model, "content": self._blocks(turn),
                "stop_reason": _stop_reason(turn), "stop_sequence": None,
                "usage": {"input_tokens": turn.prompt_tokens,
                          "output_tokens": turn.completion_tokens}}

    @staticmethod
    def _blocks(turn: ChatResponse) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                   for c in turn.tool_calls]
        return blocks

    def events(self, turn: ChatResponse, body: Mapping[str, Any]) -> list[str]:
        def event(name: str, data: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"

        start: dict[str, Any] = {
            "id": f"msg_{_id(turn)}", "type": "message", "role": "assistant",
            "model": turn.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": turn.prompt_tokens, "output_tokens": 1}}
        events = [event("message_start", {"message": start})]
        index = 0
        if turn.text:
            events.append(event("content_block_start", {
                "index": index, "content_block": {"type": "text", "text": ""}}))
            events += [event("content_block_delta", {
                "index": index, "delta": {"type": "text_delta", "text": piece}})
                for piece in stream_pieces(turn.text)]
            events.append(event("content_block_stop", {"index": index}))
            index += 1
        for call in turn.tool_calls:
            arguments = json.dumps(dict(call.arguments))
            half = len(arguments) // 2
            events.append(event("content_block_start", {"index": index, "content_block": {
                "type": "tool_use", "id": call.id, "name": call.name, "input": {}}}))
            events += [event("content_block_delta", {
                "index": index, "delta": {"type": "input_json_delta", "partial_json": part}})
                for part in (arguments[:half], arguments[half:])]
            events.append(event("content_block_stop", {"index": index}))
            index += 1
        events.append(event("message_delta", {
            "delta": {"stop_reason": _stop_reason(turn), "stop_sequence": None},
            "usage": {"output_tokens": turn.completion_tokens}}))
        events.append(event("message_stop", {}))
        return events

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {429: "rate_limit_error", 529: "overloaded_error", 401: "authentication_error",
                404: "not_found_error"}.get(status)
        kind = kind or ("api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}


def _id(turn: ChatResponse) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(turn.to_json()).encode()).hexdigest()[:24]


def _usage(turn: ChatResponse) -> dict[str, int]:
    return {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens}


def _finish(turn: ChatResponse) -> str:
    if turn.stop_reason == STOP_TOOL_CALLS:
        return "tool_calls"
    return "length" if turn.stop_reason == STOP_MAX_TOKENS else "stop"


def _stop_reason(turn: ChatResponse) -> str:
    if turn.stop_reason == STOP_TOOL_CALLS:
        return "tool_use"
    return "max_tokens" if turn.stop_reason == STOP_MAX_TOKENS else "end_turn"


SERVERS: dict[str, type[ProtocolServer]] = {"openai": OpenAIProtocolServer,
                                            "anthropic": AnthropicProtocolServer}


async def serve(protocol: str, host: str, port: int, requests_log: str | None,
                stream_pause: float) -> None:
    """Run until SIGTERM/SIGINT; the base URL goes to stdout as the first line."""
    server = SERVERS[protocol](host=host, port=port, requests_log=requests_log,
                               stream_pause=stream_pause)
    await server.start()
    print(server.base_url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--protocol", choices=sorted(SERVERS), required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--requests-log", default=None,
                        help="append each request as a JSON line to this file")
    parser.add_argument("--stream-pause", type=float, default=0.0,
                        help="seconds between the SSE events of a streamed answer")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.protocol, args.host, args.port, args.requests_log,
                      args.stream_pause))
    return 0


if __name__ == "__main__":
    sys.exit(main())
