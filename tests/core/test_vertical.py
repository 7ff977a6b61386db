"""Vertical chunking changes memory, never results: any V, any batch composition, any padding."""

import pytest
import torch

from recemb.core import encode_vertical
from tests.utils import assert_close


@pytest.fixture(scope="module")
def model(tiny_embedder):
    return tiny_embedder.model


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(0)
    lengths = torch.tensor([70, 33, 8, 1, 64])
    ids = torch.randint(3, 300, (5, 70))
    return ids, lengths


def test_vertical_equals_horizontal_for_every_V(model, batch):
    ids, lengths = batch
    q = model.config.chunk_size
    horizontal = encode_vertical(model, ids, lengths, 10_000, backend="torch")
    for V in (1, 7, q, 2 * q, 70):
        got = encode_vertical(model, ids, lengths, V, backend="torch")
        assert_close(f"V={V}", horizontal, got, 1e-5)


def test_pooled_rows_do_not_depend_on_batch_composition(model, batch):
    ids, lengths = batch
    together = encode_vertical(model, ids, lengths, 16, backend="torch")
    for i in range(len(lengths)):
        n = int(lengths[i])
        alone = encode_vertical(model, ids[i : i + 1, :n], lengths[i : i + 1], 16, backend="torch")
        assert_close(f"row {i}", together[i : i + 1], alone, 1e-5)


def test_padding_content_and_width_do_not_matter(model, batch):
    ids, lengths = batch
    base = encode_vertical(model, ids, lengths, 9, backend="torch")
    noisy = ids.clone()
    for i, n in enumerate(lengths.tolist()):
        noisy[i, n:] = torch.randint(3, 300, (70 - n,))
    wider = torch.cat([noisy, torch.randint(3, 300, (5, 25))], dim=1)
    assert_close("other pad values", base, encode_vertical(model, noisy, lengths, 9, backend="torch"), 1e-6)
    assert_close("wider padding", base, encode_vertical(model, wider, lengths, 9, backend="torch"), 1e-6)


def test_chunk_size_changes_only_rounding(model, batch):
    ids, lengths = batch
    base = encode_vertical(model, ids, lengths, 32, backend="torch")
    for q in (1, 3, 8, 64, 256):
        assert_close(f"chunk_size={q}", base, encode_vertical(model, ids, lengths, 32, backend="torch", chunk_size=q),
                     1e-5)


def test_bad_lengths_are_rejected(model):
    ids = torch.randint(3, 300, (2, 5))
    with pytest.raises(ValueError, match="lengths must lie in"):
        encode_vertical(model, ids, torch.tensor([5, 0]), 4)
    with pytest.raises(ValueError, match="lengths must have shape"):
        encode_vertical(model, ids, torch.tensor([5]), 4)
    with pytest.raises(ValueError, match="vertical_chunk_size"):
        encode_vertical(model, ids, torch.tensor([5, 2]), 0)


def test_memory_stays_flat_in_T(model):
    """Activations allocated per chunk do not depend on T: count the largest tensor seen by the mixers."""
    largest = []

    def hook(_module, inputs, _output):
        largest.append(inputs[0].numel())

    handles = [layer.mixer.register_forward_hook(hook) for layer in model.layers]
    try:
        for T in (64, 640):
            largest.clear()
            encode_vertical(model, torch.randint(3, 300, (1, T)), torch.tensor([T]), 16, backend="torch")
            assert max(largest) == 16 * model.dim
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize("caller_flushes", [False, True])
def test_denormals_are_flushed_while_encoding_and_the_callers_mode_restored(model, batch, caller_flushes):
    from recemb.core.vertical import flushing_denormals

    ids, lengths = batch
    torch.set_flush_denormal(caller_flushes)
    try:
        seen = []
        got = encode_vertical(model, ids, lengths, 16, backend="torch", on_tokens=lambda n: seen.append(
            flushing_denormals()))
        assert seen and all(seen)  # flushing inside the chunk loop
        assert flushing_denormals() == caller_flushes  # and the caller's mode afterwards
        torch.set_flush_denormal(True)
        assert_close("same result", encode_vertical(model, ids, lengths, 16, backend="torch"), got, 0.0)
    finally:
        torch.set_flush_denormal(False)


def test_stream_equals_encode_vertical_bit_for_bit(model):
    """Pieces of any size give the chunk boundaries of the whole sequence, so the very same arithmetic."""
    from recemb.core.vertical import VerticalStream

    gen = torch.Generator().manual_seed(3)
    for n, V in ((1, 1), (5, 7), (64, 16), (131, 16), (200, 64), (97, 1000)):
        ids = torch.randint(3, 300, (n,), generator=gen)
        whole = encode_vertical(model, ids[None], torch.tensor([n]), V, backend="torch")[0]
        stream = VerticalStream(model, V, backend="torch")
        start = 0
        while start < n:
            size = int(torch.randint(0, 40, (1,), generator=gen))
            stream.feed(ids[start : start + size].tolist())
            start += size
        assert stream.tokens + stream._n_pending == n
        assert torch.equal(stream.finish(), whole), (n, V)


def test_stream_misuse_is_refused(model):
    from recemb.core.context_extension import ContextExtension
    from recemb.core.vertical import VerticalStream

    with pytest.raises(ValueError, match="no token was fed"):
        VerticalStream(model, 8).finish()
    stream = VerticalStream(model, 8, total_length=10)
    stream.feed(list(range(3, 12)))
    with pytest.raises(ValueError, match="total_length was 10 but 9"):
        stream.finish()
    model.context_extension = ContextExtension(delta_scale=[0.7, 1.6], train_length=8, min_length=1)
    try:
        with pytest.raises(ValueError, match="whole input length"):
            VerticalStream(model, 8)
    finally:
        model.context_extension = None


def test_stream_with_context_extension_equals_encode_vertical(tiny_folder):
    from recemb.core import load_encoder
    from recemb.core.context_extension import ContextExtension
    from recemb.core.vertical import VerticalStream

    model = load_encoder(tiny_folder, device="cpu", dtype=torch.float32)
    heads = model.config.num_heads
    model.context_extension = ContextExtension(
        delta_scale=[0.7, 1.6], global_heads=[[True, False] * (heads // 2)] * 2,
        thresholds={16: [[0.1] * heads] * 2, 64: [[0.3] * heads] * 2}, train_length=8, min_length=12)
    ids = torch.randint(3, 300, (90,), generator=torch.Generator().manual_seed(0))
    whole = encode_vertical(model, ids[None], torch.tensor([90]), 16, backend="torch")[0]
    stream = VerticalStream(model, 16, backend="torch", total_length=90)
    for start in range(0, 90, 25):
        stream.feed(ids[start : start + 25])
    assert torch.equal(stream.finish(), whole)
    model.context_extension = None
    assert not torch.equal(encode_vertical(model, ids[None], torch.tensor([90]), 16, backend="torch")[0], whole)


def _branch_reference(model, ids, lengths, cuts, branch_id):
    """Each branch encoded on its own: the row's first c ids and the branch token, one sequence."""
    out = []
    for row, n in enumerate(lengths.tolist()):
        alone = [torch.cat([ids[row, :c], torch.tensor([branch_id])])[None] for c in cuts if c < n - 1]
        out.append(torch.cat([encode_vertical(model, a, torch.tensor([a.shape[1]]), 10_000, backend="torch")
                              for a in alone]) if alone else None)
    return out


@pytest.mark.parametrize("V", [1, 5, 16, 1000])
def test_branches_equal_each_prefix_encoded_alone_and_leave_the_pass_unchanged(model, batch, V):
    """A passage vector read from the document's own pass (an EOS run from the states after c tokens) is the
    vector of the document's first c tokens and an EOS, encoded alone; the pooled vectors are encode_vertical's;
    and V changes neither."""
    from recemb.core import encode_with_branches

    ids, lengths = batch
    cuts = [3, 8, 20, 32, 33, 50, 69]
    pooled, branches = encode_with_branches(model, ids, lengths, cuts, branch_id=1, vertical_chunk_size=V,
                                            backend="torch")
    assert_close("pooled", encode_vertical(model, ids, lengths, 10_000, backend="torch"), pooled, 1e-5)
    reference = _branch_reference(model, ids, lengths, cuts, 1)
    for row, n in enumerate(lengths.tolist()):
        expected_count = sum(c < n - 1 for c in cuts)
        assert branches[row].shape == (expected_count, model.dim)
        if expected_count:
            assert_close(f"row {row} branches (V={V})", reference[row], branches[row], 1e-5)


def test_branches_refuse_unordered_cuts(model, batch):
    from recemb.core import encode_with_branches

    ids, lengths = batch
    for cuts in ([0, 4], [5, 5], [9, 3]):
        with pytest.raises(ValueError, match="cuts"):
            encode_with_branches(model, ids, lengths, cuts, branch_id=1)


@pytest.mark.parametrize("V,piece", [(1000, 1), (7, 5), (16, 40), (3, 70)])
def test_a_stream_branches_as_the_batch_does(model, batch, V, piece):
    """A streamed document's passage vectors (branches taken as its pieces arrive) equal encode_with_branches'
    and the stream's own vector equals encode_vertical's, whatever V and however the ids arrive."""
    from recemb.core import encode_with_branches
    from recemb.core.vertical import VerticalStream

    ids, lengths = batch
    cuts = [3, 8, 20, 32, 33, 50, 69]
    _, expected = encode_with_branches(model, ids, lengths, cuts, branch_id=1, backend="torch")
    for row, n in enumerate(lengths.tolist()):
        got = []
        stream = VerticalStream(model, V, backend="torch", cuts=iter(cuts), branch_id=1, on_branch=got.append)
        for start in range(0, n, piece):
            stream.feed(ids[row, start : min(start + piece, n)])
        vector = stream.finish()
        assert_close(f"row {row} pooled", encode_vertical(model, ids[row : row + 1, :n], lengths[row : row + 1],
                                                          10_000, backend="torch"), vector[None], 1e-5)
        assert len(got) == expected[row].shape[0]
        if got:
            assert_close(f"row {row} branches", expected[row], torch.stack(got), 1e-5)
