"""Low-precision CPU inference: which weights take bf16, whether this CPU multiplies bf16 natively, and int8.

Mixed precision on the CPU. Almost all of an encoder's FLOPs are its projections (Mamba2: in_proj, out_proj),
and CPUs with AMX multiply bf16 matrices several times faster than fp32 ones. Everything else is
cheap and carries the numerics: the recurrent state, the decays, the norms and the residual stream. So a CPU model
loaded in bf16 keeps those in fp32 (as mamba_ssm does for its state and residual) and casts only the projection
matrices and the embedding table (``Mamba2Encoder.to_mixed_precision``). Each row's last token in a chunk (every
pooled EOS is one) is computed at full precision: its gate from an fp32 copy of the gate weights and out_proj's
input in two bf16 halves (``Mamba2Mixer.keep_exact_gate``); that keeps the embeddings at a cosine of >= 0.999 to
fp32 where plain bf16 gave 0.96 (docs/benchmarks.md). On a GPU a bf16 model is bf16 throughout, as the reference
runs it.

int8 (``quantize="int8"``): in_proj becomes torch's dynamically quantised linear layer (int8 weights per output
channel, activations quantised per call; its norm's weight folded in first, ``Mamba2Encoder.prepare_int8``);
out_proj stays fp32, or bf16 with a bf16 dtype. The library and the split were chosen by measurement
(docs/benchmarks.md, "Low-precision CPU inference").
"""

from __future__ import annotations

import functools
import platform
import warnings
from pathlib import Path

import torch
import torch.nn as nn

__all__ = ["LOW_PRECISION", "QUANTIZE_MODES", "auto_dtype", "check_quantize", "check_saveable", "cpu_has_native_bf16",
    "is_quantized", "quantize_int8"]

LOW_PRECISION = (torch.bfloat16, torch.float16)
QUANTIZE_MODES = (None, "int8")


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 matrix units that make torch's bf16 matmul faster than fp32: AMX on x86, the
    BF16 extension on Arm (read from the CPU's feature flags, not guessed from its name). AVX-512 BF16 alone does
    not count: on such a CPU (AMX not exposed) torch's bf16 matmul measured 0.55-0.65x fp32 (docs/benchmarks.md)."""
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


def auto_dtype(device: torch.device, supports_mixed: bool = True) -> torch.dtype | None:
    """``dtype="auto"``: on the CPU bf16 where it has native bf16 matmul (and the architecture has a mixed-
    precision path), else fp32; elsewhere None (the checkpoint's dtype)."""
    if device.type != "cpu":
        return None
    return torch.bfloat16 if supports_mixed and cpu_has_native_bf16() else torch.float32


def check_quantize(quantize: str | None) -> str | None:
    """``quantize`` checked: None/"none" (off) or "int8"."""
    if quantize in (None, "none", ""):
        return None
    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"quantize must be one of None, 'int8'; got {quantize!r}")
    return quantize


def quantize_int8(model, device: torch.device):
    """Replace the model's ``int8_projections`` (``nn.Linear`` modules whose qualified names contain one of them)
    by torch's dynamically quantised int8 linear layers (weights per output channel, activations with one scale
    per call), in place, after the model's ``prepare_int8``; CPU and fp32 only (quantised kernels are CPU kernels
    and take fp32 activations)."""
    names = model.int8_projections
    if names is None:
        raise ValueError(f"quantize='int8' is implemented for Mamba2; this model is {model.config.model_type!r}")
    if device.type != "cpu":
        raise ValueError(f"quantize='int8' runs on the CPU only (torch's quantised kernels); device is {device}")
    if next(model.parameters()).dtype != torch.float32:
        raise ValueError("quantize='int8' starts from fp32 weights")
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    # oneDNN is the engine with VNNI/AMX int8 kernels on x86; fbgemm (x86's default) measured slower here.
    if "onednn" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "onednn"
    model.prepare_int8()
    targets = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and any(n in name for n in names)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao's eager API, still the fastest on the CPU
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")
        warnings.filterwarnings("ignore", message=".*quantize_per_channel.*")
        return quantize_dynamic(model, targets, dtype=torch.qint8, inplace=True)


def is_quantized(model: nn.Module) -> bool:
    """Whether ``quantize_int8`` replaced any of ``model``'s layers."""
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules())


def check_saveable(model: nn.Module) -> None:
    """A clear error for saving an int8-quantised model: its checkpoint is the fp32 one it was quantised from."""
    if is_quantized(model):
        raise ValueError("an int8-quantised model is not saved: save the fp32 model it was loaded from, and load "
                         "it with quantize='int8' (recemb's exports record that choice instead)")
