"""LlamaIndex's ``MetadataFilters`` as the main job's filters: a dict of exact matches where that says it all, else
the plain filter values of ``stores.filters`` (so a filtered query on Qdrant Edge never imports qdrant-client).

Pure functions: a query's filters in, a filter out; the store (``llama_index_store``) passes it to the search.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recemb_integrations._imports import require

_types = require("llama_index.core.vector_stores.types", "llama-index")

from recemb_integrations.stores import filters as plain  # noqa: E402

__all__ = ["REF_DOC_KEY", "dict_filter", "metadata_filter", "query_filter", "simple_filter"]

REF_DOC_KEY = "ref_doc_id"  # metadata key: the node's source document, so that delete(ref_doc_id) finds its nodes
Op = _types.FilterOperator


def simple_filter(filters: Any) -> dict[str, Any] | None:
    """``MetadataFilters`` as the main job's dict filter (key -> str/int exact, list any-of), where they are exact
    matches (EQ) and IN joined by AND, each key once ({} for no filter at all); None where they say more."""
    if not isinstance(filters, _types.MetadataFilters):
        raise TypeError(f"filters are LlamaIndex MetadataFilters, got {type(filters).__name__}")
    if filters.condition not in (None, _types.FilterCondition.AND):
        return None
    found: dict[str, Any] = {}
    for f in filters.filters:
        if isinstance(f, _types.MetadataFilters) or f.key in found:
            return None
        if f.operator == Op.EQ and isinstance(f.value, (str, int)) and not isinstance(f.value, bool):
            found[f.key] = f.value
        elif f.operator == Op.IN and isinstance(f.value, list) and f.value and not any(
                isinstance(v, float) for v in f.value):
            found[f.key] = list(f.value)
        else:
            return None
    return found


def dict_filter(filters: Any, what: str) -> dict[str, Any]:
    """``simple_filter`` where ``what`` (a delete, a get) takes nothing else."""
    simple = simple_filter(filters)
    if simple is None:
        raise NotImplementedError(f"{what} takes filters of exact matches (EQ, string or integer values) and IN, "
                                  "joined by AND; query() takes the other operators")
    return simple


def metadata_filter(filters: Any) -> plain.Filter:
    """``MetadataFilters`` as a filter on the points' ``metadata.<key>``: EQ, NE, GT, GTE, LT, LTE, IN, NIN, ANY, ALL,
    CONTAINS and IS_EMPTY, joined by AND, OR or NOT (none of them), nested; TEXT_MATCH needs a full-text index
    recemb does not make (NotImplementedError)."""
    conditions = tuple(metadata_filter(f) if isinstance(f, _types.MetadataFilters) else _condition(f)
                       for f in filters.filters)
    if filters.condition == _types.FilterCondition.OR:
        return plain.Filter(should=conditions)
    if filters.condition == _types.FilterCondition.NOT:
        return plain.Filter(must_not=conditions)
    return plain.Filter(must=conditions)


def query_filter(query: Any) -> dict[str, Any] | plain.Filter | None:
    """A ``VectorStoreQuery``'s filters, doc_ids and node_ids as the main job's dict filter where that says it all,
    else as one ``stores.filters.Filter``. An empty doc_ids or node_ids restricts nothing, as in LlamaIndex's own
    stores (a ``VectorStoreIndex`` over a store that keeps the texts passes its empty node list)."""
    simple = simple_filter(query.filters) if query.filters is not None else None
    if not query.doc_ids and not query.node_ids and (query.filters is None or simple is not None):
        return simple or None
    must = [metadata_filter(query.filters)] if query.filters is not None else []
    if query.doc_ids:  # nodes of these source documents, or those documents themselves
        must.append(plain.Filter(should=(_any_of(f"metadata.{REF_DOC_KEY}", query.doc_ids),
                                         _any_of("document_id", query.doc_ids))))
    if query.node_ids:
        must.append(_any_of("document_id", query.node_ids))
    return plain.Filter(must=tuple(must))


def _condition(f: Any) -> Any:
    key, value, op = f"metadata.{f.key}", f.value, f.operator
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    values = value if isinstance(value, list) else None

    def equal(v: Any) -> Any:
        if isinstance(v, float):  # Qdrant matches keywords, integers and booleans exactly; a float by a range
            return plain.FieldCondition(key=key, range=plain.Range(gte=v, lte=v))
        return plain.FieldCondition(key=key, match=plain.MatchValue(value=v))

    if op in (Op.EQ, Op.NE, Op.CONTAINS) and values is None and value is not None:
        condition = equal(value)
        return plain.Filter(must_not=(condition,)) if op == Op.NE else condition
    if op in (Op.GT, Op.GTE, Op.LT, Op.LTE) and number:
        bound = {Op.GT: "gt", Op.GTE: "gte", Op.LT: "lt", Op.LTE: "lte"}[op]
        return plain.FieldCondition(key=key, range=plain.Range(**{bound: value}))
    if op in (Op.IN, Op.NIN, Op.ANY) and values:
        exact = tuple(v for v in values if not isinstance(v, float))
        either = [plain.FieldCondition(key=key, match=plain.MatchAny(any=exact))] if exact else []
        either += [equal(v) for v in values if isinstance(v, float)]
        condition = either[0] if len(either) == 1 else plain.Filter(should=tuple(either))
        return plain.Filter(must_not=(condition,)) if op == Op.NIN else condition
    if op == Op.ALL and values:
        return plain.Filter(must=tuple(equal(v) for v in values))
    if op == Op.IS_EMPTY:
        return plain.IsEmptyCondition(is_empty=plain.PayloadField(key=key))
    raise NotImplementedError(f"filter {f.key} {op.value} {value!r}: a recemb store filters by ==, !=, >, >=, <, <=, "
                              "in, nin, any, all, contains and is_empty (a number for the comparisons, a non-empty "
                              "list for in, nin, any and all)")


def _any_of(key: str, values: Sequence[str]) -> plain.FieldCondition:
    return plain.FieldCondition(key=key, match=plain.MatchAny(any=tuple(values)))
