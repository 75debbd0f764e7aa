"""Commands in, replies out: how external systems ask an owner to act on a stream."""

from ares.commands.model import Command, Reply, ReplyStatus, append_command, decode_reply

__all__ = ["Command", "Reply", "ReplyStatus", "append_command", "decode_reply"]
