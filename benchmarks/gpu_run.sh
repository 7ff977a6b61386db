#!/usr/bin/env bash
# The prepared GPU run, as one command on a GPU machine with no network, from the repository's root:
#
#     python3 benchmarks/fetch_peers.py             # first, on a machine with a package registry
#     bash benchmarks/gpu_run.sh OUT                # there, with benchmarks/.peers carried beside the repository
#     bash benchmarks/gpu_run.sh OUT --smoke        # the same launcher on a CPU (TRITON_INTERPRET=1 set for it)
#
# It installs the kernel packages' wheels from benchmarks/.peers/wheels into a folder of its own (the machine's
# Python is left as it is), puts the repository first on PYTHONPATH (recemb is not installed there), records the
# machine and versions in OUT/environment.txt, and runs benchmarks/gpu_check.py with OUT and any further arguments,
# its output also in OUT/gpu_check.log. A hard stop (GPU_RUN_LIMIT seconds, default 480) interrupts a run that
# outlasts gpu_check.py's own time boxes; every row measured by then is already in OUT/gpu_check.jsonl.
set -uo pipefail

out=${1:?usage: bash benchmarks/gpu_run.sh OUT_FOLDER [gpu_check.py arguments]}
shift
python=${PYTHON:-python3}
peers=benchmarks/.peers
mkdir -p "$out"

if [[ " $* " == *" --smoke "* ]]; then
    export TRITON_INTERPRET=1 HF_HUB_OFFLINE=1
fi
site=
if compgen -G "$peers/wheels/*.whl" >/dev/null; then
    site=$(mktemp -d /tmp/recemb-gpu-site.XXXXXX)
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
        "$peers"/wheels/*.whl || { echo "could not install the wheels in $peers/wheels" >&2; exit 1; }
fi
export PYTHONPATH="$PWD${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

{
    date -u
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
    else
        echo "no nvidia-smi"
    fi
    echo "cpus: $(nproc)"
} | tee "$out/environment.txt"

timeout -s INT -k 20 "${GPU_RUN_LIMIT:-480}" "$python" benchmarks/gpu_check.py --out "$out" "$@" 2>&1 \
    | tee "$out/gpu_check.log"
status=${PIPESTATUS[0]}
if [[ $status == 124 ]]; then
    echo "gpu_run.sh: stopped at ${GPU_RUN_LIMIT:-480} s; the rows measured by then are in $out/gpu_check.jsonl"
fi
[[ -n $site ]] && rm -rf "$site"
exit "$status"
