"""The LLM provider port: one method, one result type, two errors.

Providers translate their transport's failures at the edge: ``LlmUnavailableError``
(retriable: rate limited, overloaded, timed out, connection lost) or ``LlmRequestError``
(not retriable: bad request, bad key, unknown model, unreadable answer). ``ctx.llm`` retries
the first according to its RetryPolicy and records the second as a failed step.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ares.errors import AresError, TransientError


@dataclass(frozen=True, slots=True)
class LlmResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    model: str


@runtime_checkable
class LlmProvider(Protocol):
    """An LLM endpoint. ``model=None`` means the provider's default model."""

    @property
    def default_model(self) -> str: ...

    async def complete(self, prompt: str, model: str | None = None,
                       **params: Any) -> LlmResult: ...


class LlmError(AresError):
    """The provider could not produce a completion."""


class LlmUnavailableError(LlmError, TransientError):
    """Rate limited, overloaded, timed out or unreachable: retrying may succeed."""

    retriable = True

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LlmRequestError(LlmError):
    """The provider refused the request or answered nonsense: retrying will not help."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def prompt_hash(prompt: str) -> str:
    """SHA-256 hex of the prompt text: recorded in ``llm.call``, checked on replay."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


# Words (letters/digits/underscore runs), single punctuation marks, and runs of whitespace
# that contain a newline: the pieces a BPE tokenizer mostly keeps apart.
_PIECES = re.compile(r"\w+|[^\w\s]|\s*\n\s*")


def count_tokens(text: str) -> int:
    """Approximate BPE token count (GPT-style, cl100k-like), ~4 characters per token of
    running English text.

    A BPE vocabulary keeps a common word and its leading space as one token and splits long
    or rare words into pieces of ~6 characters; digits go in groups of 3; punctuation marks
    and line breaks are a token each. For prose this lands within ~10-15% of cl100k_base,
    with no vocabulary file to ship.
    """
    total = 0
    for piece in _PIECES.findall(text):
        if piece[0].isspace() or (len(piece) == 1 and not piece.isalnum()):
            total += 1
        elif piece.isdigit():
            total += math.ceil(len(piece) / 3)
        else:
            total += math.ceil(len(piece) / 6)
    return total
