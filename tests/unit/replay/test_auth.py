"""``ares.replay_reader.auth``: ARES_API_TOKENS parsing, roles, bearer tokens, the signed
session cookie, CSRF, and the constant-time path; never a token in a message or a log."""

from __future__ import annotations

import hmac
import logging
import time
from http.cookies import SimpleCookie
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from ares.config import Settings
from ares.errors import ConfigError
from ares.replay_reader import auth as auth_module
from ares.replay_reader.auth import (
    CSRF_HEADER,
    SESSION_COOKIE,
    WRITES_DISABLED,
    ApiAuth,
    ApiError,
    Principal,
    Role,
)

VIEWER = "v" * 20 + "-viewer-token"
OPERATOR = "o" * 20 + "-operator-token"
OLD = "legacy-operator-token-0123456789"


def settings(**env: str) -> Settings:
    return Settings.from_env(env)


def request(method: str = "POST", path: str = "/agents/a/kill", *,
            bearer: str | None = None, cookie: str | None = None,
            headers: dict[str, str] | None = None) -> web.Request:
    sent = CIMultiDict(headers or {})
    if bearer is not None:
        sent["Authorization"] = f"Bearer {bearer}"
    if cookie is not None:
        sent["Cookie"] = f"{SESSION_COOKIE}={cookie}"
    return make_mocked_request(method, path, headers=sent)


def signed_in(auth: ApiAuth, token: str) -> str:
    """The session cookie's value that ``login`` sets for ``token``."""
    response = web.Response()
    principal = auth.login(response, token)
    assert principal is not None
    morsel = response.cookies[SESSION_COOKIE]
    return morsel.value


@pytest.fixture
def auth() -> ApiAuth:
    return ApiAuth.from_settings(settings(ARES_API_TOKENS=f"viewer:{VIEWER},operator:{OPERATOR}"))


# -- configuration ---------------------------------------------------------------------------


def test_tokens_parse_into_roles_and_the_older_token_is_an_operator() -> None:
    got = settings(ARES_API_TOKENS=f" viewer:{VIEWER} , OPERATOR:{OPERATOR},",
                   ARES_API_TOKEN=OLD).api_credentials()
    assert got == (("viewer", VIEWER), ("operator", OPERATOR), ("operator", OLD))
    assert settings(ARES_API_TOKEN=OLD).api_credentials() == (("operator", OLD),)
    assert settings().api_credentials() == ()


def test_tokens_from_a_file_one_pair_a_line(tmp_path: Any) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"viewer:{VIEWER}\noperator:{OPERATOR}\n")
    got = settings(ARES_API_TOKENS_FILE=str(path)).api_credentials()
    assert got == (("viewer", VIEWER), ("operator", OPERATOR))


@pytest.mark.parametrize(("raw", "message"), [
    (f"viewer:{VIEWER},admin:{OPERATOR}", "pair 2: the role 'admin' is not one of viewer, "
                                          "operator"),
    (f"viewer:{VIEWER},{OPERATOR}", "pair 2 is not role:token"),
    ("operator:short", "pair 1 (operator): the token must be 16-4096"),
    (f"operator:{OPERATOR[:8]} {OPERATOR[8:]}", "pair 1 (operator): the token must be"),
    (",,", "holds no role:token pair"),
    (f"viewer:{OPERATOR},operator:{OPERATOR}", "one token is given twice"),
])
def test_a_bad_pair_is_named_and_its_token_never_shown(raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(ARES_API_TOKENS=raw)
    assert "ARES_API_TOKENS" in str(caught.value)
    assert message in str(caught.value)
    for secret in (VIEWER, OPERATOR, OPERATOR[:8], OPERATOR[8:]):
        assert secret not in str(caught.value)


def test_a_role_that_looks_like_a_secret_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        settings(ARES_API_TOKENS="s3cr3t-part-0123456789:rest-of-it-0123456789")
    assert "s3cr3t" not in str(caught.value)
    assert "(not shown)" in str(caught.value)


def test_reads_setting_and_session_key_are_checked() -> None:
    assert settings().api_reads == "open"
    with pytest.raises(ConfigError, match="ARES_API_READS must be one of open, token"):
        settings(ARES_API_READS="closed")
    with pytest.raises(ConfigError, match="ARES_API_READS=token needs ARES_API_TOKENS"):
        settings(ARES_API_READS="token")
    with pytest.raises(ConfigError, match="ARES_API_SESSION_KEY must be"):
        settings(ARES_API_SESSION_KEY="short")
    assert settings(ARES_API_READS="token", ARES_API_TOKEN=OLD).api_reads == "token"


def test_no_token_in_the_settings_repr() -> None:
    text = repr(settings(ARES_API_TOKENS=f"viewer:{VIEWER}", ARES_API_TOKEN=OLD,
                         ARES_API_SESSION_KEY=OPERATOR))
    assert VIEWER not in text
    assert OLD not in text
    assert OPERATOR not in text


# -- bearer tokens and roles -----------------------------------------------------------------


def test_bearer_tokens_give_their_role(auth: ApiAuth) -> None:
    assert auth.principal(request(bearer=VIEWER)) == Principal(Role.VIEWER, "bearer")
    assert auth.principal(request(bearer=OPERATOR)) == Principal(Role.OPERATOR, "bearer")
    assert auth.principal(request(bearer=OPERATOR + "x")) is None
    assert auth.principal(request()) is None
    assert auth.require(request(bearer=OPERATOR), Role.OPERATOR).role is Role.OPERATOR
    # An operator may do what a viewer may.
    assert auth.require(request(bearer=OPERATOR), Role.VIEWER).role is Role.OPERATOR
    assert auth.require(request(bearer=VIEWER), Role.VIEWER).role is Role.VIEWER
    assert auth.writes_enabled


def test_refusals_are_401_or_403_and_logged_without_the_token(
        auth: ApiAuth, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    cases: list[tuple[web.Request, int, str | None]] = [
        (request(), 401, 'Bearer realm="ares"'),
        (request(headers={"Authorization": f"Basic {OPERATOR}"}), 401, 'Bearer realm="ares"'),
        (request(headers={"Authorization": "Bearer"}), 401, 'Bearer realm="ares"'),
        (request(bearer=OPERATOR[:-1]), 401, 'Bearer realm="ares", error="invalid_token"'),
        (request(bearer=VIEWER), 403, None),
    ]
    for sent, status, challenge in cases:
        with pytest.raises(ApiError) as caught:
            auth.require(sent, Role.OPERATOR)
        assert caught.value.status == status
        assert caught.value.headers.get("WWW-Authenticate") == challenge
        assert OPERATOR not in caught.value.detail
        assert VIEWER not in caught.value.detail
    assert "this needs the operator role; the credentials are a viewer's" in caplog.text
    assert "refused POST '/agents/a/kill'" in caplog.text
    assert OPERATOR[:-1] not in caplog.text
    assert VIEWER not in caplog.text


def test_writes_are_disabled_without_an_operator_token() -> None:
    only_viewers = ApiAuth.from_settings(settings(ARES_API_TOKENS=f"viewer:{VIEWER}"))
    assert not only_viewers.writes_enabled
    for sent in (request(), request(bearer=VIEWER)):
        with pytest.raises(ApiError) as caught:
            only_viewers.require(sent, Role.OPERATOR)
        assert (caught.value.status, caught.value.detail) == (403, WRITES_DISABLED)
    assert not ApiAuth.from_settings(settings()).writes_enabled


def test_reads_open_or_by_token() -> None:
    open_auth = ApiAuth.from_settings(settings(ARES_API_TOKENS=f"viewer:{VIEWER}"))
    assert open_auth.check_read(request("GET", "/agents")) is None
    assert open_auth.check_read(request("GET", "/agents", bearer=VIEWER)) == Principal(
        Role.VIEWER, "bearer")
    closed = ApiAuth.from_settings(settings(ARES_API_TOKENS=f"viewer:{VIEWER}",
                                            ARES_API_READS="token"))
    assert closed.check_read(request("GET", "/agents", bearer=VIEWER)).role is Role.VIEWER
    with pytest.raises(ApiError) as caught:
        closed.check_read(request("GET", "/agents"))
    assert caught.value.status == 401
    assert caught.value.detail.startswith("this read needs a bearer token")


def test_every_token_is_compared_in_constant_time_without_an_early_exit(
        auth: ApiAuth, monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth_module.hmac, "compare_digest", spy)
    assert auth.principal(request(bearer=VIEWER)) == Principal(Role.VIEWER, "bearer")
    # The first token matched; the second was compared all the same.
    assert [b for _, b in compared] == [VIEWER.encode(), OPERATOR.encode()]
    compared.clear()
    assert auth.principal(request(bearer="nobody-0123456789abcdef")) is None
    assert len(compared) == 2


# -- sessions --------------------------------------------------------------------------------


def test_login_sets_a_signed_http_only_strict_cookie(auth: ApiAuth) -> None:
    response = web.Response()
    assert auth.login(response, OPERATOR) == Principal(Role.OPERATOR, "session")
    morsel = response.cookies[SESSION_COOKIE]
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "Strict"
    assert morsel["path"] == "/"
    assert OPERATOR not in morsel.value
    assert auth.principal(request(cookie=morsel.value)) == Principal(Role.OPERATOR, "session")
    # A wrong token: no cookie.
    refused = web.Response()
    assert auth.login(refused, OPERATOR + "x") is None
    assert SESSION_COOKIE not in refused.cookies


def test_a_tampered_forged_expired_or_foreign_cookie_is_no_session(auth: ApiAuth) -> None:
    value = signed_in(auth, VIEWER)
    body, _, signature = value.rpartition(".")
    promoted = body.replace(".viewer.", ".operator.")
    for bad in (promoted + "." + signature, body + ".AAAA", body, value + "x", "", "v1"):
        assert auth.principal(request(cookie=bad)) is None, bad
    # Another process (another random key) does not take it.
    other = ApiAuth.from_settings(settings(ARES_API_TOKENS=f"viewer:{VIEWER}"))
    assert other.principal(request(cookie=value)) is None
    expired = ApiAuth((("viewer", VIEWER),), session_ttl_s=-10)
    assert expired.principal(request(cookie=signed_in(expired, VIEWER))) is None


def test_a_shared_session_key_survives_a_restart_but_not_a_removed_token() -> None:
    env = {"ARES_API_TOKENS": f"viewer:{VIEWER},operator:{OPERATOR}",
           "ARES_API_SESSION_KEY": "k" * 32}
    first = ApiAuth.from_settings(settings(**env))
    value = signed_in(first, OPERATOR)
    again = ApiAuth.from_settings(settings(**env))
    assert again.principal(request(cookie=value)) == Principal(Role.OPERATOR, "session")
    removed = ApiAuth.from_settings(settings(ARES_API_TOKENS=f"viewer:{VIEWER}",
                                             ARES_API_SESSION_KEY="k" * 32))
    assert removed.principal(request(cookie=value)) is None


def test_a_bearer_header_is_not_made_up_for_by_a_cookie(auth: ApiAuth) -> None:
    value = signed_in(auth, OPERATOR)
    with pytest.raises(ApiError) as caught:
        auth.require(request(bearer="wrong-token-0123456789", cookie=value), Role.OPERATOR)
    assert caught.value.status == 401


def test_logout_deletes_the_cookie(auth: ApiAuth) -> None:
    response = web.Response()
    auth.logout(response)
    cookie = SimpleCookie(response.cookies.output(header="").strip())
    assert cookie[SESSION_COOKIE]["max-age"] == "0"


# -- CSRF ------------------------------------------------------------------------------------


def test_csrf_is_bound_to_the_session(auth: ApiAuth) -> None:
    value = signed_in(auth, OPERATOR)
    token = auth.csrf_token(request(cookie=value))
    assert token
    assert token == auth.csrf_token(request(cookie=value))
    other = signed_in(auth, OPERATOR)  # another sign-in: another session, another token
    assert auth.csrf_token(request(cookie=other)) != token
    assert auth.csrf_token(request()) == ""
    auth.check_csrf(request(cookie=value), token)  # the form field
    auth.check_csrf(request(cookie=value, headers={CSRF_HEADER: token}), None)  # the header
    for wrong in (None, "", token[:-1], auth.csrf_token(request(cookie=other))):
        with pytest.raises(ApiError) as caught:
            auth.check_csrf(request(cookie=value), wrong)
        assert caught.value.status == 403


def test_bearer_writes_need_no_csrf_and_no_credentials_get_none(auth: ApiAuth) -> None:
    auth.check_csrf(request(bearer=OPERATOR), None)
    with pytest.raises(ApiError) as caught:
        auth.check_csrf(request(), "anything")
    assert caught.value.status == 403


def test_session_expiry_is_in_the_signed_part(auth: ApiAuth) -> None:
    value = signed_in(auth, VIEWER)
    expiry = int(value.split(".")[2])
    assert time.time() < expiry <= time.time() + auth.session_ttl_s + 1
