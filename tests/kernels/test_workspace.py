"""Workspace: named scratch buffers handed out again on later calls, grown on demand."""

import torch

from recemb.kernels.workspace import Workspace, scratch


def test_a_name_hands_out_the_same_memory_and_grows_when_needed():
    ws = Workspace()
    a = ws.empty("a", (4, 8), torch.float32, torch.device("cpu"))
    again = ws.empty("a", (2, 3), torch.float32, torch.device("cpu"))  # smaller: a prefix of the same buffer
    assert again.data_ptr() == a.data_ptr() and again.shape == (2, 3) and again.is_contiguous()
    other = ws.empty("b", (4, 8), torch.float32, torch.device("cpu"))
    assert other.data_ptr() != a.data_ptr()  # names never share memory
    wider = ws.empty("a", (64, 64), torch.float32, torch.device("cpu"))
    assert wider.shape == (64, 64)
    assert ws.empty("a", (4, 8), torch.float32, torch.device("cpu")).data_ptr() == wider.data_ptr()
    as_double = ws.empty("a", (4, 8), torch.float64, torch.device("cpu"))  # dtype is part of the key
    assert as_double.dtype == torch.float64 and as_double.data_ptr() != wider.data_ptr()
    assert ws.nbytes == 64 * 64 * 4 + 4 * 8 * 4 + 4 * 8 * 8


def test_scratch_without_a_workspace_is_a_fresh_tensor():
    like = torch.zeros(3, dtype=torch.float64)
    t1, t2 = scratch(None, "x", (2, 5), like), scratch(None, "x", (2, 5), like)
    assert t1.shape == (2, 5) and t1.dtype == torch.float64 and t1.data_ptr() != t2.data_ptr()
    ws = Workspace()
    assert scratch(ws, "x", (2, 5), like).data_ptr() == scratch(ws, "x", (10,), like, torch.float64).data_ptr()
