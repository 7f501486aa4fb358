"""Model files without their frameworks' help: rnnport's .npz container and PyTorch files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError

X = np.random.default_rng(1).uniform(-1, 1, (2, 5, 3)).astype(np.float32)


@pytest.mark.parametrize("model", [
    RNN.random(Spec("lstm", 3, 4, num_layers=2, bidirectional=True, peepholes=True,
                    cell_clip=2.0, gate_clip=3.0, proj_size=2), dtype=np.float16),
    RNN.random(Spec("gru", 3, 4, reset_after=False, bias=False, activations=(
        ("HardSigmoid", 0.3, 0.4), ("Tanh", 0.0, 0.0))), dtype=np.float64),
    rnnport.stack([RNN.random(Spec("gru", 3, 4)), RNN.random(Spec("rnn_relu", 4, 2), seed=3)]),
])
def test_the_npz_container_keeps_everything(tmp_path: Path, model: rnnport.Model) -> None:
    rnnport.write(model, "npz", path=tmp_path / "m.npz")
    back = rnnport.read(tmp_path / "m.npz")
    assert back == model
    assert type(back) is type(model)
    with np.load(tmp_path / "m.npz", allow_pickle=False) as data:
        assert "rnnport" in data.files


def test_an_npz_without_rnnport_header_or_damaged_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "plain.npz", a=np.ones(3))
    with pytest.raises(FormatError, match="no 'rnnport' entry; this .npz was not written by"):
        rnnport.read(tmp_path / "plain.npz")
    rnnport.write(RNN.random(Spec("lstm", 3, 4)), "npz", path=tmp_path / "m.npz")
    data = (tmp_path / "m.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="not a readable .npz file"):
        rnnport.read(tmp_path / "cut.npz")
    with pytest.raises(FormatError, match="should end in .npz"):
        rnnport.write(RNN.random(Spec("lstm", 3, 4)), "npz", path=tmp_path / "m.bin")
    with pytest.raises(FormatError, match="does not exist"):
        rnnport.write(RNN.random(Spec("lstm", 3, 4)), "npz", path=tmp_path / "no" / "m.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.npz", "m.npz", "plain.npz"]


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".safetensors"])
def test_torch_files_round_trip_and_load_in_torch(tmp_path: Path, suffix: str) -> None:
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2, bidirectional=True, proj_size=2))
    path = tmp_path / f"m{suffix}"
    rnnport.write(model, "torch", path=path)
    assert rnnport.read(path) == model
    if suffix != ".safetensors":
        module = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2,
                               batch_first=True)
        module.load_state_dict(torch.load(path, weights_only=True))
        with torch.no_grad():
            expected = module(torch.from_numpy(X))[0].numpy()
        np.testing.assert_allclose(model.forward(X)[0], expected, atol=1e-5)


def test_a_torch_training_checkpoint_is_unwrapped(tmp_path: Path) -> None:
    module = torch.nn.GRU(3, 4)
    torch.save({"epoch": 3, "model_state_dict": module.state_dict()}, tmp_path / "ck.pt")
    assert rnnport.read(tmp_path / "ck.pt") == rnnport.read(module)


def test_a_pickle_that_is_not_weights_only_is_never_run(tmp_path: Path) -> None:
    torch.save(torch.nn.GRU(3, 4), tmp_path / "whole.pt")
    before = (tmp_path / "whole.pt").read_bytes()
    with pytest.raises(FormatError, match=r"pickles Python objects rnnport does not build .*"
                                          r"\(torch.nn.modules.rnn.GRU\).*\.state_dict\(\)"):
        rnnport.read(tmp_path / "whole.pt")
    assert (tmp_path / "whole.pt").read_bytes() == before


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_truncated_torch_files_are_clear_errors(tmp_path: Path, suffix: str) -> None:
    rnnport.write(RNN.random(Spec("gru", 3, 4)), "torch", path=tmp_path / f"m{suffix}")
    data = (tmp_path / f"m{suffix}").read_bytes()
    (tmp_path / f"cut{suffix}").write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="truncated or damaged"):
        rnnport.read(tmp_path / f"cut{suffix}")


def test_written_files_get_the_usual_permissions(tmp_path: Path) -> None:
    import os
    import stat

    umask = os.umask(0o022)
    try:
        model = RNN.random(Spec("lstm", 3, 4))
        rnnport.write(model, "npz", path=tmp_path / "m.npz")
        rnnport.write(model, "tf1", path=tmp_path / "m.ckpt")
        for name in ("m.npz", "m.ckpt.index", "m.ckpt.data-00000-of-00001"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    finally:
        os.umask(umask)


def test_damaged_headers_and_archives_are_format_errors(tmp_path: Path) -> None:
    import json
    import zipfile

    np.savez(tmp_path / "parts.npz", rnnport=np.array(json.dumps({"version": 1, "parts": 5})))
    with pytest.raises(FormatError, match="expected a list of one spec per part"):
        rnnport.read(tmp_path / "parts.npz")
    model = RNN.random(Spec("lstm", 3, 4))
    rnnport.write(model, "keras", path=tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as source, \
            zipfile.ZipFile(tmp_path / "odd.keras", "w") as target:
        for info in source.infolist():
            target.writestr(info, source.read(info.filename))
    data = bytearray((tmp_path / "odd.keras").read_bytes())
    for offset in range(len(data) - 4):  # every member's compression method: 99, unknown
        if data[offset:offset + 4] in (b"PK\x03\x04", b"PK\x01\x02"):
            at = offset + (8 if data[offset + 2] == 3 else 10)
            data[at:at + 2] = (99).to_bytes(2, "little")
    (tmp_path / "odd.keras").write_bytes(bytes(data))
    with pytest.raises(FormatError, match="cannot read|cannot be read|compressed with zip method 99"):
        rnnport.read(tmp_path / "odd.keras")
