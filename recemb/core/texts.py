"""The check of a text or a list of texts at every entry point: a clear TypeError before anything is iterated.

Apart from the embedder so that the adapters check their input without loading torch."""

from __future__ import annotations

__all__ = ["check_text", "check_texts"]

_BYTES = (bytes, bytearray, memoryview)


def check_text(text, name: str = "text") -> str:
    """``text`` if it is a str; a ``TypeError`` naming ``name`` otherwise (bytes: with the way to a str)."""
    if isinstance(text, str):
        return text
    decode = f"; decode it first, e.g. {_decode(text, name)}" if isinstance(text, _BYTES) else ""
    raise TypeError(f"{name} is {type(text).__name__}, expected str{decode}")


def _decode(data, name: str) -> str:
    return f"bytes({name}).decode('utf-8')" if isinstance(data, memoryview) else f"{name}.decode('utf-8')"


def check_texts(texts, name: str = "texts", single: bool = True) -> list[str]:
    """``texts`` as a list of str: a sequence of str, or a str alone where ``single``. A ``TypeError`` naming
    ``name`` otherwise, before anything is iterated: bytes would iterate as ints, a str as its characters."""
    if isinstance(texts, str) and single:
        return [texts]
    what = "a str or a sequence of str" if single else "a list of str"
    if isinstance(texts, _BYTES):
        raise TypeError(f"{name} must be {what}, got {type(texts).__name__}; decode it first, e.g. "
                        f"{_decode(texts, name)}")
    if texts is None or isinstance(texts, (str, dict)) or not hasattr(texts, "__iter__"):
        one = f" (one text: pass [{name.removesuffix('s')}])" if isinstance(texts, str) else ""
        raise TypeError(f"{name} must be {what}, got {type(texts).__name__}{one}")
    items = list(texts)
    for i, t in enumerate(items):
        check_text(t, f"{name}[{i}]")
    return items
