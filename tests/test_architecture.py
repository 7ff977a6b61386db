"""The rooms of docs/architecture.md and what each may import, checked on the source (every import statement,
including those inside functions)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The folders checked; each is its import path (recemb/core is recemb.core).
PACKAGES = ("recemb/kernels", "recemb/core", "recemb_integrations", "tools")
ADAPTERS = ("recemb_integrations.sentence_transformers", "recemb_integrations.langchain",
            "recemb_integrations.langchain_embeddings", "recemb_integrations.langchain_sparse",
            "recemb_integrations.llama_index", "recemb_integrations.llama_index_embedding")
# The main job as a framework's vector store: a collection kept by QdrantSync, searched through it.
FRAMEWORK_STORES = ("recemb_integrations.langchain_store", "recemb_integrations.llama_index_store",
                    "recemb_integrations.llama_index_filters", "recemb_integrations.llama_index_embed_in_store")
MAIN_JOB = ("recemb_integrations.qdrant", "recemb_integrations.migrate", "recemb_integrations.sparse",
            "recemb_integrations.formats", "recemb_integrations.ray", "recemb_integrations.terminal",
            "recemb_integrations.excerpts", "recemb_integrations.evidence", "recemb_integrations.framework_collection")
# Room (module prefixes) -> the project modules it may import (prefixes). Most specific room first.
RULES = [
    (("recemb.kernels",), ("recemb.kernels",)),
    (("recemb.core",), ("recemb.core", "recemb.kernels")),
    (("recemb_integrations.stores",), ("recemb_integrations.stores", "recemb_integrations.sparse",
                                       "recemb_integrations._imports")),
    (("recemb_integrations.training",), ("recemb_integrations.training", "recemb_integrations.sentence_transformers",
                                         "recemb_integrations._imports", "recemb.core")),
    # A store's parts (the LlamaIndex one, its filters and its pipeline step) import each other.
    # They reach the main job through framework_collection; of its rooms only the model-free values a document, a
    # hit and another library's model are made of.
    (FRAMEWORK_STORES, ("recemb_integrations._imports", "recemb_integrations.stores",
                        "recemb_integrations.framework_collection", "recemb_integrations.qdrant.documents",
                        "recemb_integrations.qdrant.external", "recemb_integrations.qdrant.points", *ADAPTERS,
                        *FRAMEWORK_STORES)),
    # An adapter module names its framework's store (RecembVectorStore), loaded from FRAMEWORK_STORES when asked for.
    # The framework's module (langchain.py, llama_index.py) re-exports the embedding class of its own module.
    (ADAPTERS, ("recemb.core", "recemb_integrations._imports", "recemb_integrations.sparse", *FRAMEWORK_STORES,
                "recemb_integrations.langchain_embeddings", "recemb_integrations.llama_index_embedding")),
    (MAIN_JOB, ("recemb.core", "recemb_integrations._imports", "recemb_integrations.stores", *MAIN_JOB,
                "recemb_integrations.sources")),
    # Folder sources: walking, reading and hashing files; never the model (test_folder_sources_import_no_model_code).
    (("recemb_integrations.sources",), ("recemb_integrations.formats", "recemb_integrations.qdrant")),
    (("recemb_integrations.cli",), ("recemb.core", "recemb_integrations")),
    (("tools",), ("recemb.core", "recemb_integrations", "tools")),
    (("recemb_integrations",), ("recemb_integrations._imports",)),  # the package itself and its import helper
]  # anyone may import the top-level ``recemb`` (its version)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
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
    """Listing, reading and hashing files needs no model: sources.py imports no model code, and from the main job
    only its model-free rooms (``DocumentSource``, ``content_hash``); tests/integrations/test_imports.py checks the
    same at run time."""
    offenders = [m for m in imported_modules(ROOT / "recemb_integrations" / "sources.py")
                 if within(m, MODEL_CODE) or (within(m, ("recemb_integrations.qdrant",)) and not within(m, MODEL_FREE))]
    assert not offenders, "\n".join(offenders)


ARCHITECTURE_PACKAGES = ("recemb.core.architectures.mamba2", "recemb.core.architectures.xlstm",
                         "recemb.core.architectures.rwkv7")
REGISTRY = "recemb.core.architectures.registry"  # imports each package's ARCHITECTURE descriptor, nothing else
# Who else may import an architecture's modules, and which: the `recemb calibrate` command, Mamba2's
# context-extension calibration; the maintainer tool that builds the bundled model, all of Mamba2. The engine, the
# loader, Embedder, the other architectures and the rest of the integrations may not.
ARCHITECTURE_USERS = {"recemb_integrations.cli.model": ("recemb.core.architectures.mamba2.calibration",),
                      "tools": ("recemb.core.architectures.mamba2",)}


def imported_modules(path: Path) -> set[str]:
    """``project_imports``, plus ``pkg.name`` for every ``from pkg import name`` (``name`` may be a module:
    ``from recemb.core.architectures import mamba2`` imports ``recemb.core.architectures.mamba2``)."""
    found = project_imports(path)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in found:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def architecture_offenders(name: str, imported: set[str]) -> list[str]:
    """What module ``name`` may not import of ``imported``: an architecture's modules, unless ``name`` is in that
    architecture's package, is the registry, or is one of ``ARCHITECTURE_USERS`` importing what it may."""
    if name == REGISTRY:
        return []
    own = [p for p in ARCHITECTURE_PACKAGES if within(name, (p,))]
    allowed = [m for user, modules in ARCHITECTURE_USERS.items() if within(name, (user,)) for m in modules]
    return [f"{name} imports {m}" for m in sorted(imported)
            if within(m, ARCHITECTURE_PACKAGES) and not within(m, (*own, *allowed))]


def test_each_architecture_is_imported_only_through_the_registry():
    """Every architecture's modules stay in its package: the rest of the tree reaches it through its descriptor
    (``recemb.core.architectures.ARCHITECTURES``), except ``ARCHITECTURE_USERS``."""
    offenders = [hit for folder in PACKAGES for path in sorted((ROOT / folder).rglob("*.py"))
                 for hit in architecture_offenders(module_name(path), imported_modules(path))]
    assert not offenders, "\n".join(offenders)


def test_the_architecture_rule_catches_a_module_import(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("from recemb.core.architectures import xlstm\nfrom recemb.core import Embedder\n")
    assert "recemb.core.architectures.xlstm" in imported_modules(sample)
    assert within("recemb.core.architectures.xlstm.model", ARCHITECTURE_PACKAGES)
    assert architecture_offenders("recemb.core.embedder", {"recemb.core.architectures.xlstm"})
    assert architecture_offenders("recemb.core.architectures.rwkv7.load", {"recemb.core.architectures.mamba2.load"})
    # the command may import Mamba2's calibration, not its classes
    assert not architecture_offenders("recemb_integrations.cli.model", {"recemb.core.architectures.mamba2.calibration"})
    assert architecture_offenders("recemb_integrations.cli.model", {"recemb.core.architectures.mamba2.model"})


# The main job's rooms that decide without a model: what a collection recorded, what a sync will do, points as data.
MODEL_FREE = ("recemb_integrations.qdrant.record", "recemb_integrations.qdrant.errors",
              "recemb_integrations.qdrant.plan", "recemb_integrations.qdrant.points",
              "recemb_integrations.qdrant.documents", "recemb_integrations.qdrant.lengths",
              "recemb_integrations.qdrant.collection", "recemb_integrations.qdrant.calls",
              "recemb_integrations.qdrant.writes", "recemb_integrations.qdrant.rebuild",
              "recemb_integrations.qdrant.vectors")


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
    offenders = [hit for folder in ("recemb/core", "recemb_integrations", "tools")
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
    missing = [str(path.relative_to(ROOT)) for folder in ("recemb/core", "recemb/kernels", "recemb_integrations")
               for path in sorted((ROOT / folder).rglob("*.py"))
               if (path.name == "__init__.py" or not path.name.startswith("_"))
               and "__all__" not in {getattr(t, "id", None) for node in ast.parse(path.read_text(encoding="utf-8")).body
                                     if isinstance(node, (ast.Assign, ast.AnnAssign))
                                     for t in (node.targets if isinstance(node, ast.Assign) else [node.target])}]
    assert not missing, "no __all__ in: " + ", ".join(missing)


# What changes a store: every call of these goes through recemb_integrations.qdrant.writes.apply.
STORE_WRITES = ("upsert", "delete", "set_payload", "create_collection", "create_payload_index", "update_metadata",
                "delete_collection", "optimize")


def test_every_change_of_the_main_job_goes_through_the_one_apply_step():
    """The plan, the writer, the collection's preparation, a rebuild and a migration make ``writes`` values; only
    ``writes.apply`` calls (or names) a store's writing methods."""
    offenders = []
    for path in [*(ROOT / "recemb_integrations" / "qdrant").glob("*.py"), ROOT / "recemb_integrations" / "migrate.py",
                 ROOT / "recemb_integrations" / "ray.py"]:
        if path.name == "writes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in STORE_WRITES:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert not offenders, "\n".join(offenders)


def test_no_store_module_is_over_500_lines():
    """The stores are split by job (docs/architecture.md): a module that grows past 500 lines holds two."""
    long = {p.name: n for p in (ROOT / "recemb_integrations" / "stores").glob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, long


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (any import statement, inside functions too; ``from a import b``
    is an import of module ``a.b`` where that is a module, else of ``a``)."""
    paths = {module_name(p): p for folder in PACKAGES for p in sorted((ROOT / folder).rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in paths:
                subs = {f"{node.module}.{a.name}" for a in node.names} & set(paths)
                found.update(subs)
                if len(subs) < len(node.names):  # names defined in the module itself
                    found.add(node.module)
        graph[name] = found - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    out.append(sorted(part))
    return out


def test_no_import_circle():
    """No two modules import each other, directly or around a loop, not even lazily inside a function: each
    package's interface lives apart from what implements it (stores/interface.py, the embeddings apart from the
    stores that take them)."""
    assert circles(import_graph()) == []


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_main_jobs_package_names_at_most_35_things():
    """``recemb_integrations.qdrant`` exports what users call (at most 35 names); the rest is its rooms'. Each
    export is found in its room."""
    import importlib

    package = importlib.import_module("recemb_integrations.qdrant")
    assert len(package.__all__) <= 35, package.__all__
    for name in package.__all__:
        assert getattr(package, name) is not None, name


MAX_MODULE_LINES = 500


def test_no_module_is_over_500_lines():
    """A module a reader can hold: one job each, at most ``MAX_MODULE_LINES`` lines (split by job, not by count)."""
    long = {module_name(path): n for folder in ("recemb", "recemb_integrations", "tools")
            for path in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}
