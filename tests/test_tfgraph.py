"""Frozen TensorFlow graphs: the golden graphs TensorFlow 2.21 froze read without TensorFlow
and compute TensorFlow's own ``y``; damaged graphs are rnnport errors; a TF1 checkpoint
holding a CudnnRNN opaque buffer reads; rnnport's written graphs run in real TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport.errors import AmbiguousSourceError, RnnportError, UnsupportedFeatureError
from rnnport.formats import get
from rnnport.io import tensorbundle, tfproto

GOLDEN = Path(__file__).parent / "golden" / "tf2"
FMT = "tfgraph"


def _frozen_cases() -> list[dict[str, Any]]:
    manifest = json.loads((GOLDEN / "MANIFEST.json").read_text())
    return [case for case in manifest["cases"] if case["kind"] == "frozen_graph"]


CASES = _frozen_cases()


def test_the_manifest_has_frozen_graphs() -> None:
    assert len(CASES) >= 10
    assert {"tf2_frozen_cudnn_lstm", "tf2_frozen_block_lstm_v2"} <= {c["name"] for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_golden_frozen_graph_reads_and_computes_tensorflows_y(case: dict[str, Any]) -> None:
    data = np.load(GOLDEN / case["npz"], allow_pickle=False)
    meta = json.loads(str(data["meta"]))
    model = rnnport.read(GOLDEN / case["source"], FMT)
    x = data["x"]
    if meta["time_major"]:
        x = np.swapaxes(x, 0, 1)
    y, _ = model.forward(x)
    y = np.asarray(y)
    if meta["time_major"]:
        y = np.swapaxes(y, 0, 1)
    np.testing.assert_allclose(y, data["y"], atol=meta["tolerance"], rtol=0)


def test_clip_and_forget_bias_come_from_the_graph() -> None:
    model = rnnport.read(GOLDEN / "tf2_frozen_lstm_peephole_proj_clip/frozen_graph.pb", FMT)
    assert model.spec.cell_clip == 0.5 and model.spec.peepholes and model.spec.proj_size == 3
    notes = get(FMT).source_notes(GOLDEN / "tf2_frozen_lstm_peephole_proj_clip/frozen_graph.pb")
    assert any("forget_bias=1.0" in note and "cell_clip=0.5" in note for note in notes), notes
    block = rnnport.read(GOLDEN / "tf2_frozen_block_lstm/frozen_graph.pb", FMT)
    assert block.spec.cell_clip == 0.5
    assert np.all(block.params[0][0]["bias_ih"][4:8] == np.float32(0.7))  # forget block


def test_a_graph_without_its_clip_const_is_a_different_network() -> None:
    """Swapping the forget bias Const for another value changes the output: it is read."""
    path = GOLDEN / "tf2_frozen_multi_rnn_lstm/frozen_graph.pb"
    one = rnnport.read(path, FMT)
    other = rnnport.read(path, FMT, forget_bias=0.0)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, one.input_size)).astype(np.float32)
    assert not np.allclose(one.forward(x)[0], other.forward(x)[0])


def test_cudnn_node_ambiguity_is_listed_and_settled_by_options() -> None:
    path = GOLDEN / "tf2_frozen_cudnn_lstm/frozen_graph.pb"
    graph = tfproto.read_graph_def(path)
    # Without the zeros' Pack dims and the input's shape, the buffer alone is ambiguous.
    nodes = [node for node in graph.node if node.name not in ("cudnn_lstm/stack/0",
                                                             "cudnn_lstm/stack/2")]
    nodes = [tfproto.NodeDef(n.name, n.op, n.input, n.device,
                             {k: v for k, v in n.attr.items() if k != "shape"})
             if n.op == "Placeholder" else n for n in nodes]
    bare = tfproto.GraphDef(tuple(nodes), graph.versions, graph.library, graph.version)
    with pytest.raises(AmbiguousSourceError, match="hidden_size="):
        rnnport.read(bare, FMT)
    model = rnnport.read(bare, FMT, hidden_size=4, num_layers=1)
    assert model.spec.input_size == 3


def test_skip_input_is_refused_by_name() -> None:
    path = GOLDEN / "tf2_frozen_cudnn_lstm/frozen_graph.pb"
    graph = tfproto.read_graph_def(path)
    nodes = []
    for node in graph.node:
        if node.op == "CudnnRNNV3":
            attrs = dict(node.attr)
            attrs["input_mode"] = tfproto.AttrValue("s", b"skip_input")
            node = tfproto.NodeDef(node.name, node.op, node.input, node.device, attrs)
        nodes.append(node)
    with pytest.raises(UnsupportedFeatureError, match="skip_input"):
        rnnport.read(tfproto.GraphDef(tuple(nodes), graph.versions), FMT)


def test_several_networks_are_listed_and_picked() -> None:
    lstm = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4), seed=1, dtype=np.float32)
    gru = rnnport.RNN.random(rnnport.Spec("gru", 3, 2), seed=2, dtype=np.float32)
    one = tfproto.decode_graph_def(rnnport.write(lstm, FMT, scope="encoder").serialized)
    two = tfproto.decode_graph_def(rnnport.write(gru, FMT, scope="decoder").serialized)
    names = {node.name for node in one.node}
    both = tfproto.GraphDef(one.node + tuple(n for n in two.node if n.name not in names),
                            one.versions, tfproto.FunctionDefLibrary(
                                one.library.function + two.library.function))
    with pytest.raises(AmbiguousSourceError, match="scope='decoder'"):
        rnnport.read(both, FMT)
    assert rnnport.read(both, FMT, scope="decoder") == rnnport.read(
        rnnport.write(gru, FMT, scope="decoder"), FMT)
    choices = get(FMT).networks(both)  # type: ignore[misc]
    assert choices.option == "scope" and {value for value, _ in choices.entries} == {
        "encoder", "decoder"}


@pytest.mark.parametrize("damage", ["truncated", "wire_type", "short_content"])
def test_damaged_graphs_are_rnnport_errors(damage: str, tmp_path: Path) -> None:
    data = (GOLDEN / "tf2_frozen_gru_cell/frozen_graph.pb").read_bytes()
    if damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "wire_type":
        data = bytes([0x0D]) + data[1:]  # field 1 (node) as a 32-bit value
    else:
        model = rnnport.RNN.random(rnnport.Spec("gru", 3, 2), seed=3, dtype=np.float32)
        data = bytes(rnnport.write(model, FMT))
        # Cut 4 bytes out of a weight's tensor_content, keeping the lengths valid.
        graph = tfproto.decode_graph_def(data)
        const = next(n for n in graph.node if n.op == "Const" and n.name.endswith("kernel"))
        value = const.attr["value"].value
        assert isinstance(value, tfproto.TensorValue)
        raw = value.numpy().astype("<f4").tobytes()
        start = data.index(raw)
        data = _shorten(data, start, len(raw))
    path = tmp_path / "damaged.pb"
    path.write_bytes(data)
    with pytest.raises(RnnportError):
        rnnport.read(path, FMT)


def _shorten(data: bytes, start: int, length: int) -> bytes:
    """``data`` with the 4 last bytes of the field at ``start`` (``length`` long) removed and
    every enclosing length prefix fixed: re-encode the messages around it by hand."""
    from rnnport.io._proto import read_varint, varint

    def rewrite(message: bytes, offset: int) -> bytes:
        out, position = bytearray(), 0
        while position < len(message):
            tag, after_tag = read_varint(message, position)
            if tag & 7 != 2:
                _, end = read_varint(message, after_tag) if tag & 7 == 0 else (
                    0, after_tag + (8 if tag & 7 == 1 else 4))
                out += message[position:end]
                position = end
                continue
            size, body = read_varint(message, after_tag)
            piece = message[body:body + size]
            absolute = offset + body
            if absolute == start and size == length:
                piece = piece[:-4]
            elif absolute <= start < absolute + size:
                piece = rewrite(piece, absolute)
            out += message[position:after_tag] + varint(len(piece)) + piece
            position = body + size
        return bytes(out)

    return rewrite(data, 0)


def test_reading_imports_no_tensorflow() -> None:
    code = (
        "import sys, rnnport, numpy as np\n"
        f"m = rnnport.read({str(GOLDEN / 'tf2_frozen_lstm_cell_cfv2/frozen_graph.pb')!r}, "
        f"{FMT!r})\n"
        f"rnnport.read({str(GOLDEN / 'tf2_frozen_cudnn_lstm/frozen_graph.pb')!r}, {FMT!r})\n"
        "g = rnnport.write(m, 'tfgraph'); rnnport.read(g, 'tfgraph')\n"
        "bad = [n for n in sys.modules if n.split('.')[0] in ('tensorflow', 'tf_keras', "
        "'keras', 'torch')]\n"
        "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tf1_checkpoint_with_an_opaque_cudnn_buffer(tmp_path: Path) -> None:
    model = rnnport.RNN.random(rnnport.Spec("gru", 5, 3, num_layers=2, bidirectional=True),
                               seed=7, dtype=np.float32)
    prefix = tmp_path / "model.ckpt"
    tensorbundle.write_bundle(prefix, {"cudnn_gru/opaque_kernel": rnnport.write(model, "cudnn"),
                                       "global_step": np.array(10, dtype=np.int64)})
    with pytest.raises(AmbiguousSourceError, match="num_layers="):
        rnnport.read(prefix, "tf1")
    back = rnnport.read(prefix, "tf1", hidden_size=3, num_layers=2, bidirectional=True)
    assert back == model
    listed = get("tf1").networks(prefix)  # type: ignore[misc]
    assert [value for value, _ in listed.entries] == ["cudnn_gru"]
    assert rnnport.read(prefix, "tf1", scope="cudnn_gru", hidden_size=3, num_layers=2,
                        input_size=5) == model
    # A custom layer name does not say the cell: rnn_mode= does.
    renamed = tmp_path / "renamed"
    tensorbundle.write_bundle(renamed, {"encoder/opaque_kernel": rnnport.write(model, "cudnn")})
    with pytest.raises(RnnportError, match="rnn_mode="):
        rnnport.read(renamed, "tf1", hidden_size=3, num_layers=2, bidirectional=True)
    assert rnnport.read(renamed, "tf1", rnn_mode="gru", hidden_size=3, num_layers=2,
                        bidirectional=True) == model


def test_written_graph_reads_back_exactly() -> None:
    spec = rnnport.Spec("lstm", 3, 4, num_layers=2, bidirectional=True, peepholes=True,
                        proj_size=2, cell_clip=0.5)
    model = rnnport.RNN.random(spec, seed=4, dtype=np.float64)
    back = rnnport.read(rnnport.write(model, FMT), FMT)
    again = rnnport.read(rnnport.write(back, FMT), FMT)
    assert back.spec == spec and again == back


WRITTEN = [
    rnnport.Spec("lstm", 3, 4),
    rnnport.Spec("lstm", 3, 4, num_layers=2, bidirectional=True, peepholes=True, proj_size=2,
                 cell_clip=0.5),
    rnnport.Spec("gru", 3, 4, reset_after=False, num_layers=2),
    rnnport.Spec("gru", 3, 3, bidirectional=True),
    rnnport.Spec("rnn_relu", 3, 2, num_layers=2),
    rnnport.Spec("rnn_tanh", 3, 2, bias=False),
]


@pytest.mark.slow
@pytest.mark.parametrize("spec", WRITTEN, ids=lambda spec: spec.describe())
def test_written_graph_runs_in_tensorflow(spec: rnnport.Spec, tmp_path: Path) -> None:
    model = rnnport.RNN.random(spec, seed=5, dtype=np.float32)
    path = tmp_path / "m.pb"
    rnnport.write(model, FMT, path=path)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5, spec.input_size)).astype(np.float32)
    found = get(FMT).framework_forward(path, model, x)  # type: ignore[misc]
    assert not isinstance(found, str), found  # TensorFlow missing must fail, not skip
    np.testing.assert_allclose(found[1], model.forward(x)[0], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_written_graph_gives_tensorflow_states(tmp_path: Path) -> None:
    """h_n and c_n, fetched by name from the imported graph."""
    spec = rnnport.Spec("lstm", 3, 4, num_layers=2)
    model = rnnport.RNN.random(spec, seed=6, dtype=np.float32)
    path = tmp_path / "m.pb"
    rnnport.write(model, FMT, path=path)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = (
        "import numpy as np, tensorflow as tf\n"
        "g = tf.compat.v1.GraphDef(); g.ParseFromString(open('m.pb', 'rb').read())\n"
        "with tf.Graph().as_default() as graph:\n"
        "    tf.compat.v1.import_graph_def(g, name='')\n"
        "    with tf.compat.v1.Session(graph=graph) as s:\n"
        "        y, h, c = s.run(['y:0', 'h_n:0', 'c_n:0'], {'x:0': np.load('x.npy')})\n"
        "np.save('h.npy', h); np.save('c.npy', c)\n")
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True)
    _, (h_n, c_n) = model.forward(x)
    np.testing.assert_allclose(np.load(tmp_path / "h.npy"), h_n, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), c_n, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_golden_graph_runs_through_framework_forward() -> None:
    path = GOLDEN / "tf2_frozen_block_lstm/frozen_graph.pb"
    data = np.load(GOLDEN / "tf2_frozen_block_lstm.npz", allow_pickle=False)
    model = rnnport.read(path, FMT)
    x = np.swapaxes(data["x"], 0, 1)
    found = get(FMT).framework_forward(path, model, x)  # type: ignore[misc]
    assert not isinstance(found, str), found
    np.testing.assert_allclose(found[1], model.forward(x)[0], atol=1e-5, rtol=0)
