"""Fetch what gpu_check.py needs on a GPU machine beyond the repository, into benchmarks/.peers (ignored by git).

    python3 benchmarks/fetch_peers.py          # then carry benchmarks/.peers to the GPU machine
    bash benchmarks/gpu_run.sh OUT              # there: installs the wheels below, then runs gpu_check.py

- **mamba_ssm's Triton ops** (the SSD scan's stages, the gated norm and the small utilities they import) are pure
  Python and Triton; the package itself needs CUDA extensions to install, and must never be installed on a CPU
  machine (transformers imports it when present, and fails there). So its source distribution is downloaded from the
  package registry pip is configured with (its build skipped: ``MAMBA_SKIP_CUDA_BUILD``), and only those files are
  unpacked, unmodified, under ``benchmarks/.peers/mamba_ssm`` with empty package files above them, so that
  ``mamba_ssm.ops.triton.ssd_combined`` imports without the package's ``__init__`` (which loads the extensions).
  gpu_check.py puts the folder on ``sys.path`` only while it imports the peer, so transformers never sees it.
- **Wheels of the kernel packages** recemb's RWKV-7 and xLSTM paths use on CUDA (flash-linear-attention, fla-core,
  mlstm_kernels), at the versions installed here, which the CPU tests ran against, into
  ``benchmarks/.peers/wheels``: a GPU machine with no network cannot fetch them (all three are pure Python).
- **A sample of a shared IR collection** (the first 300 cisi documents), where the shared data is beside the
  repository, as ``benchmarks/.peers/cisi.jsonl``: the bundled-model rows compare GPU and CPU vectors on it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PEERS = Path(__file__).resolve().parent / ".peers"
MAMBA_SSM = "mamba-ssm==2.3.2.post1"
FILES = ["ops/triton/ssd_bmm.py", "ops/triton/ssd_chunk_scan.py", "ops/triton/ssd_chunk_state.py",
         "ops/triton/ssd_combined.py", "ops/triton/ssd_state_passing.py", "ops/triton/layernorm_gated.py",
         "ops/triton/softplus.py", "ops/triton/k_activations.py", "utils/torch.py", "utils/determinism.py"]
PACKAGES = ["", "ops", "ops/triton", "utils"]
WHEELS = ["flash-linear-attention", "fla-core", "mlstm_kernels"]
SHARED_CISI = Path(__file__).resolve().parents[2] / "shared" / "data" / "ir" / "cisi" / "corpus.jsonl"
SAMPLE_DOCUMENTS = 300


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


def fetch_wheels(packages: list[str] = WHEELS) -> Path:
    """Wheels of ``packages`` at the versions installed here (pure Python: any platform takes them)."""
    pins = []
    for package in packages:
        try:
            pins.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            sys.exit(f"{package} is not installed here: install the dev extra first (pip install -e '.[dev]')")
    target = PEERS / "wheels"
    PEERS.mkdir(parents=True, exist_ok=True)
    # Into a fresh folder, which replaces the old one only once every wheel is there: one version of each (two
    # would stop the install on the GPU machine), and a failed download leaves the previous wheels as they were.
    staging = Path(tempfile.mkdtemp(dir=PEERS, prefix="wheels-"))
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d",
                        str(staging), *pins], check=True)
    except BaseException:
        shutil.rmtree(staging)
        raise
    if target.is_dir():
        shutil.rmtree(target)
    staging.rename(target)
    return target


def copy_sample(source: Path = SHARED_CISI, documents: int = SAMPLE_DOCUMENTS) -> Path | None:
    """The first ``documents`` lines of the shared cisi corpus, or None where it is not beside the repository."""
    if not source.is_file():
        return None
    target = PEERS / "cisi.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, encoding="utf-8") as f, open(target, "w", encoding="utf-8") as out:
        for _, line in zip(range(documents), f):
            out.write(line)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mamba-ssm", default=MAMBA_SSM, help=f"the requirement to fetch (default {MAMBA_SSM})")
    args = parser.parse_args(argv)
    print(f"mamba_ssm's Triton ops in {fetch_mamba_ssm(args.mamba_ssm)}")
    print(f"kernel packages' wheels in {fetch_wheels()}")
    sample = copy_sample()
    print(f"cisi sample in {sample}" if sample else f"no shared data at {SHARED_CISI}: the bundled-model rows will "
          "compare vectors on the repository's docs instead")
    return 0


if __name__ == "__main__":
    sys.exit(main())
