"""Training-free context extension: one Δ hook for MambaExtend's Δ scaling and LongMamba's token filtering.

Per mixer, with dt_eff = softplus(dt_raw + dt_bias) of shape (b, l, h):

1. MambaExtend (Azizi et al., ICLR 2025): dt_eff ← s_l · dt_eff, one scale per layer, floored at 0.01.
2. LongMamba (Ye et al., ICLR 2025): in the layer's *global* heads (cumulative decay over a training-length
   window stays above θ), tokens with dt_eff ≤ threshold_h(L) get Δ = 0: no decay and no input, so the token is
   skipped in that head's state, while D·x and the C·h readout still happen. The threshold is keyed by the
   **whole** input length L, so it does not depend on the vertical chunk size V. Active only from ``min_length``.
3. The time-step limit, then the scan with ``dt_bias=None, dt_softplus=False``.

Neither enabled: the mixer takes its usual path (bit-for-bit the same outputs). Calibration: ``core/calibration.py``.
Artifacts live in the model folder as ``context_extension.json`` and load with the model.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

ARTIFACT_FILE = "context_extension.json"
SCALE_FLOOR = 0.01  # MambaExtend's only clamp on the calibrated scales
MODES = ("auto", "off", "mambaextend", "longmamba", "both")


@dataclass
class DeltaControl:
    """What the Δ hook does in one layer for one batch.

    scale: s_l (None: no scaling); threshold: (b, h) per-row thresholds for this layer (None: no filtering);
    global_heads: (h,) bool, the heads filtering applies to.
    """

    scale: float | torch.Tensor | None = None  # a 0-d tensor lets calibration take gradients through it
    threshold: torch.Tensor | None = None
    global_heads: torch.Tensor | None = None

    def keep_rows(self, n: int) -> "DeltaControl":
        return DeltaControl(self.scale, None if self.threshold is None else self.threshold[:n], self.global_heads)


def apply_delta_control(dt_eff: torch.Tensor, control: DeltaControl) -> torch.Tensor:
    """dt_eff (b, l, h), post-softplus, before the time-step limit -> the hooked (b, l, h)."""
    if isinstance(control.scale, torch.Tensor):
        dt_eff = dt_eff * control.scale.clamp_min(SCALE_FLOOR).to(dt_eff.dtype)
    elif control.scale is not None:
        dt_eff = dt_eff * max(float(control.scale), SCALE_FLOOR)
    if control.threshold is not None:
        # LongMamba's keep rule is strict (dt > threshold); only global heads are filtered.
        drop = (dt_eff <= control.threshold[:, None, :].to(dt_eff.dtype)) & control.global_heads.to(dt_eff.device)
        dt_eff = dt_eff.masked_fill(drop, 0.0)
    return dt_eff


@dataclass
class ContextExtension:
    """Calibrated artifacts for both methods, and which of them is switched on.

    delta_scale: per-layer MambaExtend scales (None: not calibrated).
    global_heads: per layer, per head: True for LongMamba's global heads (None: not calibrated).
    thresholds: target length (tokens) -> per layer, per head Δ threshold.
    train_length: the length the model was trained (and calibrated) at; min_length: filtering starts here.
    """

    delta_scale: list[float] | None = None
    global_heads: list[list[bool]] | None = None
    thresholds: dict[int, list[list[float]]] = field(default_factory=dict)
    train_length: int = 2048
    min_length: int | None = None  # None: 1.5 × train_length (LongMamba: 3k for a 2k model)
    threshold_multiplier: float = 1.0  # LongMamba's b
    calibration: dict = field(default_factory=dict)  # how the artifacts were made (recorded, not used)
    use_delta_scale: bool = True
    use_filter: bool = True

    # ------------------------------------------------------------------ switches
    @property
    def has_delta_scale(self) -> bool:
        return self.delta_scale is not None

    @property
    def has_filter(self) -> bool:
        return self.global_heads is not None and bool(self.thresholds)

    @property
    def active(self) -> bool:
        return (self.use_delta_scale and self.has_delta_scale) or (self.use_filter and self.has_filter)

    def set_mode(self, mode: str) -> None:
        """auto: every calibrated method; off; mambaextend; longmamba; both (must be calibrated)."""
        if mode not in MODES:
            raise ValueError(f"context extension mode must be one of {MODES}, got {mode!r}")
        want_scale = mode in ("mambaextend", "both") or (mode == "auto" and self.has_delta_scale)
        want_filter = mode in ("longmamba", "both") or (mode == "auto" and self.has_filter)
        if want_scale and not self.has_delta_scale:
            raise ValueError("MambaExtend is not calibrated for this model: run `recemb calibrate --method "
                             "mambaextend` first")
        if want_filter and not self.has_filter:
            raise ValueError("LongMamba is not calibrated for this model: run `recemb calibrate --method longmamba` "
                             "first")
        self.use_delta_scale, self.use_filter = want_scale, want_filter

    @property
    def mode(self) -> str:
        s, f = self.use_delta_scale and self.has_delta_scale, self.use_filter and self.has_filter
        return "both" if s and f else "mambaextend" if s else "longmamba" if f else "off"

    # ------------------------------------------------------------------ per batch
    def filter_starts_at(self) -> int:
        return self.min_length if self.min_length is not None else int(1.5 * self.train_length)

    def threshold_key(self, length: int) -> int:
        """The calibrated target length nearest to ``length`` (LongMamba's rule)."""
        return min(self.thresholds, key=lambda k: (abs(length - k), k))

    def layer_controls(self, lengths: torch.Tensor, device: torch.device) -> list[DeltaControl | None] | None:
        """Per layer, the hook for a batch whose rows have full input lengths ``lengths`` (b,); None if inactive."""
        if not self.active:
            return None
        n_layers = len(self.delta_scale) if self.has_delta_scale else len(self.global_heads)
        scales = self.delta_scale if (self.use_delta_scale and self.has_delta_scale) else None
        thresholds = masks = None
        if self.use_filter and self.has_filter:
            start = self.filter_starts_at()
            rows = []
            for L in lengths.tolist():
                if L < start:
                    rows.append(None)
                else:
                    rows.append(torch.tensor(self.thresholds[self.threshold_key(int(L))], dtype=torch.float32))
            if any(r is not None for r in rows):
                h = len(self.global_heads[0])
                # Rows below min_length keep every token: threshold -1 (Δ is never negative).
                full = torch.stack([r if r is not None else torch.full((n_layers, h), -1.0) for r in rows])  # (b, L, h)
                thresholds = (full * self.threshold_multiplier).to(device)
                masks = torch.tensor(self.global_heads, dtype=torch.bool, device=device)  # (layers, h)
        if scales is None and thresholds is None:
            return None
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
        for runtime_switch in ("use_delta_scale", "use_filter"):
            d.pop(runtime_switch)
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
