"""Low-precision CPU inference: which weights take bf16, which take int8, and what ``dtype="auto"`` picks.

Mixed precision on the CPU. Almost all of an encoder's FLOPs are its projections (Mamba2: in_proj, out_proj),
and CPUs with AMX multiply bf16 matrices several times faster than fp32 ones. Everything else is
cheap and carries the numerics: the recurrent state, the decays, the norms and the residual stream. So a CPU model
loaded in bf16 keeps those in fp32 (as mamba_ssm does for its state and residual) and casts only the projection
matrices and the embedding table (``Mamba2Encoder.to_mixed_precision``). Each row's last token in a chunk (every
pooled EOS is one) is computed at full precision: its gate from an fp32 copy of the gate weights and out_proj's
input in two bf16 halves (``Mamba2Mixer.keep_exact_gate``); that keeps the embeddings at a cosine of >= 0.999 to
fp32 where plain bf16 gave 0.96 (docs/benchmarks.md). On a GPU a bf16 model is bf16 throughout, as the reference
runs it.

int8 (``quantize="int8"``): in_proj becomes recemb's ``Int8Linear`` (``recemb/core/int8.py``: int8 weights per output
channel, activations quantised per token, an exact integer product, outlier input columns in fp32), its norm's
weight folded in first (``Mamba2Encoder.prepare_int8``); each row's last token takes its gate, Δ and x, B, C from
fp32 activations. The float products of an int8 mixer run in fixed-size calls (``row_stable_linear``), so a text's
vector does not depend on the batch it is embedded in. out_proj stays fp32, or bf16 with a bf16 dtype: int8
weights there, even alone, lose far too much. The split was chosen by measurement (docs/benchmarks.md,
"Low-precision CPU inference").

``dtype="auto"`` on the CPU is measured, not guessed from the CPU's flags: ``recemb/core/autodtype.py``.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

import torch
import torch.nn as nn

from recemb.core.autodtype import ProjectionShape, auto_choice
from recemb.core.int8 import Int8Linear

__all__ = ["DEFAULT_SHAPES", "LOW_PRECISION", "QUANTIZE_MODES", "auto_dtype", "check_quantize", "check_saveable",
           "cpu_has_native_bf16", "is_quantized", "projection_shapes", "quantize_int8"]

LOW_PRECISION = (torch.bfloat16, torch.float16)
QUANTIZE_MODES = (None, "int8")
# The shapes "auto" probes when it is not given a model's: a 130M-class Mamba2 layer (in_proj, out_proj).
DEFAULT_SHAPES: tuple[ProjectionShape, ...] = ((768, 3352, True), (1536, 768, False))


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU reports bf16 matrix units: AMX on x86, the BF16 extension on Arm (from its feature flags).
    Informational: ``dtype="auto"`` measures instead (``recemb/core/autodtype.py``), as flags alone misled (AVX-512 BF16
    without AMX made torch's bf16 matmul 0.55-0.65x fp32, docs/benchmarks.md)."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "x86"):
        return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    if machine in ("aarch64", "arm64"):
        try:
            flags = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
        return any(line.startswith("Features") and " bf16" in f" {line.split(':', 1)[-1]}"
                   for line in flags.splitlines())
    return False


def auto_dtype(device: torch.device, supports_mixed: bool = True,
               shapes: tuple[ProjectionShape, ...] = DEFAULT_SHAPES) -> torch.dtype | None:
    """``dtype="auto"``: on the CPU the dtype that multiplies these projection shapes fastest here, measured once
    per machine and cached (bf16 only where the architecture has a mixed-precision path; ``recemb/core/autodtype.py``);
    elsewhere None (the checkpoint's dtype)."""
    if device.type != "cpu":
        return None
    return auto_choice(shapes, supports_mixed=supports_mixed).dtype


def projection_shapes(model: nn.Module) -> tuple[ProjectionShape, ...]:
    """The distinct (in, out, int8) shapes of ``model``'s linear layers, largest first (at most 4): what "auto"
    probes. int8: the layer is one of the model's ``int8_projections``."""
    names = getattr(model, "int8_projections", None) or ()
    shapes: dict[tuple[int, int], bool] = {}
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, Int8Linear)):
            shape = (module.in_features, module.out_features)
            shapes[shape] = shapes.get(shape, False) or any(n in name for n in names)
    ordered = sorted(shapes.items(), key=lambda item: -item[0][0] * item[0][1])[:4]
    return tuple((k, n, q) for (k, n), q in ordered) or DEFAULT_SHAPES


def check_quantize(quantize: str | None) -> str | None:
    """``quantize`` checked: None/"none" (off) or "int8"."""
    if quantize in (None, "none", ""):
        return None
    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"quantize must be one of None, 'int8'; got {quantize!r}")
    return quantize


def quantize_int8(model, device: torch.device):
    """Replace the model's ``int8_projections`` (``nn.Linear`` modules whose qualified names contain one of them)
    by ``Int8Linear`` layers (int8 weights per output channel, int8 activations per token: a text's vector does not
    depend on its batch), in place, after the model's ``prepare_int8``; CPU and fp32 weights only."""
    names = model.int8_projections
    if names is None:
        raise ValueError(f"quantize='int8' is implemented for Mamba2; this model is {model.config.model_type!r}")
    if device.type != "cpu":
        raise ValueError(f"quantize='int8' runs on the CPU only (integer matmul kernels); device is {device}")
    if next(model.parameters()).dtype != torch.float32:
        raise ValueError("quantize='int8' starts from fp32 weights")
    model.prepare_int8()
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and any(n in name for n in names)]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, Int8Linear.from_linear(module))
    return model


def is_quantized(model: nn.Module) -> bool:
    """Whether ``quantize_int8`` replaced any of ``model``'s layers."""
    return any(isinstance(m, Int8Linear) for m in model.modules())


def check_saveable(model: nn.Module) -> None:
    """A clear error for saving an int8-quantised model: its checkpoint is the fp32 one it was quantised from."""
    if is_quantized(model):
        raise ValueError("an int8-quantised model is not saved: save the fp32 model it was loaded from, and load "
                         "it with quantize='int8' (recemb's exports record that choice instead)")
