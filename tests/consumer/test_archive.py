"""Unpacking a verified result archive that a hostile provider made: each trick (absolute
paths, `..`, links out of the folder, a hard link to nothing, devices, a FIFO, a file where a
folder must be, a truncated archive, more members or bytes than allowed) is refused with
UnpackRefused naming the reason and the kept archive; nothing is written outside `out/`, and
no `out/` (nor a partial one) is left. A good archive still unpacks, replacing an older one."""

from __future__ import annotations

import gzip
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from consumer.sdk import archive as unpacking
from consumer.sdk.archive import unpack_archive
from consumer.sdk.errors import UnpackRefused


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, io.BytesIO(data) if kind == tarfile.REGTYPE else None


def tar_of(*members) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, data)
    return buffer.getvalue()


def claiming(size: int) -> bytes:
    """A lone header for a member of `size` bytes, none of them there."""
    info = tarfile.TarInfo("model.bin")
    info.size = size
    return info.tobuf()


HOSTILE = {
    "absolute path": (tar_of(member("ok.txt"), member("/tmp/unchained-evil.txt")), "absolute"),
    "dot-dot": (tar_of(member("ok.txt"), member("../evil.txt")), "outside the destination"),
    "nested dot-dot": (tar_of(member("a/../../evil.txt")), "outside the destination"),
    "symlink out": (tar_of(member("link", tarfile.SYMTYPE, link="../../etc")), "outside"),
    "absolute symlink": (tar_of(member("passwd", tarfile.SYMTYPE, link="/etc/passwd")),
                         "absolute"),
    "symlink then through it": (
        tar_of(member("up", tarfile.SYMTYPE, link=".."), member("up/evil.txt")), "outside"),
    "hardlink out": (tar_of(member("passwd", tarfile.LNKTYPE, link="/etc/passwd")), "absolute"),
    "hardlink to nothing": (tar_of(member("copy", tarfile.LNKTYPE, link="missing")), "missing"),
    "char device": (tar_of(member("null", tarfile.CHRTYPE)), "special file"),
    "block device": (tar_of(member("disk", tarfile.BLKTYPE)), "special file"),
    "fifo": (tar_of(member("pipe", tarfile.FIFOTYPE)), "special file"),
    "file where a folder must be": (tar_of(member("a"), member("a/b.txt")), "Not a directory"),
    "truncated": (tar_of(member("ok.txt"), member("big.bin", data=b"y" * 4096))[:1536],
                  "unexpected end of data"),
    "a header claiming a terabyte": (claiming(1 << 40), "unexpected end of data"),
}  # fmt: skip


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_archive_is_refused_and_nothing_is_left(kind: str, tmp_path: Path):
    data, reason = HOSTILE[kind]
    results = tmp_path / "results" / "job"
    results.mkdir(parents=True)
    archive = results / "result.tar"
    archive.write_bytes(data)
    with pytest.raises(UnpackRefused) as refused:
        unpack_archive(archive, results / "out")
    assert reason in refused.value.details["reason"], refused.value.details
    assert refused.value.details["archive"] == str(archive)
    assert "nothing was unpacked" in str(refused.value)
    assert sorted(p.name for p in results.iterdir()) == ["result.tar"]  # no out/, no partial
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    assert not Path("/tmp/unchained-evil.txt").exists()


def test_more_members_than_allowed_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(unpacking, "MAX_MEMBERS", 3)
    archive = tmp_path / "result.tar"
    archive.write_bytes(tar_of(*(member(f"f{i}") for i in range(4))))
    with pytest.raises(UnpackRefused, match="more than 3 members"):
        unpack_archive(archive, tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["result.tar"]


def test_more_bytes_than_the_disk_has_free_is_refused_before_writing(tmp_path, monkeypatch):
    free = shutil.disk_usage(tmp_path)._replace(free=4095)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: free)
    archive = tmp_path / "result.tar"
    archive.write_bytes(tar_of(member("a", data=b"a" * 2048), member("b", data=b"b" * 2048)))
    with pytest.raises(UnpackRefused, match="2 members hold 4096 bytes; 4095 are free here"):
        unpack_archive(archive, tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["result.tar"]


def test_a_good_archive_unpacks_over_an_older_one(tmp_path: Path):
    archive = tmp_path / "result.tar"
    model = member("dir/model.txt", data=b"weights")
    archive.write_bytes(tar_of(model, member("latest", tarfile.SYMTYPE, link="dir/model.txt")))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.txt").write_text("from before")
    assert unpack_archive(archive, tmp_path / "out") == tmp_path / "out"
    assert (tmp_path / "out" / "latest").read_bytes() == b"weights"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["dir", "latest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "result.tar"]


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_an_out_that_is_no_folder_is_replaced_and_nothing_it_points_to_touched(kind, tmp_path):
    archive = tmp_path / "result.tar"
    archive.write_bytes(tar_of(member("model.txt", data=b"weights")))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    if kind == "symlink":
        (tmp_path / "out").symlink_to(elsewhere)
    else:
        (tmp_path / "out").write_text("a file")
    assert unpack_archive(archive, tmp_path / "out") == tmp_path / "out"
    assert (tmp_path / "out").is_dir() and not (tmp_path / "out").is_symlink()
    assert (tmp_path / "out" / "model.txt").read_bytes() == b"weights"
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("kind", ["bytes", "gzip"])
def test_not_a_plain_tar_stays_as_it_arrived(kind: str, tmp_path: Path):
    """A compressed tar is not unpacked either: it could expand far beyond what was sent."""
    archive = tmp_path / "result.tar"
    plain = b"just bytes, no tar header" * 40
    archive.write_bytes(plain if kind == "bytes" else gzip.compress(tar_of(member("a"))))
    assert unpack_archive(archive, tmp_path / "out") is None
    assert [p.name for p in tmp_path.iterdir()] == ["result.tar"]
