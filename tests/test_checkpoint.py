import errno
import os
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from accelrl.run.checkpoint import (
    CheckpointError,
    capture_rng,
    list_checkpoints,
    load_latest,
    restore_rng,
    save_checkpoint,
)


def ckpt_dir(run: Path) -> Path:
    return run / "checkpoints"


def test_save_names_retention_and_load(tmp_path: Path) -> None:
    assert load_latest(tmp_path) is None and list_checkpoints(tmp_path) == []
    for f in (5, 1000, 20, 300):
        path = save_checkpoint(tmp_path, {"w": torch.full((3,), float(f))}, f, keep=10)
    assert path.name == "ckpt_000000000300.pt"
    # 1000 is newer than the checkpoint just written, so it belongs to an abandoned run.
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt_000000000005.pt",
        "ckpt_000000000020.pt",
        "ckpt_000000000300.pt",
    ]
    for f in (400, 500):
        save_checkpoint(tmp_path, {"w": torch.full((3,), float(f))}, f, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt_000000000400.pt",
        "ckpt_000000000500.pt",
    ]
    state, path = load_latest(tmp_path)
    assert path.name == "ckpt_000000000500.pt" and state["frames"] == 500
    assert torch.equal(state["w"], torch.full((3,), 500.0))
    assert sorted(os.listdir(ckpt_dir(tmp_path))) == [p.name for p in list_checkpoints(tmp_path)]


def test_truncated_newest_falls_back_and_warns(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, {"a": 1}, 100)
    newest = save_checkpoint(tmp_path, {"a": 2, "big": torch.zeros(1000)}, 200)
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning) as rec:
        state, path = load_latest(tmp_path)
    assert state["a"] == 1 and path.name == "ckpt_000000000100.pt"
    msg = str(rec[0].message)
    assert "ckpt_000000000200.pt" in msg and "ckpt_000000000100.pt" in msg


def test_non_dict_or_missing_frames_is_corrupt(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, {"a": 1}, 100)
    torch.save([1, 2], ckpt_dir(tmp_path) / "ckpt_000000000200.pt")
    torch.save({"a": 3}, ckpt_dir(tmp_path) / "ckpt_000000000300.pt")
    with pytest.warns(UserWarning, match="ckpt_000000000300.pt.*ckpt_000000000200.pt"):
        state, path = load_latest(tmp_path)
    assert path.name == "ckpt_000000000100.pt"


def test_all_corrupt_returns_none(tmp_path: Path) -> None:
    ckpt_dir(tmp_path).mkdir()
    (ckpt_dir(tmp_path) / "ckpt_000000000001.pt").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="no loadable"):
        assert load_latest(tmp_path) is None


@pytest.mark.parametrize("target", ["torch.save", "os.replace"])
def test_enospc_keeps_previous_and_cleans_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    save_checkpoint(tmp_path, {"a": 1}, 100)

    def full(*args, **kwargs):
        if target == "torch.save":
            args[1].write(b"partial")  # a real ENOSPC happens after some bytes were written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(target, full)
    with pytest.raises(CheckpointError, match="ckpt_000000000200.pt.*No space left"):
        save_checkpoint(tmp_path, {"a": 2}, 200)
    monkeypatch.undo()
    assert os.listdir(ckpt_dir(tmp_path)) == ["ckpt_000000000100.pt"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state, _ = load_latest(tmp_path)
    assert state["a"] == 1


def test_save_removes_stale_temp_files(tmp_path: Path) -> None:
    ckpt_dir(tmp_path).mkdir()
    (ckpt_dir(tmp_path) / ".ckpt_killed.tmp").write_bytes(b"half")
    save_checkpoint(tmp_path, {}, 1)
    assert os.listdir(ckpt_dir(tmp_path)) == ["ckpt_000000000001.pt"]


def test_rng_capture_restore_roundtrip(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    save_checkpoint(tmp_path, {"rng": capture_rng()}, 10)

    def draw() -> tuple:
        return random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist()

    first = draw()
    assert draw() != first
    state, _ = load_latest(tmp_path)
    restore_rng(state["rng"])
    assert draw() == first


def serializer_fails(*args, **kwargs):
    """torch.save on a full disk: the archive writer's own text, not ENOSPC."""
    args[1].write(b"partial")
    raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 5312 vs 5200")


@pytest.mark.parametrize("free,full", [(4096, True), (10 * 2**30, False)])
def test_full_disk_inside_the_serializer_names_the_cause(tmp_path, monkeypatch, free, full):
    import shutil

    save_checkpoint(tmp_path, {"a": 1}, 100)
    monkeypatch.setattr("torch.save", serializer_fails)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr("shutil.disk_usage", lambda p: usage._replace(free=free))
    state = {"weights": torch.zeros(2**20)}  # 4 MiB
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(tmp_path, state, 200)
    message = str(info.value)
    if full:
        assert "No space left on device" in message and "inline_container" not in message
        assert "needs about 5.0 MB" in message and "0.0 MB free" in message
        assert f"{ckpt_dir(tmp_path)} has" in message
    else:  # room enough: not the disk; the serializer's text is all there is to say
        assert "No space" not in message and "unexpected pos" in message
    monkeypatch.undo()
    assert os.listdir(ckpt_dir(tmp_path)) == ["ckpt_000000000100.pt"]
