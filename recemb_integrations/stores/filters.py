"""The filters recemb itself builds, as plain values: the part of Qdrant's filter language the main job uses.

A sync or a search on the embedded store (Qdrant Edge) then never imports qdrant-client, whose package alone holds
about 125 MiB of a process (its pydantic models) and takes over a second to import. The classes carry the field
names of ``qdrant_client.models``, so the two families read alike: each store translates both (``to_client`` for a
server or a local-mode store; the Edge store reads either by the same names). A user's own ``qdrant_client.models``
filter may sit inside one of these (a search's filter joins recemb's own conditions); it is passed through as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FieldCondition", "Filter", "HasIdCondition", "IsEmptyCondition", "MatchAny", "MatchValue",
           "PayloadField", "Range", "family", "to_client"]


@dataclass(frozen=True)
class PayloadField:
    key: str


@dataclass(frozen=True)
class MatchValue:
    value: Any


@dataclass(frozen=True)
class MatchAny:
    any: tuple


@dataclass(frozen=True)
class Range:
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None


@dataclass(frozen=True)
class FieldCondition:
    """``key`` matches ``match`` and/or lies in ``range``."""

    key: str
    match: MatchValue | MatchAny | None = None
    range: Range | None = None


@dataclass(frozen=True)
class IsEmptyCondition:
    """The payload field is absent, null or an empty list."""

    is_empty: PayloadField


@dataclass(frozen=True)
class HasIdCondition:
    has_id: tuple


@dataclass(frozen=True)
class Filter:
    """All of ``must``, at least one of ``should`` (where given) and none of ``must_not``."""

    must: tuple | None = None
    should: tuple | None = None
    must_not: tuple | None = None


_OURS = __name__


def family(node: Any) -> str:
    """"recemb" for these classes, "qdrant_client" for qdrant-client's models; anything else is a TypeError (a
    filter is never guessed from an object that merely has the right attribute names)."""
    module = type(node).__module__
    if module == _OURS:
        return "recemb"
    if module.startswith("qdrant_client"):
        return "qdrant_client"
    raise TypeError(f"a filter must be a qdrant_client.models.Filter or condition, got {type(node).__name__}")


def to_client(node: Any) -> Any:
    """``node`` in ``qdrant_client.models`` (imported here, where a server or local-mode store needs it anyway);
    qdrant-client's own models and None are returned as they are."""
    if node is None or family(node) == "qdrant_client":
        return node
    from qdrant_client import models

    def many(nodes):
        return None if nodes is None else [to_client(n) for n in nodes]

    if isinstance(node, Filter):
        return models.Filter(must=many(node.must), should=many(node.should), must_not=many(node.must_not))
    if isinstance(node, FieldCondition):
        return models.FieldCondition(key=node.key, match=to_client(node.match), range=to_client(node.range))
    if isinstance(node, MatchValue):
        return models.MatchValue(value=node.value)
    if isinstance(node, MatchAny):
        return models.MatchAny(any=list(node.any))
    if isinstance(node, Range):
        return models.Range(gt=node.gt, gte=node.gte, lt=node.lt, lte=node.lte)
    if isinstance(node, IsEmptyCondition):
        return models.IsEmptyCondition(is_empty=models.PayloadField(key=node.is_empty.key))
    if isinstance(node, HasIdCondition):
        return models.HasIdCondition(has_id=list(node.has_id))
    if isinstance(node, PayloadField):
        return models.PayloadField(key=node.key)
    raise TypeError(f"no qdrant-client form for {type(node).__name__}")
