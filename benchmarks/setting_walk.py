"""The way one setting travels: `recemb sync --passage-tokens 8` traced from the command to the store's write.

    python3 benchmarks/setting_walk.py                # this tree
    python3 benchmarks/setting_walk.py --against REV  # and another commit's, checked out in a temporary worktree

A profiler hook records every call into the project's code (recemb, recemb_integrations) whose arguments carry the
setting: an argument named ``passage_tokens``, or an object that has it (the parsed arguments, a settings or
request object, a write job, the sync), and the store's upsert of passage points (where the setting ends up). The
calls, in order, are folded into *stays* (consecutive calls in one module); a *return* is a stay in a module the
walk had already left. Printed: stays, modules, returns and the most stays in one module, then the route.

The tiny random model of tests/utils.py is used and nothing is written outside a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TRACE = r'''
import json, os, sys, tempfile
from pathlib import Path
if os.environ.get("RECEMB_OLD_TREE"):  # import the other commit's code, not the editable install
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, sys.argv[2])
from tutils import save_transformers_checkpoint, transformers_model
from recemb_integrations.cli import main

tmp = Path(tempfile.mkdtemp())
model = save_transformers_checkpoint(transformers_model("g1"), tmp / "model")
docs = tmp / "docs"
docs.mkdir()
for i in range(3):
    (docs / f"d{i}.md").write_text("tides and owls and the moon " * (20 + 10 * i))
ROOTS = tuple(os.path.realpath(p) for p in sys.argv[3:])


def carries(value):
    if isinstance(value, (str, bytes, int, float, type(None))):
        return False
    for holder in (value, getattr(value, "settings", None), getattr(value, "requested", None)):
        try:
            if holder is not None and not callable(holder) and hasattr(holder, "passage_tokens"):
                return True
        except Exception:
            pass
    return False


def passage_points(args):
    for value in args.values():
        if isinstance(value, list) and value and all(hasattr(p, "payload") for p in value):
            return any((p.payload or {}).get("kind") == "passage" for p in value)
    return False


walk = []
arrived = []


def profile(frame, event, arg):
    if event != "call" or arrived:
        return
    path = os.path.realpath(frame.f_code.co_filename)
    if not path.startswith(ROOTS) or "/tests/" in path or "/benchmarks/" in path:
        return
    module = frame.f_globals.get("__name__", "?")
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    args = {n: frame.f_locals.get(n) for n in names}
    own = args.get("self")
    # A method of the object that holds the value (a settings record reading its own field) is the value, not a stop
    # on its way; a method of an object that carries it along (the sync, the writer) is.
    moved = "passage_tokens" in args or any(carries(v) for n, v in args.items() if n != "self") or (
        own is not None and carries(own) and not hasattr(type(own), "__dataclass_fields__")
        and not hasattr(own, "passage_tokens"))
    if code.co_name == "upsert" and passage_points(args):
        walk.append((module, code.co_name))
        arrived.append(True)  # the walk ends where the setting reaches the store
    elif moved:
        walk.append((module, code.co_name))


argv = ["sync", str(docs), "--passage-tokens", "8", "--passages-above", "0", "--model", str(model),
        "--qdrant-path", str(tmp / "store"), "--collection", "c", "--json"]
if sys.argv[1] == "existing":  # into a collection that exists: an edited document re-embedded
    assert main(argv) == 0
    (docs / "d1.md").write_text("the moon pulls the tides " * 40)
sys.setprofile(profile)
code = main(argv)
sys.setprofile(None)
print("WALK " + json.dumps({"code": code, "walk": walk}))
'''


def trace(tree: Path, old: bool, scenario: str) -> dict:
    tests = Path(tempfile.mkdtemp())
    (tests / "tutils.py").write_text((tree / "tests" / "utils.py").read_text())
    script = tests / "trace.py"
    script.write_text(TRACE)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if old:  # imported from the other tree, laid out as installed (recemb/core, recemb/kernels where it maps them)
        env.update(PYTHONPATH=str(_installed_layout(tree, tests / "package")), RECEMB_OLD_TREE="1")
    out = subprocess.run([sys.executable, str(script), scenario, str(tests), str(tree), *_package_dirs(tree)],
                         cwd=tests, env=env, capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WALK ")), None)
    if line is None:
        raise SystemExit(f"the trace failed:\n{out.stderr[-3000:]}")
    return json.loads(line[5:])


def _installed_layout(tree: Path, folder: Path) -> Path:
    if not (tree / "core").is_dir():
        return tree
    (folder / "recemb").mkdir(parents=True)
    (folder / "recemb" / "__init__.py").write_text((tree / "recemb" / "__init__.py").read_text())
    for name, source in (("core", tree / "core"), ("kernels", tree / "kernels"),
                         ("models", tree / "recemb" / "models")):
        (folder / "recemb" / name).symlink_to(source)
    (folder / "recemb_integrations").symlink_to(tree / "recemb_integrations")
    return folder


def _package_dirs(tree: Path) -> list[str]:
    return [str(tree / d) for d in ("recemb", "recemb_integrations", "core", "kernels") if (tree / d).is_dir()]


def stays(walk: list[list[str]]) -> list[tuple[str, list[str]]]:
    folded: list[tuple[str, list[str]]] = []
    for module, function in walk:
        if folded and folded[-1][0] == module:
            folded[-1][1].append(function)
        else:
            folded.append((module, [function]))
    return folded


def summary(label: str, walk: list[list[str]]) -> dict:
    folded = stays(walk)
    seen: set[str] = set()
    returns = 0
    per_module: dict[str, int] = {}
    for module, _ in folded:
        returns += module in seen
        seen.add(module)
        per_module[module] = per_module.get(module, 0) + 1
    return {"tree": label, "stays": len(folded), "modules": len(seen), "returns": returns,
            "most stays in one module": max(per_module.values(), default=0),
            "that module": max(per_module, key=per_module.get) if per_module else "", "route": folded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="another commit to trace the same way")
    parser.add_argument("--route", action="store_true", help="print each stay of the route")
    args = parser.parse_args()
    scenarios = ("new", "existing")  # a sync that creates the collection, one into it after an edit
    rows = [summary(f"this tree, {s}", trace(ROOT, old=False, scenario=s)["walk"]) for s in scenarios]
    if args.against:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), args.against],
                           check=True)
            try:
                rows += [summary(f"{args.against}, {s}", trace(tree, old=True, scenario=s)["walk"])
                         for s in scenarios]
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    print("| tree, collection | stays | modules | returns | most stays in one module |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['tree']} | {row['stays']} | {row['modules']} | {row['returns']} | "
              f"{row['most stays in one module']} ({row['that module']}) |")
    if args.route:
        for row in rows:
            print(f"\n{row['tree']}:")
            for i, (module, functions) in enumerate(row["route"], 1):
                print(f"  {i:2d}. {module}: {', '.join(dict.fromkeys(functions))}")


if __name__ == "__main__":
    main()
