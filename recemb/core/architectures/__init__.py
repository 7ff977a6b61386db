"""The architectures recemb runs (Mamba2, xLSTM, RWKV-7), one package each, and their registry.

Each package (``mamba2``, ``xlstm``, ``rwkv7``) holds its config, state, layers, ``RecurrentEncoder`` and loader,
and exports one ``ARCHITECTURE`` descriptor (``Architecture``: name, display name, detect, load, save format,
model-card backbone, ``recemb info`` fields). ``ARCHITECTURES`` (model_type -> descriptor) is the one list of
them; the loader (``recemb.core.loading``) detects a folder's architecture through it. What their loaders share is
in ``checkpoint`` (config.json read for ``detect``, the state-dict check). Nothing outside an architecture's
package imports it (``tests/test_architecture.py``), except the ``recemb calibrate`` command (Mamba2's
``calibration``) and the mini-model tool (Mamba2).
"""

from recemb.core.architectures.descriptor import Architecture
from recemb.core.architectures.registry import ARCHITECTURES, FORMATS_HELP, architecture, detect

__all__ = ["ARCHITECTURES", "Architecture", "FORMATS_HELP", "architecture", "detect"]
