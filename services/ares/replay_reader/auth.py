"""Who may use the replay reader's HTTP API and its dashboard: tokens, roles, sessions, CSRF.

Credentials are the tokens of ``ARES_API_TOKENS`` (``role:token`` pairs, roles ``viewer``
and ``operator``; ``ARES_API_TOKEN`` is one more operator token, the older form). A request
shows one as ``Authorization: Bearer <token>`` (API clients) or through the session cookie
that ``login`` sets after a browser's sign-in form (the dashboard).

- Writes (every ``POST``) need an operator (``require(request, Role.OPERATOR)``); while no
  operator token is configured they are disabled (403). A session-authenticated write also
  carries its CSRF token (form field ``csrf`` or header ``X-CSRF-Token``): ``check_csrf``.
- Reads are open, or need a viewer's or an operator's token with ``ARES_API_READS=token``
  (``check_read``).

The session cookie is stateless: ``v1.<role>.<expiry>.<session id>.<token fingerprint>``
signed with HMAC-SHA256 under ``ARES_API_SESSION_KEY`` (or a random key of the process:
sessions then end with it). The fingerprint ties a session to the token it was opened
with, so removing a token from ``ARES_API_TOKENS`` ends its sessions. Every comparison of
a secret is constant-time (``hmac.compare_digest``), and every configured token is compared
whatever matched before. Refusals are logged (method, path, peer, why), never a token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NoReturn

from aiohttp import web

from ares.config import Settings

log = logging.getLogger(__name__)

SESSION_COOKIE = "ares_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf"
SESSION_TTL_S = 12 * 3600
_VERSION = "v1"
CHALLENGE = 'Bearer realm="ares"'
INVALID_CHALLENGE = 'Bearer realm="ares", error="invalid_token"'
WRITES_DISABLED = ("writes are disabled: set ARES_API_TOKENS (operator:<token>) or "
                   "ARES_API_TOKEN")


class ApiError(Exception):
    """An answer other than 2xx: the API's middleware turns it into a problem document
    (``ares.replay_reader.http_api.problem``); also importable from ``http_api``."""

    def __init__(self, status: int, detail: str, *, headers: Mapping[str, str] | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"  # may do what a viewer may, and write

    def allows(self, needed: Role) -> bool:
        return self is Role.OPERATOR or needed is Role.VIEWER


@dataclass(frozen=True)
class Principal:
    role: Role
    via: str  # "bearer" | "session"


@dataclass(frozen=True)
class _Session:
    role: Role
    session_id: str


class ApiAuth:
    """The API's credentials and the checks every route makes (see the module's doc)."""

    def __init__(self, credentials: tuple[tuple[str, str], ...], *, reads: str = "open",
                 session_key: str | bytes | None = None,
                 session_ttl_s: int = SESSION_TTL_S) -> None:
        self._tokens = [(token.encode(), Role(role)) for role, token in credentials]
        if session_key is None:
            key = secrets.token_bytes(32)
        else:
            key = session_key.encode() if isinstance(session_key, str) else session_key
        # Separate keys per use: a cookie's signature is never a CSRF token, and back.
        self._cookie_key = hmac.new(key, b"ares-session-cookie", hashlib.sha256).digest()
        self._csrf_key = hmac.new(key, b"ares-csrf", hashlib.sha256).digest()
        self._fingerprint_key = hmac.new(key, b"ares-token-fingerprint",
                                         hashlib.sha256).digest()
        self._fingerprints = {self._fingerprint(token): role for token, role in self._tokens}
        self.reads_open = reads != "token"
        self.session_ttl_s = session_ttl_s

    @classmethod
    def from_settings(cls, settings: Settings) -> ApiAuth:
        return cls(settings.api_credentials(), reads=settings.api_reads,
                   session_key=settings.api_session_key)

    @property
    def writes_enabled(self) -> bool:
        """Whether an operator token is configured (else every write answers 403)."""
        return any(role is Role.OPERATOR for _, role in self._tokens)

    # -- who is asking -------------------------------------------------------------------

    def principal(self, request: web.Request) -> Principal | None:
        """The bearer token's principal, else the session cookie's; None without valid
        credentials (an Authorization header that is present but invalid is not made up
        for by a cookie)."""
        header = request.headers.get("Authorization")
        if header is not None:
            role = self._bearer(header)
            return None if role is None else Principal(role, "bearer")
        session = self._session(request)
        return None if session is None else Principal(session.role, "session")

    def require(self, request: web.Request, role: Role) -> Principal:
        """The principal, if it may act as ``role``; else the 401 or 403 to answer."""
        if role is Role.OPERATOR and not self.writes_enabled:
            self._refuse(request, 403, WRITES_DISABLED)
        header = request.headers.get("Authorization")
        if header is not None:
            scheme, _, credentials = header.strip().partition(" ")
            if scheme.lower() != "bearer" or not credentials.strip():
                self._refuse(request, 401, "a bearer token is needed: "
                                           "Authorization: Bearer <token>", CHALLENGE)
            found = self._bearer(header)
            if found is None:
                self._refuse(request, 401, "the bearer token is not valid", INVALID_CHALLENGE)
            principal = Principal(found, "bearer")
        else:
            session = self._session(request)
            if session is None:
                what = "this write" if role is Role.OPERATOR else "this read"
                self._refuse(request, 401, f"{what} needs a bearer token: "
                                           "Authorization: Bearer <token>", CHALLENGE)
            principal = Principal(session.role, "session")
        if not principal.role.allows(role):
            self._refuse(request, 403, f"this needs the {role.value} role; the credentials "
                                       f"are a {principal.role.value}'s")
        return principal

    def check_read(self, request: web.Request) -> Principal | None:
        """Return if ``request`` may read: always with ARES_API_READS=open (the principal
        when it shows valid credentials), else as ``require(request, Role.VIEWER)``."""
        if self.reads_open:
            return self.principal(request)
        return self.require(request, Role.VIEWER)

    # -- browser sessions ----------------------------------------------------------------

    def login(self, response: web.StreamResponse, token: str) -> Principal | None:
        """A valid ``token``: set the session cookie on ``response`` and return the
        principal (via "session"); else None (and no cookie)."""
        given = token.strip().encode("utf-8", "surrogateescape")
        role = self._match(given)
        if role is None:
            log.warning("refused a sign-in: the token is not valid")
            return None
        expiry = int(time.time()) + self.session_ttl_s
        session_id = secrets.token_urlsafe(18)
        body = ".".join((_VERSION, role.value, str(expiry), session_id,
                         self._fingerprint(given)))
        value = f"{body}.{self._sign(body)}"
        response.set_cookie(SESSION_COOKIE, value, max_age=self.session_ttl_s, path="/",
                            httponly=True, samesite="Strict")
        return Principal(role, "session")

    def logout(self, response: web.StreamResponse) -> None:
        response.del_cookie(SESSION_COOKIE, path="/")

    def csrf_token(self, request: web.Request) -> str:
        """The CSRF token of the request's session ("" without one): an HMAC of the
        session id, so it changes with every sign-in and needs no storage."""
        session = self._session(request)
        return "" if session is None else self._csrf(session.session_id)

    def check_csrf(self, request: web.Request, token: str | None) -> None:
        """Return if the write may go on: bearer-authenticated writes need no CSRF token;
        session-authenticated ones carry their session's (``token``, else the header
        X-CSRF-Token); else 403."""
        principal = self.principal(request)
        if principal is not None and principal.via == "bearer":
            return
        session = self._session(request) if principal is not None else None
        if session is None:
            self._refuse(request, 403, "a CSRF token needs a session: sign in again")
        given = token if token else request.headers.get(CSRF_HEADER)
        if not given:
            self._refuse(request, 403, f"the CSRF token is missing (form field "
                                       f"{CSRF_FIELD!r} or header {CSRF_HEADER})")
        expected = self._csrf(session.session_id).encode()
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected):
            self._refuse(request, 403, "the CSRF token is not this session's")

    # -- internals -----------------------------------------------------------------------

    def _bearer(self, header: str) -> Role | None:
        scheme, _, credentials = header.strip().partition(" ")
        given = credentials.strip()
        if scheme.lower() != "bearer" or not given:
            return None
        # Header values arrive as text decoded with surrogateescape: these are their bytes.
        return self._match(given.encode("utf-8", "surrogateescape"))

    def _match(self, given: bytes) -> Role | None:
        """The role of ``given``: compared with every token, in constant time each, with
        no early exit (the time does not say which token, or how much of it, matched)."""
        found: Role | None = None
        for token, role in self._tokens:
            if hmac.compare_digest(given, token) and found is None:
                found = role
        return found

    def _session(self, request: web.Request) -> _Session | None:
        value = request.cookies.get(SESSION_COOKIE)
        if not value or len(value) > 512:
            return None
        body, _, signature = value.rpartition(".")
        if not body or not hmac.compare_digest(signature.encode("utf-8", "surrogateescape"),
                                               self._sign(body).encode()):
            return None
        parts = body.split(".")
        if len(parts) != 5 or parts[0] != _VERSION:
            return None
        _, role_text, expiry, session_id, fingerprint = parts
        if not expiry.isdigit() or int(expiry) < time.time():
            return None
        # The token it was opened with must still be configured, with the same role.
        if self._fingerprints.get(fingerprint) is None or \
                self._fingerprints[fingerprint].value != role_text:
            return None
        return _Session(Role(role_text), session_id)

    def _sign(self, body: str) -> str:
        digest = hmac.new(self._cookie_key, body.encode("utf-8", "surrogateescape"),
                          hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def _csrf(self, session_id: str) -> str:
        return hmac.new(self._csrf_key, session_id.encode(), hashlib.sha256).hexdigest()

    def _fingerprint(self, token: bytes) -> str:
        return hmac.new(self._fingerprint_key, token, hashlib.sha256).hexdigest()[:32]

    @staticmethod
    def _refuse(request: web.Request, status: int, detail: str,
                challenge: str | None = None) -> NoReturn:
        log.warning("refused %s %r from %s: %d %s", request.method, request.path[:300],
                    request.remote, status, detail)
        raise ApiError(status, detail,
                       headers=None if challenge is None else {"WWW-Authenticate": challenge})
