#!/usr/bin/env bash
# Install recemb from this clone with the given extras:
#   bash scripts/install.sh dev                  # editable (the default): the clone's files are the package
#   bash scripts/install.sh langchain,qdrant     # several extras: comma-separated (or as separate arguments)
#   bash scripts/install.sh --wheel qdrant       # build a wheel from the clone and install that (not editable):
#                                                # what a user of a built wheel gets, the bundled model inside it
# torch is installed only when missing, pinned to the CPU build this machine class keeps on disk (torch==2.13.0);
# an existing torch is kept, and held at its version while the extras resolve, so no dependency can replace it
# (pip stops with a conflict instead). The package itself asks only for torch>=2.1. $PYTHON picks the interpreter.
set -euo pipefail
PY=${PYTHON:-python3}
case "$PY" in */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;; esac  # a relative $PYTHON, before the cd
cd "$(dirname "$0")/.."
mode=editable
names=()
for arg in "$@"; do
    case "$arg" in
        --wheel) mode=wheel ;;
        --editable) mode=editable ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "install.sh: unknown option $arg (--wheel, --editable)" >&2; exit 2 ;;
        *) names+=("$arg") ;;
    esac
done
extras=$(IFS=,; echo "${names[*]:-}" | tr -d ' ')
extras=${extras:+[$extras]}

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# the installed torch's public version (2.13.0 for 2.13.0+cpu): `==` ignores the local label, so the build is kept
"$PY" -W ignore -c "import torch; print('torch==' + torch.__version__.split('+')[0])" >"$work/hold-torch.txt"

if [ "$mode" = editable ]; then
    "$PY" -m pip install -q -c "$work/hold-torch.txt" -e ".${extras}"
else
    # Built from a copy of the clone's files (tracked and new, none that git ignores): an in-tree build would ship
    # whatever an earlier build left in build/lib, modules since deleted included.
    src=.
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        src="$work/src"
        git ls-files -z --cached --others --exclude-standard | "$PY" -c '
import os, shutil, sys
for name in filter(None, sys.stdin.read().split("\0")):
    if os.path.isfile(name):  # a tracked file deleted in the work tree is not copied
        os.makedirs(os.path.join(sys.argv[1], os.path.dirname(name)), exist_ok=True)
        shutil.copy2(name, os.path.join(sys.argv[1], name))' "$src"
    fi
    "$PY" -m pip wheel -q --no-deps -w "$work/dist" "$src"
    wheel=$(ls "$work"/dist/recemb-*.whl)
    "$PY" -m pip uninstall -q -y recemb 2>/dev/null || true  # an editable recemb of the same version would stay
    "$PY" -m pip install -q -c "$work/hold-torch.txt" "${wheel}${extras}"
fi
# what got installed, imported outside the clone (from its root, ./recemb would shadow an installed wheel)
(cd "$work" && "$PY" -c 'import sys, recemb, torch
print(f"recemb{sys.argv[2]} ({sys.argv[1]}): {recemb.__path__[0]}; torch {torch.__version__}")' "$mode" "$extras")
