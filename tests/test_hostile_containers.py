"""Crafted Flax checkpoints, ``.npz`` archives and TF2 object graphs: what a file can
repeat, nest or share is counted as it is read, a shared array is charged (and decoded)
once, keys mean one thing, and nothing recurses as deep as the file says."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from hostile_cases import deep_call, npy_header

import rnnport
from rnnport import RNN, Spec, corpus
from rnnport.errors import FormatError, LimitError
from rnnport.formats import npz
from rnnport.formats._msgpack import encode_flax
from rnnport.io import archive

# -- Flax ------------------------------------------------------------------------------------


def _cell(inputs: int, hidden: int, seed: int) -> dict[str, Any]:
    """A linen SimpleCell's parameters (random, distinct)."""
    rng = np.random.default_rng(seed)
    return {"i": {"kernel": rng.standard_normal((inputs, hidden)).astype(np.float32),
                  "bias": rng.standard_normal(hidden).astype(np.float32)},
            "h": {"kernel": rng.standard_normal((hidden, hidden)).astype(np.float32)}}


def _checkpoint(tmp_path: Path, tree: Any, name: str = "m.msgpack") -> Path:
    path = tmp_path / name
    path.write_bytes(encode_flax(tree))
    return path


@pytest.mark.parametrize("key", ["²", "x²", "0" * 40 + "7"])
def test_a_scope_of_digits_int_cannot_read_is_a_name(tmp_path: Path, key: str) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` fails: such a scope is a name, sorted as
    text; a number's leading zeros sort as the number."""
    path = _checkpoint(tmp_path, {"params": {key: {"cell": _cell(3, 4, 1)}}})
    assert rnnport.read(path).spec == Spec("rnn_tanh", 3, 4)
    assert [value for value, _ in rnnport.formats.get("flax").networks(path).entries] == \
        [f"{key}/cell"]


def test_a_scope_name_past_any_module_name_is_refused(tmp_path: Path) -> None:
    """5,000 digits: past what ``int`` converts (ValueError), and past any module's name."""
    path = _checkpoint(tmp_path, {"params": {"1" * 5000: {"cell": _cell(3, 4, 1)}}})
    with pytest.raises(FormatError, match=r"holds a scope named with 5,000 characters "
                                          r"\('1111.*expected a Flax module's name"):
        rnnport.read(path)


def test_digits_other_than_ascii_do_not_number_a_scope(tmp_path: Path) -> None:
    """``layers_٣`` is not ``layers_3`` (Python's ``int`` reads ``٣`` as 3; Flax writes ASCII
    numbers only): two layers whose sizes chain either way are not ordered by it."""
    tree = {"params": {"layers_1": {"cell": _cell(4, 4, 1)}, "layers_٣": {"cell": _cell(4, 4, 2)}}}
    path = _checkpoint(tmp_path, tree)
    with pytest.raises(FormatError, match=r"m.msgpack: the scope names of the layers "
                                          r"layers_1/cell, layers_٣/cell do not say the order"):
        rnnport.read(path)
    numbered = _checkpoint(tmp_path, {"params": {"layers_10": {"cell": _cell(4, 4, 1)},
                                                 "layers_9": {"cell": _cell(4, 4, 2)}}}, "n.msgpack")
    assert [layer.params[0][0]["weight_hh"][0, 0] for layer in rnnport.read(numbered).layers()] \
        == [tree["params"]["layers_٣"]["cell"]["h"]["kernel"][0, 0],
            tree["params"]["layers_1"]["cell"]["h"]["kernel"][0, 0]]


def test_two_keys_reading_as_one_string_are_refused(tmp_path: Path) -> None:
    cell = msgpack.packb({"i": {"kernel": 1}}, use_bin_type=True)
    data = b"\x81\xa6params\x82\x01" + cell + b"\xa11" + cell
    path = tmp_path / "twice.msgpack"
    path.write_bytes(data)
    with pytest.raises(FormatError, match=r"twice.msgpack/params/1: two keys read as '1'"):
        rnnport.read(path)


def test_a_tree_nested_to_the_limit_reads_alike_wherever_read_is_called_from(
        tmp_path: Path) -> None:
    """64 levels (the most the msgpack reader takes) walked without recursion: the same
    answer 100 frames below the recursion limit as at the top (the recursive walk took 145)."""
    tree: Any = {"kernel": np.zeros(2, np.float32)}
    for level in range(62):
        tree = {f"s{level}": tree}
    path = _checkpoint(tmp_path, {"params": tree})
    with pytest.raises(FormatError) as top:
        rnnport.read(path, fmt="flax")
    with pytest.raises(FormatError) as deep:
        deep_call(100, lambda: rnnport.read(path, fmt="flax"))
    assert str(deep.value) == str(top.value)
    assert "no Flax recurrent cell in the tree" in str(top.value)
    nested = {"params": {"cell": _cell(3, 4, 5)}}
    for level in range(60):
        nested = {f"s{level}": nested}
    deeper = _checkpoint(tmp_path, nested, "deep.msgpack")
    assert deep_call(100, lambda: rnnport.read(deeper)) == rnnport.read(deeper)
    assert rnnport.read(deeper) == RNN(Spec("rnn_tanh", 3, 4), rnnport.read(deeper).params)


# -- .npz archives -----------------------------------------------------------------------------


def test_an_npz_whose_members_overlap_is_refused_before_reading(tmp_path: Path) -> None:
    """Forty stored members, each holding the ones after it and the 1 MB they share: 40 MB
    read from a 1 MB file (an rnnport model read, and a ``rnnport run`` input alike)."""
    from hostile_cases import overlapping_npz

    path = tmp_path / "overlap.npz"
    path.write_bytes(overlapping_npz(40, 1 << 20))
    message = (r"overlap.npz: archive members 'x0.npy' \(bytes 0 to 1,055,166\) and 'x1.npy' "
               r"\(from byte 164\) overlap; expected each member's bytes apart")
    with pytest.raises(FormatError, match=message):
        rnnport.read(path)
    model = tmp_path / "m.npz"
    rnnport.write(RNN.random(Spec("gru", 3, 4), seed=1), "npz", path=model)
    summary = corpus.run(model, [path], tmp_path / "out", jobs=0)
    assert summary.failed == 1 and "overlap; expected each member's bytes apart" in \
        (summary.results[0].error or "")


def test_a_text_array_past_unicode_is_refused(tmp_path: Path) -> None:
    """An .npy text array holding U+110000: NumPy makes a str Python cannot index."""
    header = npy_header((1,), "<U3")
    data = header + np.array([0x7B, 0x110000, 0x7D], "<u4").tobytes()
    with pytest.raises(FormatError, match="a text array holding a code point past U[+]10FFFF"):
        archive.read_npy(data, "x.npy")
    path = tmp_path / "text.npz"
    with zipfile.ZipFile(path, "w") as written:
        written.writestr("rnnport.npy", data)
    with pytest.raises(FormatError, match=r"text.npz, rnnport.npy: a text array holding"):
        rnnport.read(path, fmt="npz")


def test_what_npz_members_inflate_to_is_charged_before_any_is_read(tmp_path: Path) -> None:
    """32 MiB of zeros deflate to 32 KB: past 4 × (the file + 4 MiB), refused unread."""
    path = tmp_path / "zeros.npz"
    np.savez_compressed(path, x=np.zeros(32 << 20, np.uint8))
    reads = []
    original = archive.read_member
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(archive, "read_member", lambda *a, **k: reads.append(a[1]) or original(*a, **k))
        patch.setattr(npz, "read_member", archive.read_member)
        patch.setattr(corpus, "read_member", archive.read_member)
        with pytest.raises(LimitError) as error:
            rnnport.read(path, fmt="npz")
        assert error.value.limit == "expansion" and reads == []
        assert "its 1 member(s) inflate to 33,554,560 bytes" in str(error.value)
        model = tmp_path / "m.npz"
        rnnport.write(RNN.random(Spec("gru", 3, 4), seed=1), "npz", path=model)
        summary = corpus.run(model, [path], tmp_path / "out", jobs=0)
        assert summary.failed == 1 and "inflate to 33,554,560 bytes" in \
            (summary.results[0].error or "")
        assert "x.npy" not in reads


# -- TF2 object graphs -----------------------------------------------------------------------


def test_an_object_graph_that_is_one_long_chain_stops_at_the_expansion_limit(
        tmp_path: Path) -> None:
    """6,000 objects in a chain (a 70 KB checkpoint) make 36 million characters of paths,
    each path its parent's and one more piece: refused as they pass the limit."""
    from hostile_cases import tf2_chain

    tf2_chain(tmp_path / "ckpt", 6000)
    with pytest.raises(LimitError) as error:
        rnnport.read(tmp_path / "ckpt", fmt="tf2")
    assert error.value.limit == "expansion"
    assert "its object graph's paths (each repeating its parent's) would take more than" \
        in str(error.value)
    tf2_chain(tmp_path / "short", 100)
    with pytest.raises(FormatError, match="no recurrent layer found"):
        rnnport.read(tmp_path / "short", fmt="tf2")


def test_layers_naming_one_stored_tensor_are_charged_each_and_read_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """300 layers naming the same 132 KB of tensors would build 40 MB: refused before a
    tensor is read. Three such layers read, each stored tensor read once."""
    from hostile_cases import tf2_shared_layers

    from rnnport.io import tensorbundle

    reads: list[str] = []
    original = tensorbundle.Bundle.read
    monkeypatch.setattr(tensorbundle.Bundle, "read",
                        lambda self, name: reads.append(name) or original(self, name))
    tf2_shared_layers(tmp_path / "many", 300, 64)
    with pytest.raises(LimitError) as error:
        rnnport.read(tmp_path / "many", fmt="tf2")
    assert error.value.limit == "expansion"
    assert "the 300 layer(s) read hold 39,628,800 bytes of arrays" in str(error.value)
    assert not [name for name in reads if name.startswith("shared/")]
    tf2_shared_layers(tmp_path / "few", 3, 64)
    reads.clear()
    model = rnnport.read(tmp_path / "few", fmt="tf2")
    assert len(model.layers()) == 3 and model.layers()[0] == model.layers()[2]
    assert sorted(name for name in reads if name.startswith("shared/")) == [
        f"shared/{name}/.ATTRIBUTES/VARIABLE_VALUE" for name in ("bias", "kernel",
                                                                  "recurrent_kernel")]


def test_a_layer_numbered_with_other_digits_is_not_numbered(tmp_path: Path) -> None:
    """``layer_with_weights-١`` (Arabic-Indic one) is not layer 1: Keras writes ASCII."""
    from hostile_cases import tf2_checkpoint

    from rnnport.formats.tf2.writer import _Node

    rng = np.random.default_rng(4)
    root, arrays = _Node(), {}
    for index, name in enumerate(("layer_with_weights-0", "layer_with_weights-١")):
        children = []
        for variable, shape in (("kernel", (4, 16)), ("recurrent_kernel", (4, 16)),
                                ("bias", (16,))):
            key = f"{index}/{variable}/.ATTRIBUTES/VARIABLE_VALUE"
            arrays[key] = rng.standard_normal(shape).astype(np.float32)
            children.append((variable, _Node(variable=(variable, key))))
        root.children.append((name, _Node([("cell", _Node(children))])))
    tf2_checkpoint(tmp_path / "ckpt", root, arrays)
    with pytest.raises(rnnport.errors.AmbiguousSourceError, match="holds 2 separate recurrent "
                                                                   "stacks"):
        rnnport.read(tmp_path / "ckpt", fmt="tf2")
    assert rnnport.read(tmp_path / "ckpt", fmt="tf2", layer="layer_with_weights-١").spec == \
        Spec("lstm", 4, 4)


def test_keras_metadata_nested_past_the_limit_is_a_format_error(tmp_path: Path) -> None:
    """keras_metadata.pb's JSON, 100,000 levels deep: json.loads raised RecursionError."""
    import shutil

    from rnnport.io._proto import key, varint

    folder = tmp_path / "saved"
    shutil.copytree(Path(__file__).parent / "golden" / "tf2" / "tf2_savedmodel_keras_lstm" /
                    "saved_model", folder)
    metadata = b"[" * 100_000
    node = key(3, 2) + varint(4) + b"root" + key(5, 2) + varint(len(metadata)) + metadata
    (folder / "keras_metadata.pb").write_bytes(key(1, 2) + varint(len(node)) + node)
    with pytest.raises(FormatError, match=r"keras_metadata.pb: node 'root' holds metadata that "
                                          r"is not JSON \(arrays and objects nested more than 64"):
        rnnport.read(folder, fmt="tf2")
