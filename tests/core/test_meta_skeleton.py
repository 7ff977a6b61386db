"""Models are built as meta skeletons for a checkpoint's weights: no initialiser runs, and loading a model does not
import torch's compiler stack (torch._dynamo and what it pulls in: tens of MB in a process that never compiles)."""

from __future__ import annotations

import subprocess
import sys

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from recemb.core.files import meta_skeleton


class Seen(TorchFunctionMode):
    """Records the torch functions that reach it."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(f"{getattr(func, '__module__', '')}.{getattr(func, '__name__', '')}")
        return func(*args, **(kwargs or {}))


def test_a_skeleton_has_meta_parameters_and_runs_no_initialiser():
    with Seen() as plain:
        nn.Linear(4, 3)
    assert "torch.nn.init.kaiming_uniform_" in plain.names  # what a Linear runs when it is built
    with Seen() as seen, meta_skeleton():
        model = nn.Sequential(nn.Embedding(11, 4), nn.Linear(4, 3), nn.Conv1d(3, 3, 2))
        made = torch.ones(2)  # tensors made inside are meta as well
    assert not [n for n in seen.names if n.startswith("torch.nn.init.")]
    assert all(p.device.type == "meta" for p in model.parameters()) and made.device.type == "meta"
    model.load_state_dict({k: torch.full(v.shape, 0.5) for k, v in model.state_dict().items()}, assign=True)
    assert all(p.device.type == "cpu" and bool((p == 0.5).all()) for p in model.parameters())
    assert nn.Linear(2, 2).weight.device.type == "cpu"  # outside, modules are built as usual


def test_loading_and_embedding_do_not_import_the_compiler(tiny_folder):
    code = (
        "import sys\n"
        "from recemb.core import Embedder\n"
        f"e = Embedder.from_pretrained({str(tiny_folder)!r}, device='cpu', backend='torch')\n"
        "v = e.encode_documents(['a short text', 'another one'])\n"
        "print(v.shape[0], 'torch._dynamo' in sys.modules, 'sympy' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "False", "False"]
