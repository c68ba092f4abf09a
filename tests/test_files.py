"""Writing files (``dspark.files``): a write that fails halfway keeps the previous file, and what
a process that no longer runs left half-written is removed."""

from __future__ import annotations

import errno

import pytest

from dspark.errors import DsparkError


def test_a_write_that_fails_halfway_keeps_the_previous_file(tmp_path):
    from dspark import files

    path = tmp_path / "config.json"
    files.write_text(path, "the good one")

    def half_then_full(tmp):
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DsparkError, match="the disk is full"):
        files.atomic_write(path, half_then_full)
    assert path.read_text() == "the good one" and [p.name for p in tmp_path.iterdir()] == ["config.json"]
    stale = tmp_path / ".model.safetensors.999999.tmp.safetensors"  # from a process that no longer runs
    stale.write_text("x")
    assert files.remove_stale(tmp_path) == 1 and not stale.exists()
