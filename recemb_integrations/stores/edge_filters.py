"""Filters in Qdrant Edge's types: recemb's own (``stores.filters`` values) and a user's ``qdrant_client.models``,
alone or nested, read by the same translation (both families carry qdrant-client's field names, so none of it
imports qdrant-client), and the payload keys a filter tests (which decide whether a filtered dense search needs
ACORN). Pure: the engine's module is passed in."""

from __future__ import annotations

from recemb_integrations.stores.edge_points import encode
from recemb_integrations.stores.filters import family

__all__ = ["filter_keys", "listed", "node_kind", "translate_filter"]


def node_kind(node) -> str:
    """The class name of a filter node of either family (``stores.filters`` or ``qdrant_client.models``): both carry
    the same field names, so one translation reads both without importing qdrant-client."""
    try:
        family(node)
    except TypeError:
        raise ValueError(f"the Qdrant Edge store cannot translate the filter condition {type(node).__name__}") from None
    return type(node).__name__


def listed(conditions) -> list:
    if conditions is None:
        return []
    return list(conditions) if isinstance(conditions, (list, tuple)) else [conditions]


def filter_keys(f) -> set[str]:
    """The payload keys a filter tests (an id condition tests none)."""
    if f is None:
        return set()
    if isinstance(f, (list, tuple)):
        return set().union(*(filter_keys(c) for c in f))
    kind = node_kind(f)
    if kind == "Filter":
        min_should = getattr(f, "min_should", None)
        parts = [*listed(f.must), *listed(f.should), *listed(f.must_not),
                 *(listed(min_should.conditions) if min_should else [])]
        return filter_keys(parts)
    if kind == "FieldCondition":
        return {f.key}
    if kind == "IsEmptyCondition":
        return {f.is_empty.key}
    if kind == "IsNullCondition":
        return {f.is_null.key}
    if kind == "NestedCondition":
        return {f.nested.key}
    return set()


def translate_filter(E, f):
    """A filter (``stores.filters`` or ``qdrant_client.models``, or the two nested) in Qdrant Edge's types."""

    def many(conditions):
        return None if conditions is None else [one(c) for c in listed(conditions)]

    def match(m):
        kind = node_kind(m)
        if kind == "MatchValue":
            return E.MatchValue(encode(m.value))
        if kind == "MatchAny":
            return E.MatchAny([encode(v) for v in m.any])
        if kind == "MatchExcept":
            return E.MatchExcept([encode(v) for v in m.except_])
        if kind == "MatchText":
            return E.MatchText(m.text)
        raise ValueError(f"the Qdrant Edge store cannot translate the match {kind}")

    def one(c):
        kind = node_kind(c)
        if kind == "Filter":
            min_should = getattr(c, "min_should", None)
            return E.Filter(must=many(c.must), should=many(c.should), must_not=many(c.must_not),
                            min_should=(E.MinShould(conditions=many(min_should.conditions),
                                                    min_count=min_should.min_count) if min_should else None))
        if kind == "FieldCondition":
            if c.range is not None and node_kind(c.range) != "Range":
                raise ValueError("the Qdrant Edge store translates numeric ranges only")
            rng = (E.RangeFloat(gte=c.range.gte, gt=c.range.gt, lte=c.range.lte, lt=c.range.lt)
                   if c.range is not None else None)
            if any(getattr(c, name, None) for name in ("geo_bounding_box", "geo_radius", "geo_polygon",
                                                        "values_count")):
                raise ValueError("the Qdrant Edge store does not translate geo or values-count conditions")
            return E.FieldCondition(key=c.key, match=match(c.match) if c.match is not None else None, range=rng,
                                    is_empty=getattr(c, "is_empty", None), is_null=getattr(c, "is_null", None))
        if kind == "IsEmptyCondition":
            return E.IsEmptyCondition(c.is_empty.key)
        if kind == "IsNullCondition":
            return E.IsNullCondition(c.is_null.key)
        if kind == "HasIdCondition":
            return E.HasIdCondition({str(i) for i in c.has_id})
        if kind == "NestedCondition":
            return E.NestedCondition(c.nested.key, one(c.nested.filter))
        raise ValueError(f"the Qdrant Edge store cannot translate the filter condition {kind}")

    return one(f)
