"""The rooms of docs/architecture.md and what each may import, checked on the source (every import statement,
including those inside functions)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Folder -> the module name it is installed (or run) as.
PACKAGES = {"kernels": "recemb.kernels", "core": "recemb.core", "recemb_integrations": "recemb_integrations",
            "tools": "tools"}
ADAPTERS = ("recemb_integrations.sentence_transformers", "recemb_integrations.langchain",
            "recemb_integrations.langchain_sparse", "recemb_integrations.llama_index")
MAIN_JOB = ("recemb_integrations.qdrant", "recemb_integrations.migrate", "recemb_integrations.sparse",
            "recemb_integrations.formats", "recemb_integrations.ray", "recemb_integrations.terminal")
# Room (module prefixes) -> the project modules it may import (prefixes). Most specific room first.
RULES = [
    (("recemb.kernels",), ("recemb.kernels",)),
    (("recemb.core",), ("recemb.core", "recemb.kernels")),
    (("recemb_integrations.stores",), ("recemb_integrations.stores", "recemb_integrations.sparse",
                                       "recemb_integrations._imports")),
    (("recemb_integrations.training",), ("recemb_integrations.training", "recemb_integrations.sentence_transformers",
                                         "recemb_integrations._imports", "recemb.core")),
    (ADAPTERS, ("recemb.core", "recemb_integrations._imports", "recemb_integrations.sparse")),
    (MAIN_JOB, ("recemb.core", "recemb_integrations._imports", "recemb_integrations.stores", *MAIN_JOB)),
    (("recemb_integrations.cli",), ("recemb.core", "recemb_integrations")),
    (("tools",), ("recemb.core", "recemb_integrations", "tools")),
    (("recemb_integrations",), ("recemb_integrations._imports",)),  # the package itself and its import helper
]  # anyone may import the top-level ``recemb`` (its version)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found.update(n for n in names if n.split(".")[0] in ("recemb", "recemb_integrations", "tools"))
    return found


def within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_every_room_imports_only_what_it_may():
    broken = []
    checked = 0
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = module_name(path)
            room = next(((r, allowed) for r, allowed in RULES if within(name, r)), None)
            assert room is not None, f"{name} belongs to no room of docs/architecture.md"
            checked += 1
            for imported in sorted(project_imports(path)):
                if not within(imported, room[1]) and imported != "recemb":
                    broken.append(f"{name} imports {imported}")
    assert checked > 50
    assert not broken, "\n".join(broken)


def test_the_rules_catch_a_wrong_import(tmp_path):
    """The check itself: a core module importing an adapter is a violation."""
    assert within("recemb_integrations.langchain", ADAPTERS)
    core_rule = next(allowed for r, allowed in RULES if within("recemb.core.embedder", r))
    assert not within("recemb_integrations.langchain", core_rule)
    assert not within("tools.mini_model", core_rule) and within("recemb.kernels.ssd", core_rule)
    sample = tmp_path / "x.py"
    sample.write_text("def f():\n    from recemb_integrations.training import train\nimport recemb.core\n")
    assert project_imports(sample) == {"recemb_integrations.training", "recemb.core"}


MAMBA2_MODULES = ("recemb.core.model", "recemb.core.mixer", "recemb.core.config", "recemb.core.state")
# Who may import Mamba2's own classes: Mamba2 itself, its loader, its context-extension calibration, the package's
# exports, and the maintainer tool that builds the bundled Mamba2. The engine, Embedder and integrations may not.
MAMBA2_USERS = (*MAMBA2_MODULES, "recemb.core.loading", "recemb.core.calibration", "tools")


def test_nothing_outside_mamba2_imports_its_classes():
    offenders = []
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = module_name(path)
            if name == "recemb.core" or within(name, MAMBA2_USERS):
                continue
            offenders += [f"{name} imports {m}" for m in sorted(project_imports(path)) if within(m, MAMBA2_MODULES)]
    assert not offenders, "\n".join(offenders)
