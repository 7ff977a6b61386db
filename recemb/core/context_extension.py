"""Training-free context extension: one Δ hook for MambaExtend's Δ scaling and LongMamba's token filtering.

Per mixer, with dt_eff = softplus(dt_raw + dt_bias) of shape (b, l, h):

1. MambaExtend (Azizi et al., ICLR 2025): dt_eff ← s_l · dt_eff, one scale per layer, floored at 0.01.
2. LongMamba (Ye et al., ICLR 2025): in the layer's *global* heads (cumulative decay over a training-length
   window stays above θ), tokens with dt_eff ≤ threshold_h(L) get Δ = 0: no decay and no input, so the token is
   skipped in that head's state, while D·x and the C·h readout still happen.
3. The time-step limit, then the scan with ``dt_bias=None, dt_softplus=False``.

Both methods act only on inputs of at least ``min_length`` tokens, keyed by the **whole** input length L (so
the result does not depend on the vertical chunk size V): shorter inputs, within the training length the model
knows, are embedded by the plain model whatever the mode. When no row of a batch qualifies, the mixer takes
its usual path (bit-for-bit the same outputs). Calibration: ``recemb.core.architectures.mamba2.calibration``.

The artifacts live in the model folder as ``context_extension.json``, load with the model and are shared by
every ``Embedder`` on it; which methods run is each caller's own ``mode``, handed down at call time.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from recemb.core.options import CONTEXT_EXTENSION_MODES

__all__ = ["ARTIFACT_FILE", "ContextExtension", "DeltaControl", "MODES", "SCALE_FLOOR", "apply_delta_control",
    "resolve_mode"]

ARTIFACT_FILE = "context_extension.json"
SCALE_FLOOR = 0.01  # MambaExtend's only clamp on the calibrated scales
MODES = CONTEXT_EXTENSION_MODES  # what a caller may ask for (named once, with the options)


@dataclass
class DeltaControl:
    """What the Δ hook does in one layer for one batch.

    scale: s_l (None: no scaling): a float for every row, a (b,) tensor per row (1 for rows too short to be
        scaled), or a 0-d tensor that lets calibration take gradients through it;
    threshold: (b, h) per-row thresholds for this layer (None: no filtering);
    global_heads: (h,) bool, the heads filtering applies to.
    """

    scale: float | torch.Tensor | None = None
    threshold: torch.Tensor | None = None
    global_heads: torch.Tensor | None = None

    def keep_rows(self, n: int) -> "DeltaControl":
        per_row = isinstance(self.scale, torch.Tensor) and self.scale.dim() == 1
        return DeltaControl(self.scale[:n] if per_row else self.scale,
                            None if self.threshold is None else self.threshold[:n], self.global_heads)


def apply_delta_control(dt_eff: torch.Tensor, control: DeltaControl) -> torch.Tensor:
    """dt_eff (b, l, h), post-softplus, before the time-step limit -> the hooked (b, l, h)."""
    if isinstance(control.scale, torch.Tensor):
        scale = control.scale.clamp_min(SCALE_FLOOR).to(device=dt_eff.device, dtype=dt_eff.dtype)
        dt_eff = dt_eff * (scale[:, None, None] if scale.dim() == 1 else scale)
    elif control.scale is not None:
        dt_eff = dt_eff * max(float(control.scale), SCALE_FLOOR)
    if control.threshold is not None:
        # LongMamba's keep rule is strict (dt > threshold); only global heads are filtered.
        drop = (dt_eff <= control.threshold[:, None, :].to(dt_eff.dtype)) & control.global_heads.to(dt_eff.device)
        dt_eff = dt_eff.masked_fill(drop, 0.0)
    return dt_eff


def resolve_mode(extension: "ContextExtension | None", mode: str) -> str:
    """What ``mode`` means for a model with these artifacts: "off", "mambaextend", "longmamba" or "both".

    "auto" is every calibrated method; asking for a method that is not calibrated is an error naming the
    step."""
    if mode not in MODES:
        raise ValueError(f"context extension mode must be one of {MODES}, got {mode!r}")
    has_scale = extension is not None and extension.has_delta_scale
    has_filter = extension is not None and extension.has_filter
    want_scale = mode in ("mambaextend", "both") or (mode == "auto" and has_scale)
    want_filter = mode in ("longmamba", "both") or (mode == "auto" and has_filter)
    if want_scale and not has_scale:
        raise ValueError("MambaExtend is not calibrated for this model: run `recemb calibrate --method "
                         "mambaextend` first")
    if want_filter and not has_filter:
        raise ValueError("LongMamba is not calibrated for this model: run `recemb calibrate --method "
                         "longmamba` first")
    if want_scale:
        return "both" if want_filter else "mambaextend"
    return "longmamba" if want_filter else "off"


@dataclass
class ContextExtension:
    """Calibrated artifacts for both methods (which of them runs is the caller's ``mode``).

    delta_scale: per-layer MambaExtend scales (None: not calibrated).
    global_heads: per layer, per head: True for LongMamba's global heads (None: not calibrated).
    thresholds: target length (tokens) -> per layer, per head Δ threshold.
    train_length: the length the model was trained (and calibrated) at; min_length: both methods act on inputs
    of at least this many tokens.
    """

    delta_scale: list[float] | None = None
    global_heads: list[list[bool]] | None = None
    thresholds: dict[int, list[list[float]]] = field(default_factory=dict)
    train_length: int = 2048
    min_length: int | None = None  # None: 1.5 × train_length (LongMamba: 3k for a 2k model)
    threshold_multiplier: float = 1.0  # LongMamba's b
    calibration: dict = field(default_factory=dict)  # how the artifacts were made (recorded, not used)

    @property
    def has_delta_scale(self) -> bool:
        return self.delta_scale is not None

    @property
    def has_filter(self) -> bool:
        return self.global_heads is not None and bool(self.thresholds)

    @property
    def mode(self) -> str:
        """What "auto" runs: every calibrated method."""
        return resolve_mode(self, "auto")

    # ------------------------------------------------------------------ per batch
    def active_from(self) -> int:
        """Input length (tokens) from which both methods act: ``min_length``, else 1.5 × train_length."""
        return self.min_length if self.min_length is not None else int(1.5 * self.train_length)

    def threshold_key(self, length: int) -> int:
        """The calibrated target length nearest to ``length`` (LongMamba's rule)."""
        return min(self.thresholds, key=lambda k: (abs(length - k), k))

    def layer_controls(self, lengths: torch.Tensor, device: torch.device, mode: str = "auto"
                       ) -> list[DeltaControl | None] | None:
        """Per layer, the hook for a batch whose rows have whole input lengths ``lengths`` (b,) under
        ``mode``;
        None when the mode is off or no row is long enough (the plain model)."""
        mode = resolve_mode(self, mode)
        scaling, filtering = mode in ("mambaextend", "both"), mode in ("longmamba", "both")
        long_rows = [int(L) >= self.active_from() for L in lengths.tolist()]
        if mode == "off" or not any(long_rows):
            return None
        n_layers = len(self.delta_scale) if self.has_delta_scale else len(self.global_heads)
        scales: list | None = None
        if scaling:
            if all(long_rows):  # a float per layer: the arithmetic of a batch of long inputs stays as it was
                scales = list(self.delta_scale)
            else:  # rows too short keep scale 1, which multiplies exactly
                keep = torch.tensor(long_rows)
                scales = [torch.where(keep, torch.tensor(s, dtype=torch.float32), torch.ones(())).to(device)
                          for s in self.delta_scale]
        thresholds = masks = None
        if filtering:
            h = len(self.global_heads[0])
            # Rows too short keep every token: threshold -1 (Δ is never negative).
            full = torch.stack([torch.tensor(self.thresholds[self.threshold_key(int(L))], dtype=torch.float32)
                                if long else torch.full((n_layers, h), -1.0)
                                for L, long in zip(lengths.tolist(), long_rows)])  # (b, layers, h)
            thresholds = (full * self.threshold_multiplier).to(device)
            masks = torch.tensor(self.global_heads, dtype=torch.bool, device=device)  # (layers, h)
        return [
            DeltaControl(
                scale=None if scales is None else scales[i],
                threshold=None if thresholds is None else thresholds[:, i],
                global_heads=None if masks is None else masks[i],
            )
            for i in range(n_layers)
        ]

    # ------------------------------------------------------------------ artifacts
    def to_dict(self) -> dict:
        d = asdict(self)
        d["thresholds"] = {str(k): v for k, v in self.thresholds.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ContextExtension":
        d = dict(d)
        d["thresholds"] = {int(k): v for k, v in d.get("thresholds", {}).items()}
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"{ARTIFACT_FILE}: unknown fields {sorted(unknown)}")
        return cls(**d)

    def save(self, folder: str | os.PathLike) -> Path:
        path = Path(folder) / ARTIFACT_FILE
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "ContextExtension | None":
        path = Path(folder) / ARTIFACT_FILE
        if not path.is_file():
            return None
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (json.JSONDecodeError, TypeError) as e:
            raise ValueError(f"{path} is not a valid context-extension file: {e}") from e

    def check(self, num_layers: int, num_heads: int) -> None:
        """Shapes must match the model the artifacts are attached to."""
        if self.delta_scale is not None and len(self.delta_scale) != num_layers:
            raise ValueError(f"{ARTIFACT_FILE}: {len(self.delta_scale)} delta scales for {num_layers} layers")
        if self.global_heads is not None:
            if len(self.global_heads) != num_layers or any(len(g) != num_heads for g in self.global_heads):
                raise ValueError(f"{ARTIFACT_FILE}: global_heads must be {num_layers} layers × {num_heads} heads")
            for k, t in self.thresholds.items():
                if len(t) != num_layers or any(len(r) != num_heads for r in t):
                    raise ValueError(f"{ARTIFACT_FILE}: thresholds[{k}] must be {num_layers} × {num_heads}")
