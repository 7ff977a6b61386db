"""The whole encoder on the Triton kernels (interpreter on CPU) equals the torch backend."""

import os

import pytest
import torch

from recemb.core import Embedder, encode_vertical
from recemb.kernels import resolve_backend, triton_available
from tests.utils import assert_close

pytestmark = pytest.mark.skipif(
    not triton_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs triton and TRITON_INTERPRET=1 (set by tests/conftest.py before triton is imported)",
)


def test_encoder_triton_equals_torch(tiny_embedder):
    model = tiny_embedder.model
    torch.manual_seed(0)
    lengths = torch.tensor([19, 6, 11])
    ids = torch.randint(3, 300, (3, 19))
    ref = encode_vertical(model, ids, lengths, 8, backend="torch")
    for V in (8, 19):
        got = encode_vertical(model, ids, lengths, V, backend="triton")
        assert_close(f"triton V={V}", ref, got, 1e-5)


def test_embedder_backend_switch(tiny_folder):
    texts = ["one text", "and another, longer text"]
    ref = Embedder.from_pretrained(tiny_folder, device="cpu", backend="torch").encode(texts)
    got = Embedder.from_pretrained(tiny_folder, device="cpu", backend="triton").encode(texts, vertical_chunk_size=8)
    assert_close("embedder", torch.from_numpy(ref), torch.from_numpy(got), 1e-5)


def test_auto_is_torch_on_cpu_and_errors_are_clear(monkeypatch):
    assert resolve_backend("auto", torch.device("cpu")) == "torch"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        resolve_backend("triton", torch.device("cpu"))
