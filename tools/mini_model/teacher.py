"""The teacher's embeddings of training texts, kept per text in the work folder, so that a rebuild (or one that
adds texts) embeds only what it has not embedded before; and a long text's target as the mean of its chunks'."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

__all__ = ["CACHE_FILE", "TeacherCache", "text_key"]

CACHE_FILE = "teacher_embeddings.npz"


def text_key(text: str, teacher: str) -> str:
    """The cache key of ``text`` embedded by the teacher named ``teacher`` (another teacher never hits it)."""
    return hashlib.sha1(f"{teacher}\x00{text}".encode("utf-8")).hexdigest()


class TeacherCache:
    """all-MiniLM-L6-v2's normalised 384-d embedding of every text asked for, stored as ``work/CACHE_FILE``
    (keys = SHA-1 of the teacher's folder name and the text). ``embed`` computes the missing ones in one pass and
    saves every 4,096 texts, so an interrupted pass resumes where it stopped."""

    def __init__(self, work: Path, teacher_dir: Path, batch_size: int = 64):
        self.path = Path(work) / CACHE_FILE
        self.teacher_dir = teacher_dir
        self.batch_size = batch_size
        self._index: dict[str, int] = {}
        self._vectors = np.zeros((0, 384), np.float32)
        if self.path.exists():
            saved = np.load(self.path)
            self._vectors = saved["vectors"]
            self._index = {k: i for i, k in enumerate(saved["keys"].tolist())}
        self._model = None
        self.embedded = 0  # texts embedded by this object (the rest of what it returned came from the file)

    def __len__(self) -> int:
        return len(self._index)

    def _save(self) -> None:
        keys = np.array(sorted(self._index, key=self._index.get))
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=self._vectors)
        tmp.replace(self.path)  # never a half-written cache

    def embed(self, texts: list[str], show_progress: bool = True) -> np.ndarray:
        """(n, 384) teacher embeddings of ``texts`` (unit norm), computing only the missing ones."""
        keys = [text_key(t, Path(self.teacher_dir).name) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._index))
        if missing:
            by_key = dict(zip(keys, texts))
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(str(self.teacher_dir), device="cpu")
            step = 4096
            for start in range(0, len(missing), step):
                part = missing[start:start + step]
                vecs = self._model.encode([by_key[k] for k in part], batch_size=self.batch_size,
                                          convert_to_numpy=True, normalize_embeddings=True,
                                          show_progress_bar=show_progress).astype(np.float32)
                base = len(self._vectors)
                self._vectors = np.concatenate([self._vectors, vecs])
                self._index.update({k: base + i for i, k in enumerate(part)})
                self.embedded += len(part)
                self._save()
        return self._vectors[[self._index[k] for k in keys]]

    def mean_of_chunks(self, chunked: list[list[str]]) -> np.ndarray:
        """(n, 384): per long text, the normalised mean of its chunks' embeddings (the teacher reads 256 tokens,
        so a long text's target is what it says of each part; Mamba2's context-extension calibration,
        ``recemb/core/architectures/mamba2/calibration.py``, uses the same objective)."""
        flat = [c for chunks in chunked for c in chunks]
        vecs = self.embed(flat)
        out, start = np.zeros((len(chunked), vecs.shape[1]), np.float32), 0
        for i, chunks in enumerate(chunked):
            m = vecs[start:start + len(chunks)].mean(0)
            out[i] = m / max(float(np.linalg.norm(m)), 1e-12)
            start += len(chunks)
        return out
