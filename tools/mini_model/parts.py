"""A model folder as the few bounded files a lent GPU machine may hand back, and the folder again from them.

What comes back from a lent device is at most ``MAX_FILES`` files of at most ``MAX_FILE_BYTES`` each and
``MAX_TOTAL_BYTES`` in all, at most ``MAX_DEPTH`` folders below the output folder. ``write_parts`` turns a model
folder (``model.safetensors`` and its small files) into:

- ``weights-NN.safetensors``: the tensors, grouped so that no file passes ``part_bytes``; a tensor larger than that
  (the token embeddings) is cut into row ranges, each its own entry (``<name>@<first row>``);
- ``files.tar.gz``: every other file of the folder (config, tokenizer, model card, the sentence-transformers modules);
- ``manifest.json``: each part's size and SHA-256, each tensor's dtype, shape and pieces, and what the caller adds
  (the run's log and validation curve).

``assemble`` checks every part against the manifest (a truncated or altered part is refused, naming it), joins the
tensors and unpacks the files into a folder that ``recemb.core.Embedder.from_pretrained`` loads. ``check_returned``
says what of a folder breaks the limits. ``python -m tools.mini_model --assemble PARTS --out DIR`` runs
``assemble``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

__all__ = ["FILES_PART", "MANIFEST", "MAX_DEPTH", "MAX_FILES", "MAX_FILE_BYTES", "MAX_TOTAL_BYTES", "MIN_PART_BYTES",
           "PartsError", "WEIGHTS", "assemble", "check_returned", "write_parts"]

MAX_FILES = 8
MAX_FILE_BYTES = 16 << 20
MAX_TOTAL_BYTES = 64 << 20
MAX_DEPTH = 2
MANIFEST = "manifest.json"
FILES_PART = "files.tar.gz"
WEIGHTS = "model.safetensors"
FORMAT = 1
# Room left in a weights part for its safetensors header (names, dtypes, shapes, offsets as JSON): this much, or a
# quarter of a small part.
HEADER_ROOM = 64 << 10
MIN_PART_BYTES = 4096


class PartsError(ValueError):
    """A model that does not fit the limits, or parts that do not match their manifest."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pieces(name: str, tensor: Any, budget: int) -> list[tuple[str, Any, tuple[int, int] | None]]:
    """(key, tensor, rows) pieces of one tensor, each at most ``budget`` bytes (rows None: the whole tensor)."""
    size = tensor.numel() * tensor.element_size()
    if size <= budget:
        return [(name, tensor, None)]
    if tensor.dim() == 0 or tensor.shape[0] < 2:
        raise PartsError(f"tensor {name!r} ({size:,} bytes) is larger than a part and has no rows to cut")
    row_bytes = size // tensor.shape[0]
    rows = max(1, budget // row_bytes)
    return [(f"{name}@{a}", tensor[a:a + rows].contiguous(), (a, min(a + rows, tensor.shape[0])))
            for a in range(0, tensor.shape[0], rows)]


def write_parts(model_dir: str | os.PathLike, out: str | os.PathLike, extra: dict[str, Any] | None = None,
                part_bytes: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """Write ``model_dir`` as parts into ``out`` (created; parts already there are refused, not overwritten) and
    return the manifest.
    ``extra``: what the manifest also carries (JSON). A model that needs more than ``MAX_FILES`` files (the
    manifest and the files' archive included) or more than ``MAX_TOTAL_BYTES`` is a ``PartsError``, before any
    part is written."""
    from safetensors.torch import load_file, save_file

    model_dir, out = Path(model_dir), Path(out)
    if not (model_dir / WEIGHTS).is_file():
        raise PartsError(f"{model_dir} has no {WEIGHTS}")
    if not MIN_PART_BYTES <= part_bytes <= MAX_FILE_BYTES:
        raise PartsError(f"part_bytes must be from {MIN_PART_BYTES:,} to {MAX_FILE_BYTES:,}, got {part_bytes:,}")
    room = min(HEADER_ROOM, part_bytes // 4)
    budget = part_bytes - room
    tensors = load_file(str(model_dir / WEIGHTS))
    groups: list[list[tuple[str, Any, tuple[int, int] | None]]] = [[]]
    used = 0
    for name in sorted(tensors):
        for key, piece, rows in _pieces(name, tensors[name], budget):
            size = piece.numel() * piece.element_size()
            if used + size > budget and groups[-1]:
                groups.append([])
                used = 0
            groups[-1].append((key, piece, rows))
            used += size
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for path in sorted(p for p in model_dir.rglob("*") if p.is_file() and p.name != WEIGHTS):
            tar.add(path, arcname=path.relative_to(model_dir).as_posix(), recursive=False)
    files_bytes = archive.getvalue()
    if len(groups) + 2 > MAX_FILES:
        raise PartsError(f"the weights need {len(groups)} parts of {part_bytes:,} bytes; with the manifest and "
                         f"{FILES_PART} that is more than {MAX_FILES} files")
    if len(files_bytes) > part_bytes:
        raise PartsError(f"the model's other files take {len(files_bytes):,} bytes packed, more than a part")
    total = sum(p.numel() * p.element_size() for g in groups for _, p, _ in g) + len(files_bytes)
    if total > MAX_TOTAL_BYTES - room * (len(groups) + 1):
        raise PartsError(f"the parts would take about {total:,} bytes, more than {MAX_TOTAL_BYTES:,}")
    if out.is_dir() and (held := sorted(p.name for p in out.iterdir() if p.name in (MANIFEST, FILES_PART)
                                        or p.name.startswith("weights-"))):
        raise PartsError(f"{out} holds parts already ({held[0]}); nothing was written: give a folder without them")
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"format": FORMAT, "parts": {}, "tensors": {}, "files": FILES_PART,
                                **(extra or {})}
    for number, group in enumerate(groups):
        part = f"weights-{number:02d}.safetensors"
        save_file({key: piece for key, piece, _ in group}, str(out / part))
        for key, piece, rows in group:
            name = key.split("@")[0] if rows is not None else key
            entry = manifest["tensors"].setdefault(name, {"dtype": str(tensors[name].dtype).removeprefix("torch."),
                                                          "shape": list(tensors[name].shape), "pieces": []})
            entry["pieces"].append({"part": part, "key": key, "rows": list(rows) if rows else None})
    (out / FILES_PART).write_bytes(files_bytes)
    for part in [f"weights-{n:02d}.safetensors" for n in range(len(groups))] + [FILES_PART]:
        manifest["parts"][part] = {"bytes": (out / part).stat().st_size, "sha256": _sha256(out / part)}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    if problems := check_returned(out):
        raise PartsError("; ".join(problems))
    return manifest


def check_returned(out: str | os.PathLike) -> list[str]:
    """What in ``out`` breaks the limits of what a lent device hands back (an empty list: nothing)."""
    out = Path(out)
    files = [p for p in out.rglob("*") if p.is_file()]
    problems = []
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} files, more than {MAX_FILES}")
    problems += [f"{p.relative_to(out)}: {p.stat().st_size:,} bytes, more than {MAX_FILE_BYTES:,}"
                 for p in files if p.stat().st_size > MAX_FILE_BYTES]
    if (total := sum(p.stat().st_size for p in files)) > MAX_TOTAL_BYTES:
        problems.append(f"{total:,} bytes in all, more than {MAX_TOTAL_BYTES:,}")
    problems += [f"{p.relative_to(out)}: more than {MAX_DEPTH} folders deep" for p in files
                 if len(p.relative_to(out).parts) - 1 > MAX_DEPTH]
    return problems


def assemble(parts_dir: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """The model folder the parts in ``parts_dir`` were written from, made in ``dest`` (created; it must be new or
    an empty folder). Every part is checked against the manifest first: a missing, truncated or altered one is a
    ``PartsError`` and nothing is written."""
    import torch
    from safetensors.torch import load_file, save_file

    parts_dir, dest = Path(parts_dir), Path(dest)
    try:
        manifest = json.loads((parts_dir / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PartsError(f"{parts_dir} has no {MANIFEST}: not the parts of a model") from None
    if manifest.get("format") != FORMAT:
        raise PartsError(f"{MANIFEST} is of format {manifest.get('format')!r}; this recemb reads {FORMAT}")
    for part, facts in manifest["parts"].items():
        path = parts_dir / part
        if not path.is_file():
            raise PartsError(f"part {part} is missing")
        if path.stat().st_size != facts["bytes"] or _sha256(path) != facts["sha256"]:
            raise PartsError(f"part {part} is not the one the manifest names (size or checksum differs): it was "
                             "cut short or changed on the way back")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise PartsError(f"{dest} exists and is not an empty folder; nothing was written: the model is assembled "
                         "only into a new or empty folder, so no file of yours is overwritten")
    loaded = {part: load_file(str(parts_dir / part)) for part in manifest["parts"] if part.endswith(".safetensors")}
    tensors = {}
    for name, entry in manifest["tensors"].items():
        pieces = [loaded[p["part"]][p["key"]] for p in entry["pieces"]]
        tensor = pieces[0] if len(pieces) == 1 and entry["pieces"][0]["rows"] is None else torch.cat(pieces)
        if list(tensor.shape) != entry["shape"] or str(tensor.dtype).removeprefix("torch.") != entry["dtype"]:
            raise PartsError(f"tensor {name!r} came back as {tuple(tensor.shape)} {tensor.dtype}, not "
                             f"{tuple(entry['shape'])} {entry['dtype']}")
        tensors[name] = tensor
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(parts_dir / manifest["files"], mode="r:gz") as tar:
        tar.extractall(dest, filter="data")  # no absolute paths, links out or devices
    save_file(tensors, str(dest / WEIGHTS))
    return dest
