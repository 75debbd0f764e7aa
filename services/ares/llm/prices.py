"""What a model's tokens cost: the price table of usage records (``ares.usage``).

Prices are USD per million tokens, prompt and completion apart, looked up by model name:
an exact name first, then the longest configured prefix (``gpt-4o-mini`` matches
``gpt-4o-mini-2024-07-18``), then ``"*"``; a model the table does not know costs 0 and is
logged once. ``ARES_LLM_PRICES_FILE`` (YAML or JSON) replaces the built-in table::

    gpt-4o-mini: {prompt: 0.15, completion: 0.60}
    claude-3-5-haiku: {prompt: 0.80, completion: 4.00}
    "*": {prompt: 1.0, completion: 2.0}
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ares.errors import ConfigError

log = logging.getLogger(__name__)

PRICES_FILE_ENV = "ARES_LLM_PRICES_FILE"


@dataclass(frozen=True, slots=True)
class Price:
    prompt: float  # USD per million prompt tokens
    completion: float  # USD per million completion tokens

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6


# List prices of a few common models (USD per million tokens), as published by their
# providers; a deployment that pays other prices sets ARES_LLM_PRICES_FILE.
BUILT_IN: Mapping[str, Price] = {
    "offline": Price(0.0, 0.0),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1": Price(2.00, 8.00),
    "claude-3-5-haiku": Price(0.80, 4.00),
    "claude-haiku-4-5": Price(1.00, 5.00),
    "claude-sonnet-4": Price(3.00, 15.00),
    "claude-opus-4": Price(15.00, 75.00),
}


@dataclass(slots=True)
class PriceTable:
    prices: Mapping[str, Price] = field(default_factory=lambda: dict(BUILT_IN))
    _unknown: set[str] = field(default_factory=set)

    def price(self, model: str) -> Price | None:
        exact = self.prices.get(model)
        if exact is not None:
            return exact
        prefixes = [name for name in self.prices if name != "*" and model.startswith(name)]
        if prefixes:
            return self.prices[max(prefixes, key=len)]
        return self.prices.get("*")

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        price = self.price(model)
        if price is None:
            if model not in self._unknown:
                self._unknown.add(model)
                log.warning("no price for model %r in the price table (%s): its usage is "
                            "recorded at cost 0", model, PRICES_FILE_ENV)
            return 0.0
        return price.cost(prompt_tokens, completion_tokens)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PriceTable:
        env = os.environ if env is None else env
        path = env.get(PRICES_FILE_ENV, "").strip()
        return cls.from_file(Path(path)) if path else cls()

    @classmethod
    def from_file(cls, path: Path) -> PriceTable:
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{PRICES_FILE_ENV}={path}: cannot read the price table: "
                              f"{e}") from None
        return cls(parse_prices(document, str(path)))


def parse_prices(document: Any, where: str) -> dict[str, Price]:
    if not isinstance(document, Mapping):
        raise ConfigError(f"{where}: the price table is a mapping model -> "
                          "{prompt, completion} (USD per million tokens)")
    prices: dict[str, Price] = {}
    for model, entry in document.items():
        if not isinstance(entry, Mapping) or set(entry) != {"prompt", "completion"}:
            raise ConfigError(f"{where}: {model!r} must be {{prompt: USD, completion: USD}} "
                              "per million tokens")
        try:
            price = Price(float(entry["prompt"]), float(entry["completion"]))
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: {model!r}: prices must be numbers") from None
        if price.prompt < 0 or price.completion < 0:
            raise ConfigError(f"{where}: {model!r}: prices must not be negative")
        prices[str(model)] = price
    return prices
