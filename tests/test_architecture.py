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
            "recemb_integrations.formats", "recemb_integrations.ray", "recemb_integrations.terminal",
            "recemb_integrations.excerpts")
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
    # Folder sources: walking, reading and hashing files; never the model (test_folder_sources_import_no_model_code).
    (("recemb_integrations.sources",), ("recemb_integrations.formats", "recemb_integrations.qdrant")),
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


MODEL_CODE = ("recemb.core", "recemb.kernels", "torch")


def test_folder_sources_import_no_model_code():
    """Listing, reading and hashing files needs no model: sources.py imports no model code, and its one name from the
    main job, ``DocumentSource`` (whose package loads the model), only inside the function that builds them."""
    tree = ast.parse((ROOT / "recemb_integrations" / "sources.py").read_text(encoding="utf-8"))
    in_functions = {id(node) for function in ast.walk(tree)
                    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(function)}
    offenders = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in imported:
            main_job = within(module, ("recemb_integrations.qdrant",))
            if within(module, MODEL_CODE) or (main_job and (name != "DocumentSource" or id(node) not in in_functions)):
                offenders.append(f"line {node.lineno}: {module}" + (f" {name}" if name else ""))
    assert not offenders, "\n".join(offenders)


ARCHITECTURE_PACKAGES = ("recemb.core.architectures.mamba2", "recemb.core.architectures.xlstm",
                         "recemb.core.architectures.rwkv7")
REGISTRY = "recemb.core.architectures.registry"  # imports each package's ARCHITECTURE descriptor, nothing else
# Who may import an architecture's own classes besides its package and the registry: for Mamba2, its
# context-extension calibration and the maintainer tool that builds the bundled Mamba2. The engine, the loader,
# Embedder, the other architectures and the integrations may not.
ARCHITECTURE_USERS = {"recemb.core.architectures.mamba2": ("recemb.core.calibration", "tools")}
MAMBA2_MODULES = ("recemb.core.architectures.mamba2",)
MAMBA2_USERS = (*MAMBA2_MODULES, REGISTRY, *ARCHITECTURE_USERS[MAMBA2_MODULES[0]])


def imported_modules(path: Path) -> set[str]:
    """``project_imports``, plus ``pkg.name`` for every ``from pkg import name`` (``name`` may be a module:
    ``from recemb.core.architectures import mamba2`` imports ``recemb.core.architectures.mamba2``)."""
    found = project_imports(path)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in found:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def architecture_offenders(package: str, users: tuple[str, ...]) -> list[str]:
    offenders = []
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = module_name(path)
            if within(name, (package, REGISTRY, *users)):
                continue
            offenders += [f"{name} imports {m}" for m in sorted(imported_modules(path)) if within(m, (package,))]
    return offenders


def test_nothing_outside_mamba2_imports_its_classes():
    offenders = []
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = module_name(path)
            if within(name, MAMBA2_USERS):
                continue
            offenders += [f"{name} imports {m}" for m in sorted(imported_modules(path)) if within(m, MAMBA2_MODULES)]
    assert not offenders, "\n".join(offenders)


def test_each_architecture_is_imported_only_through_the_registry():
    """Every architecture's classes stay in its package: the rest of the tree reaches it through its descriptor
    (``recemb.core.architectures.ARCHITECTURES``). Mamba2's users above are the only exceptions."""
    offenders = []
    for package in ARCHITECTURE_PACKAGES:
        offenders += architecture_offenders(package, ARCHITECTURE_USERS.get(package, ()))
    assert not offenders, "\n".join(offenders)


def test_the_architecture_rule_catches_a_module_import(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("from recemb.core.architectures import xlstm\nfrom recemb.core import Embedder\n")
    assert "recemb.core.architectures.xlstm" in imported_modules(sample)
    assert within("recemb.core.architectures.xlstm.model", ARCHITECTURE_PACKAGES)


# The main job's rooms that decide without a model: what a collection recorded, what a sync will do, points as data.
MODEL_FREE = ("recemb_integrations.qdrant.record", "recemb_integrations.qdrant.errors",
              "recemb_integrations.qdrant.plan", "recemb_integrations.qdrant.points",
              "recemb_integrations.qdrant.documents", "recemb_integrations.qdrant.lengths",
              "recemb_integrations.qdrant.collection", "recemb_integrations.qdrant.calls")


def test_the_main_jobs_model_free_rooms_import_no_model_code():
    offenders = []
    for path in (ROOT / "recemb_integrations" / "qdrant").glob("*.py"):
        name = module_name(path)
        if name not in MODEL_FREE:
            continue
        offenders += [f"{name}: {m}" for m in imported_modules(path) if within(m, MODEL_CODE)
                      or within(m, ("recemb_integrations.qdrant.sync", "recemb_integrations.qdrant.writer",
                                    "recemb_integrations.qdrant.search", "recemb_integrations.qdrant.rebuild"))]
    assert len({module_name(p) for p in (ROOT / "recemb_integrations" / "qdrant").glob("*.py")} & set(MODEL_FREE)) \
        == len(MODEL_FREE)
    assert not offenders, "\n".join(offenders)


def private_imports(path: Path) -> list[str]:
    """``from <another project module> import _name``: a sibling's private name."""
    own = module_name(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module != own \
                and node.module.split(".")[0] in ("recemb", "recemb_integrations", "tools"):
            found += [f"{own}: from {node.module} import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_imports_a_siblings_private_names(tmp_path):
    # The kernels' Triton stages keep mamba_ssm's names (_chunk_scan_fwd, ...) across their own files: not checked.
    offenders = [hit for folder in ("core", "recemb_integrations", "tools")
                 for path in sorted((ROOT / folder).rglob("*.py")) for hit in private_imports(path)]
    assert not offenders, "\n".join(offenders)
    probe = ROOT / "recemb_integrations" / "probe_private.py"  # the rule itself catches one
    try:
        probe.write_text("from recemb_integrations.qdrant.writer import _short\n")
        assert private_imports(probe) == ["recemb_integrations.probe_private: from recemb_integrations.qdrant.writer "
                                          "import _short"]
    finally:
        probe.unlink()


def test_every_public_module_declares_its_public_names():
    missing = [str(path.relative_to(ROOT)) for folder in ("core", "kernels", "recemb_integrations")
               for path in sorted((ROOT / folder).rglob("*.py"))
               if (path.name == "__init__.py" or not path.name.startswith("_"))
               and "__all__" not in {getattr(t, "id", None) for node in ast.parse(path.read_text(encoding="utf-8")).body
                                     if isinstance(node, (ast.Assign, ast.AnnAssign))
                                     for t in (node.targets if isinstance(node, ast.Assign) else [node.target])}]
    assert not missing, "no __all__ in: " + ", ".join(missing)
