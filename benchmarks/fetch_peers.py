"""Fetch the peers gpu_check.py compares with, as source, into benchmarks/.peers (ignored by git).

    python3 benchmarks/fetch_peers.py          # then carry benchmarks/.peers to the GPU machine

mamba_ssm's Triton ops (the SSD scan's stages, the gated norm and the small utilities they import) are pure Python
and Triton; the package itself needs CUDA extensions to install, and must never be installed on a CPU machine
(transformers imports it when present, and fails there). So its source distribution is downloaded from the package
registry pip is configured with (its build skipped: ``MAMBA_SKIP_CUDA_BUILD``), and only those files are unpacked,
unmodified, under ``benchmarks/.peers/mamba_ssm`` with empty package files above them, so that
``mamba_ssm.ops.triton.ssd_combined`` imports without the package's ``__init__`` (which loads the extensions).
gpu_check.py puts the folder on ``sys.path`` only while it imports the peer, so transformers never sees it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PEERS = Path(__file__).resolve().parent / ".peers"
MAMBA_SSM = "mamba-ssm==2.3.2.post1"
FILES = ["ops/triton/ssd_bmm.py", "ops/triton/ssd_chunk_scan.py", "ops/triton/ssd_chunk_state.py",
         "ops/triton/ssd_combined.py", "ops/triton/ssd_state_passing.py", "ops/triton/layernorm_gated.py",
         "ops/triton/softplus.py", "ops/triton/k_activations.py", "utils/torch.py", "utils/determinism.py"]
PACKAGES = ["", "ops", "ops/triton", "utils"]


def fetch_mamba_ssm(requirement: str = MAMBA_SSM) -> Path:
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "MAMBA_SKIP_CUDA_BUILD": "TRUE", "CAUSAL_CONV1D_SKIP_CUDA_BUILD": "TRUE"}
        subprocess.run([sys.executable, "-m", "pip", "download", requirement, "--no-deps", "--no-binary", ":all:",
                        "--no-build-isolation", "-d", folder], check=True, env=env)
        archive = next(Path(folder).glob("mamba_ssm-*.tar.gz"))
        target = PEERS / "mamba_ssm"
        with tarfile.open(archive) as tar:
            members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
            for name in FILES:
                member = members[f"mamba_ssm/{name}"]
                out = target / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(member).read())
            licence = members.get("LICENSE")
            if licence is not None:
                (target / "LICENSE").write_bytes(tar.extractfile(licence).read())
        for package in PACKAGES:
            (target / package / "__init__.py").touch()
        (target / "SOURCE").write_text(f"{archive.name}: {', '.join(FILES)}, unmodified\n")
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mamba-ssm", default=MAMBA_SSM, help=f"the requirement to fetch (default {MAMBA_SSM})")
    args = parser.parse_args(argv)
    print(f"mamba_ssm's Triton ops in {fetch_mamba_ssm(args.mamba_ssm)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
