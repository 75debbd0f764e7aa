"""Commands in, replies out: how external systems ask an owner to act on a stream."""

from ares.commands.model import (
    DEADLINE,
    Command,
    InvalidCommandError,
    Reply,
    ReplyStatus,
    append_command,
    decode_reply,
)

__all__ = [
    "DEADLINE",
    "Command",
    "InvalidCommandError",
    "Reply",
    "ReplyStatus",
    "append_command",
    "decode_reply",
]
