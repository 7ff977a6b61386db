"""The third hostile pass, its data-loss findings: one test per case as the issue wrote it, through the real `recemb`
command or the public API on both embedded stores, and the store compared with the source after every case.

1. the mass-delete guard holds at any size (half or more of what a sync manages, 1 of 2 and 4 of 5 included), and a
   sync that names only files deletes nothing;
2. sources from ``folder_sources`` carry their root: a sync without ``scope=`` is that root's, a contradicting scope
   is refused, and a sync in which every document failed deletes nothing;
3. ``--store-text`` is a recorded collection setting: kept by later syncs, refused when contradicted;
and the refusal of ``--no-passages`` in its own words.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import models as qm  # noqa: E402

from recemb_integrations.cli import main  # noqa: E402
from recemb_integrations.qdrant import (  # noqa: E402
    CollectionMismatchError,
    Document,
    MassDeletionError,
    NothingReadableError,
    QdrantSync,
    read_record,
)
from recemb_integrations.sources import folder_sources  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
from tests.integrations.cli_cases import assert_store_is, run, stored_payloads, texts_under, write  # noqa: E402


def folder(path: Path, n: int, stem: str = "x") -> Path:
    for i in range(1, n + 1):
        write(path / f"{stem}{i}.md", f"note {i} of {path.name}: tides, owls and the moon, part {i}")
    return path


def refused(code: int, err: str) -> None:
    assert code == 2 and "--allow-mass-delete" in err and "nothing was written" in err, err


# ---------------------------------------------------------------------- 1. the mass-delete guard
def test_naming_one_file_of_a_synced_folder_deletes_nothing(tmp_path, opts, capsys):
    """The issue's case: `recemb sync footX/x1.md` into the collection of the 5-document folder footX deleted the
    other 4 with exit 0. Naming files syncs those files; the report says what it kept."""
    store, foot = tmp_path / "store", folder(tmp_path / "footX", 5)
    assert run(capsys, ["sync", str(foot), *opts])[0] == 0
    write(foot / "x1.md", "note 1, edited")
    code, report, err = run(capsys, ["sync", str(foot / "x1.md"), *opts])
    assert code == 0 and report["updated"] == 1 and report["deleted"] == 0 and report["kept_not_named"] == 4, err
    assert_store_is(store, texts_under(foot))
    code, report, err = run(capsys, ["sync", str(foot / "x3.md"), str(foot / "x4.md"), *opts])
    assert code == 0 and report["deleted"] == 0 and report["kept_not_named"] == 3, err
    assert_store_is(store, texts_under(foot))


def test_the_report_says_why_nothing_was_deleted(tmp_path, opts, capsys):
    foot = folder(tmp_path / "footX", 3)
    assert run(capsys, ["sync", str(foot), *opts])[0] == 0
    assert main(["sync", str(foot / "x3.md"), *opts]) == 0
    out = capsys.readouterr().out
    assert "note: 2 stored documents not named here are kept (only files were named" in out, out
    assert main(["sync", str(foot), *opts]) == 0  # the folder: nothing is missing, nothing to say
    assert "note:" not in capsys.readouterr().out


@pytest.mark.parametrize("total,kept", [(2, 1), (5, 1), (4, 2), (1, 0)], ids=["1-of-2", "4-of-5", "2-of-4", "1-of-1"])
def test_the_guard_holds_at_any_size(tmp_path, opts, capsys, total, kept):
    """Half or more of a root's documents is refused without the flag, whatever the size: through the folder whose
    files were removed, and through a glob that matches one of them."""
    store, foot = tmp_path / "store", folder(tmp_path / "foot", total)
    assert run(capsys, ["sync", str(foot), *opts])[0] == 0
    before = texts_under(foot)
    for f in sorted(foot.glob("*.md"))[kept:]:
        f.unlink()
    if not kept:
        write(foot / "y.md", "a new note")  # a folder that is not empty: what is refused is the deletion
    code, _, err = run(capsys, ["sync", str(foot), *opts])
    refused(code, err)
    assert f"would delete {total - kept} of the {total} documents" in err
    assert_store_is(store, before)
    code, _, err = run(capsys, ["sync", str(foot / ("x1*.md" if kept else "y*.md")), *opts])  # a glob: all of them
    refused(code, err)
    assert_store_is(store, before)
    code, report, err = run(capsys, ["sync", str(foot), "--allow-mass-delete", *opts])
    assert code == 0 and report["deleted"] == total - kept, err
    assert_store_is(store, texts_under(foot))


def test_less_than_half_needs_no_flag(tmp_path, opts, capsys):
    store, foot = tmp_path / "store", folder(tmp_path / "foot", 5)
    assert run(capsys, ["sync", str(foot), *opts])[0] == 0
    (foot / "x5.md").unlink()
    (foot / "x4.md").unlink()  # 2 of 5
    code, report, err = run(capsys, ["sync", str(foot), *opts])
    assert code == 0 and report["deleted"] == 2, err
    assert_store_is(store, texts_under(foot))


def test_the_guard_in_the_api_at_small_sizes(tiny_embedder, tmp_path, store_kind):
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder, passage_tokens=0)
        sync.sync([Document("a", "alpha"), Document("b", "beta")])
        with pytest.raises(MassDeletionError, match="delete 1 of the 2"):
            sync.sync([Document("a", "alpha")])
        assert sync.count() == 2
        assert sync.sync([Document("a", "alpha")], allow_mass_delete=True).deleted == 1
        with pytest.raises(MassDeletionError, match="delete 1 of the 1"):
            sync.sync([Document("c", "gamma")])
        assert sync.count() == 1


# ---------------------------------------------------------------------- 2. sources know their root
def test_sources_of_a_prefixed_root_sync_as_that_root(tiny_embedder, tmp_path, store_kind):
    """The issue's case: folder_sources(["footY"], id_prefix="y") synced without scope= deleted the unprefixed
    root's documents, and failed its own."""
    plain, foot_y = folder(tmp_path / "plain", 3, "p"), folder(tmp_path / "footY", 1, "z")
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder, passage_tokens=0)
        first = folder_sources([plain])
        assert sync.sync(first.sources, scope=first.scope).added == 3
        found = folder_sources([foot_y], id_prefix="y")
        assert sync.sync(found.sources, scope=found.scope).added == 1
        write(foot_y / "z1.md", "edited")
        report = sync.sync(found.sources)  # no scope: the sources' own root
        assert report.updated == 1 and report.deleted == 0 and not report.failed
        with pytest.raises(ValueError, match="found under the id prefix 'y'"):
            sync.sync(found.sources, scope="other")
        with pytest.raises(ValueError, match="several|2 sync roots"):
            sync.sync([*first.sources, *found.sources])
        with pytest.raises(ValueError, match="rebuild replaces the whole collection"):
            sync.sync(found.sources, rebuild=True)
        (plain / "p3.md").unlink()  # and the unprefixed root still manages its own
        report = sync.sync(folder_sources([plain]).sources)
        assert report.deleted == 1 and report.unchanged == 2
    assert_store_is(tmp_path / "s", {**texts_under(plain), **texts_under(foot_y, "y/")})


def test_a_sync_in_which_every_document_failed_deletes_nothing(tiny_embedder, tmp_path, store_kind):
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        sync = QdrantSync(store, "c", tiny_embedder, passage_tokens=0)
        sync.sync([Document("a/x", "the unprefixed root's")])
        sync.sync([Document(f"a/{i}", f"text {i}") for i in range(3)], scope="a/")
        # Its one document is another root's: it fails, and even a deliberate mass deletion deletes nothing.
        report = sync.sync([Document("a/x", "claimed")], scope="a/", allow_mass_delete=True)
        assert report.deleted == 0 and [f[0] for f in report.failed] == ["a/x"]
        assert any("every document given failed" in why for _, why in report.warnings)
        assert sync.count() == 4
        # A sync with a document outside its scope and nothing else: refused before any write.
        with pytest.raises(NothingReadableError, match="nothing was synced or deleted"):
            sync.sync([Document("b/y", "elsewhere")], scope="a/", allow_mass_delete=True)
        assert sync.count() == 4


def test_every_file_failing_through_the_command_deletes_nothing(tmp_path, opts, capsys):
    store, g, m = tmp_path / "store", tmp_path / "g", tmp_path / "m"
    write(g / "a" / "x.md", "the unprefixed root's")
    folder(m, 3)
    assert run(capsys, ["sync", str(g), *opts])[0] == 0
    assert run(capsys, ["sync", str(m), "--id-prefix", "a", *opts])[0] == 0
    for f in m.glob("*.md"):
        f.unlink()
    write(m / "x.md", "claims the unprefixed root's id")
    code, report, err = run(capsys, ["sync", str(m), "--id-prefix", "a", "--allow-mass-delete", *opts])
    assert code == 1 and report["deleted"] == 0 and [f[0] for f in report["failed"]] == ["a/x.md"], err
    assert_store_is(store, {"a/x.md": "the unprefixed root's",
                            **{f"a/x{i}.md": f"note {i} of m: tides, owls and the moon, part {i}" for i in (1, 2, 3)}})


# ---------------------------------------------------------------------- 3. --store-text is recorded
def test_store_text_is_kept_by_a_sync_without_the_flag(tmp_path, opts, capsys):
    """The issue's case: one sync without the flag, after an edit, dropped the stored text it re-embedded."""
    store, foot = tmp_path / "store", folder(tmp_path / "foot", 3)
    assert run(capsys, ["sync", str(foot), "--store-text", *opts])[0] == 0
    write(foot / "x2.md", "an edited note about the moon")
    code, report, err = run(capsys, ["sync", str(foot), *opts])
    assert code == 0 and report["updated"] == 1, err
    texts = {doc_id: p.get("text") for doc_id, p in stored_payloads(store).items()}
    assert texts == texts_under(foot)
    code, hits, err = run(capsys, ["search", "edited", "--limit", "1", "--mode", "sparse", *opts])
    assert code == 0 and hits[0]["document_id"] == "x2.md" and hits[0]["text"] == "an edited note about the moon"
    assert_store_is(store, texts_under(foot))
    code, _, err = run(capsys, ["sync", str(foot), "--no-store-text", *opts])
    assert code == 2 and "was built with --store-text; drop --no-store-text" in err, err
    assert_store_is(store, texts_under(foot))


def test_store_text_added_later_is_refused_not_half_applied(tmp_path, opts, capsys, monkeypatch):
    """Adding the flag later stored text only for new documents, without a word."""
    store, foot = tmp_path / "store", folder(tmp_path / "foot", 2)
    assert run(capsys, ["sync", str(foot), *opts])[0] == 0
    write(foot / "x3.md", "a new note")
    refuse_to_load_the_model(monkeypatch)
    code, _, err = run(capsys, ["sync", str(foot), "--store-text", *opts])
    assert code == 2 and "was built without --store-text; drop --store-text" in err and "--rebuild" in err, err
    assert all("text" not in p for p in stored_payloads(store).values())
    assert sorted(stored_payloads(store)) == ["x1.md", "x2.md"]  # nothing written


def test_a_rebuild_may_change_store_text(tmp_path, opts, capsys):
    store, foot = tmp_path / "store", folder(tmp_path / "foot", 2)
    assert run(capsys, ["sync", str(foot), *opts])[0] == 0
    code, _, err = run(capsys, ["sync", str(foot), "--rebuild", "--store-text", *opts])
    assert code == 0, err
    assert {d: p.get("text") for d, p in stored_payloads(store).items()} == texts_under(foot)
    with open_store(path=store) as s:
        assert read_record(s, "c").data["store_text"] is True
    assert_store_is(store, texts_under(foot))


def test_store_text_in_the_api(tiny_embedder, tmp_path, store_kind):
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        QdrantSync(store, "c", tiny_embedder, store_text=True).sync([Document("a", "alpha"), Document("b", "beta")])
        sync = QdrantSync(store, "c", tiny_embedder)  # not named: the collection's
        assert sync.sync([Document("a", "alpha, edited"), Document("b", "beta")]).updated == 1
        assert sorted(h.text for h in sync.search("alpha", limit=2, mode="dense")) == ["alpha, edited", "beta"]
        with pytest.raises(CollectionMismatchError, match="built with store_text=True, not False"):
            QdrantSync(store, "c", tiny_embedder, store_text=False).sync([Document("a", "x"), Document("b", "y")])
        assert QdrantSync.open(store, "c", tiny_embedder).settings.store_text is True


def test_a_collection_that_did_not_record_store_text_is_read_off_its_points(tiny_embedder, tmp_path, store_kind):
    """An earlier recemb recorded nothing: the points say whether texts are kept, and the next sync records it."""
    with open_store(path=tmp_path / "s", kind=store_kind) as store:
        QdrantSync(store, "c", tiny_embedder, store_text=True).sync([Document("a", "alpha"), Document("b", "beta")])
        old = read_record(store, "c").without("store_text")
        store.update_metadata("c", old.metadata())
        assert "store_text" not in store.collection_info("c").metadata["recemb"]
        assert read_record(store, "c").settings.store_text is True
        QdrantSync(store, "c", tiny_embedder).sync([Document("a", "alpha, edited"), Document("b", "beta")])
        assert store.collection_info("c").metadata["recemb"]["store_text"] is True
        points, _ = store.scroll("c", limit=10, filter=qm.Filter(must=[qm.FieldCondition(
            key="kind", match=qm.MatchValue(value="document"))]))
        assert sorted(p.payload["text"] for p in points) == ["alpha, edited", "beta"]


# ---------------------------------------------------------------------- --no-passages refused in its own words
def test_refusing_no_passages_names_no_passages(tmp_path, opts, capsys, monkeypatch):
    foot = folder(tmp_path / "foot", 2)
    assert run(capsys, ["sync", str(foot), "--passage-tokens", "8", *opts])[0] == 0
    refuse_to_load_the_model(monkeypatch)
    code, _, err = run(capsys, ["sync", str(foot), "--no-passages", *opts])
    assert code == 2 and "was built with passages (--passage-tokens 8); drop --no-passages" in err, err
    assert "--passage-tokens 0" not in err
    code, _, err = run(capsys, ["sync", str(foot), "--passage-tokens", "0", *opts])
    assert code == 2 and "--passage-tokens 8, not 0" in err, err


def refuse_to_load_the_model(monkeypatch) -> None:
    """From here on, loading the model fails the test: the refusal under test comes first."""
    from recemb_integrations.cli import resources

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before a check that needs no model")

    monkeypatch.setattr(resources, "load_embedder", refuse)


def test_bytes_given_as_a_document_are_named_with_the_way_on(tiny_embedder, tmp_path):
    with open_store(path=tmp_path / "s", kind="local") as store:
        report = QdrantSync(store, "c", tiny_embedder).sync([Document("a", b"bytes, not text"), ("b", "text")])
    assert report.added == 1 and report.failed == [("a", "text is bytes, expected str (decode it first, e.g. "
                                                         "text.decode('utf-8'))")]
