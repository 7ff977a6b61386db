"""The errors and notices of the main job: each names what went wrong and that nothing was lost."""

from __future__ import annotations

from typing import Any

__all__ = ["CollectionMismatchError", "InvalidSetting", "MassDeletionError", "NotOwnedError", "NothingReadableError",
           "RebuildError", "SearchNotice", "SettingsConflict", "VectorError"]


class CollectionMismatchError(ValueError):
    """The collection was built with another model, dimension or distance (or not by recemb)."""


class SettingsConflict(CollectionMismatchError):
    """A requested setting contradicts what the collection recorded (``key``: the setting's keyword name)."""

    def __init__(self, message: str, key: str, recorded: Any, requested: Any):
        super().__init__(message)
        self.key, self.recorded, self.requested = key, recorded, requested


class InvalidSetting(ValueError):
    """A setting no collection can have: ``key`` (its keyword name) with ``value``; ``passage_tokens``: the passage
    length it was judged against (an overlap must be shorter), None where passages are off (an overlap or a
    threshold then has nothing to apply to)."""

    def __init__(self, message: str, key: str, value: Any, passage_tokens: int | None = None):
        super().__init__(message)
        self.key, self.value, self.passage_tokens = key, value, passage_tokens


class MassDeletionError(ValueError):
    """A sync would delete half or more of the documents it manages (``deleting``: those ids, of ``managed``; the
    ``given`` documents were among its sources), or a rebuild of a damaged collection could not count them
    (``damaged``); nothing was written. The message names the Python arguments; the command words it in its flags
    from these fields."""

    def __init__(self, message: str, collection: str, deleting: tuple[str, ...] = (), managed: int = 0,
                 given: int = 0, damaged: bool = False):
        super().__init__(message)
        self.collection, self.deleting, self.managed, self.given, self.damaged = (collection, tuple(deleting),
                                                                                  managed, given, damaged)


class NotOwnedError(ValueError):
    """Documents named for deletion belong to another owner of the collection (a folder's sync, where a framework's
    store deletes: ``document_ids``, with ``owners`` the root of each); nothing was deleted."""

    def __init__(self, message: str, document_ids: list[str], owners: list[str | None]):
        super().__init__(message)
        self.document_ids, self.owners = document_ids, owners


class VectorError(ValueError):
    """A vector handed in (a query's, or a document's own) cannot be the collection's model's: the wrong dimension,
    not finite, all zeros, or not of unit length where the model's vectors are; nothing was searched or written."""


class NothingReadableError(ValueError):
    """Every document given failed to read; a sync that deletes missing documents stops before its first write."""


class RebuildError(ValueError):
    """A rebuild cannot replace the collection (some documents failed, or it would drop documents it has no source
    for); the old collection is untouched. ``report``: what the staging sync did, where it ran."""

    def __init__(self, message: str, report: Any = None):
        super().__init__(message)
        self.report = report


class SearchNotice(UserWarning):
    """Something a searcher should know about a result (a dense-only collection, a query without BM25 terms)."""
