"""Frozen TensorFlow graphs: the golden graphs TensorFlow 2.21 froze read without TensorFlow
and compute TensorFlow's own ``y``; damaged graphs are rnnport errors; a TF1 checkpoint
holding a CudnnRNN opaque buffer reads; rnnport's written graphs run in real TensorFlow."""

from __future__ import annotations

import dataclasses
import json
import re
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


# -- step-graph constants: where TensorFlow's own graphs put them ------------------------------


def _rewrite(graph: tfproto.GraphDef, nodes: Any = None, functions: Any = None,
             library: bool = True) -> tfproto.GraphDef:
    """``graph`` with ``nodes(node)`` applied to its own nodes and ``functions(node)`` to its
    functions' nodes (each returns the node to keep); ``library=False`` drops the library."""
    keep = graph.node if nodes is None else tuple(nodes(node) for node in graph.node)
    bodies = tuple(dataclasses.replace(function, node_def=tuple(
        functions(node) for node in function.node_def)) if functions else function
        for function in graph.library.function) if library else ()
    return dataclasses.replace(graph, node=keep,
                               library=tfproto.FunctionDefLibrary(bodies))


def _unscoped(node: tfproto.NodeDef) -> tfproto.NodeDef:
    """A function node named as TensorFlow names them: the cell's own scope only
    (``lstm_cell/add``), its inputs too."""
    def strip(name: str) -> str:
        return re.sub(r"^(?:[^/^]+/)*(lstm_cell/)", r"\1", name.lstrip("^"))
    return dataclasses.replace(node, name=strip(node.name),
                               input=tuple(strip(ref) for ref in node.input))


def _model(bidirectional: bool = False, seed: int = 11) -> rnnport.RNN:
    spec = rnnport.Spec("lstm", 3, 4, bidirectional=bidirectional, cell_clip=0.5)
    return rnnport.RNN.random(spec, seed=seed, dtype=np.float32)


def test_basic_lstm_cells_capital_add_gives_the_forget_bias() -> None:
    """BasicLSTMCell names its forget-bias add ``basic_lstm_cell/Add``: found by structure."""
    model = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4), seed=12, dtype=np.float32)
    graph = tfproto.decode_graph_def(bytes(rnnport.write(model, FMT, forget_bias=0.25)))
    renamed = _rewrite(graph, functions=lambda node: dataclasses.replace(
        node, name=node.name[:-len("/add")] + "/Add") if node.name.endswith("lstm_cell/add")
        else dataclasses.replace(node, input=tuple(
            ref.replace("lstm_cell/add:", "lstm_cell/Add:") for ref in node.input)))
    assert any(node.name.endswith("/Add") for _, node in renamed.all_nodes())
    back = rnnport.read(renamed, FMT)
    assert back == rnnport.read(graph, FMT)
    assert back != rnnport.read(graph, FMT, forget_bias=1.0)


def test_bidirectional_steps_named_without_their_scope_give_forget_bias_and_clip() -> None:
    """bidirectional_dynamic_rnn's While bodies name their nodes ``lstm_cell/add``: the
    calling While's scope says which cell each belongs to."""
    model = _model(bidirectional=True)
    graph = tfproto.decode_graph_def(bytes(rnnport.write(model, FMT, forget_bias=0.2)))
    unscoped = _rewrite(graph, functions=_unscoped)
    assert any(node.name == "lstm_cell/add" for _, node in unscoped.all_nodes())
    back = rnnport.read(unscoped, FMT)
    assert back.spec.cell_clip == 0.5
    assert back == rnnport.read(graph, FMT)
    notes = get(FMT).source_notes(unscoped)
    assert any("forget_bias=0.2" in note for note in notes), notes


def _two_networks_sharing_a_body() -> tfproto.GraphDef:
    """An encoder and a decoder LSTM whose While nodes call one body function: no scope
    tells whose its ``lstm_cell/add`` is."""
    one = tfproto.decode_graph_def(bytes(rnnport.write(_model(seed=13), FMT, scope="encoder",
                                                        forget_bias=0.3)))
    two = tfproto.decode_graph_def(bytes(rnnport.write(_model(seed=14), FMT, scope="decoder",
                                                        forget_bias=0.3)))
    body = {key: one_node.attr[key] for one_node in one.node if one_node.op == "While"
            for key in ("body", "cond")}
    names = {node.name for node in one.node}
    nodes = one.node + tuple(
        dataclasses.replace(node, attr={**node.attr, **body}) if node.op == "While" else node
        for node in two.node if node.name not in names)
    both = dataclasses.replace(one, node=nodes)
    return _rewrite(both, functions=_unscoped)


def test_a_step_no_cell_can_claim_asks_for_the_options() -> None:
    both = _two_networks_sharing_a_body()
    with pytest.raises(RnnportError, match=r"cannot attribute to one cell.*forget_bias= and "
                                           r"cell_clip="):
        rnnport.read(both, FMT, scope="encoder")
    model = rnnport.read(both, FMT, scope="encoder", forget_bias=0.3, cell_clip=0.5)
    assert model.spec.cell_clip == 0.5


def test_a_graph_without_its_step_functions_is_refused_unless_the_options_are_given() -> None:
    """remove_training_nodes drops the library: the While's body, and its constants, are gone."""
    model = _model()
    graph = tfproto.decode_graph_def(bytes(rnnport.write(model, FMT, forget_bias=0.3)))
    bare = _rewrite(graph, library=False)
    with pytest.raises(RnnportError, match=r"node 'rnn/lstm_cell/while' \(While\) calls body "
                                           r"'rnn_lstm_cell_while_body'.*the graph is incomplete: "
                                           r"its cell step, which holds forget_bias and cell_clip, "
                                           r"is missing; pass forget_bias= and cell_clip="):
        rnnport.read(bare, FMT)
    assert rnnport.read(bare, FMT, forget_bias=0.3, cell_clip=0.5) == rnnport.read(graph, FMT)


def test_grapplers_symbolic_sizes_in_attribute_shapes_are_unknown() -> None:
    from rnnport.io import tfproto_encode as encode

    node = encode.node_def("t", "Transpose", ["x", "perm"], {
        "_output_shapes": encode._bytes_field(1, encode._bytes_field(
            7, encode.shape_proto([-2, -8, 3])))})
    decoded = tfproto.decode_node_def(node)
    shapes = decoded.attr["_output_shapes"].value
    assert isinstance(shapes, tfproto.AttrList) and shapes.shape == ((-1, -1, 3),)
    assert tfproto.decode_shape(encode.shape_proto([-2, 3])) == (-1, 3)
    tensor = encode._varint_field(1, tfproto.DT_FLOAT) + encode._bytes_field(
        2, encode.shape_proto([-2, 3]))
    with pytest.raises(RnnportError, match="expected a fully known shape|at least 0"):
        tfproto.decode_tensor(tensor)


def test_a_keras_layer_frozen_from_a_tf2_function_points_to_tf2() -> None:
    from rnnport.io import tfproto_encode as encode

    kernel = np.zeros((3, 16), np.float32)
    data = encode.graph_def([
        encode.node_def("x", "Placeholder", [], {"dtype": encode.attr_type(kernel.dtype)}),
        encode.node_def("sequential/lstm/Read/ReadVariableOp/resource", "Const", [], {
            "dtype": encode.attr_type(kernel.dtype), "value": encode.attr_tensor(kernel)})])
    with pytest.raises(RnnportError, match=r"Keras layer frozen from a TF2 tf\.function.*"
                                           r"fmt='tf2'"):
        rnnport.read(data, FMT)


_TF1_GRAPHS = r"""
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.grappler import tf_optimizer
tf.compat.v1.disable_eager_execution()
rc = tf.compat.v1.nn.rnn_cell
rng = np.random.default_rng(0)
x_value = rng.uniform(-1, 1, (2, 5, 3)).astype(np.float32)
np.save("x.npy", x_value)

def freeze(name, build, remove=False, grappler=False):
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None, None, 3], name="x")
        y = tf.identity(build(x), name="y")
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.initializers.global_variables())
            for variable in tf.compat.v1.global_variables():
                session.run(variable.assign(rng.uniform(-0.7, 0.7, variable.shape)))
            frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
                session, graph.as_graph_def(), ["y"])
            np.save(name + ".npy", session.run(y, {x: x_value}))
    if remove:
        frozen = tf.compat.v1.graph_util.remove_training_nodes(frozen)
    if grappler:
        with tf.Graph().as_default() as graph:
            tf.compat.v1.import_graph_def(frozen, name="")
            meta = tf.compat.v1.train.export_meta_graph(graph=graph)
            meta.collection_def["train_op"].node_list.value.append("y")
            config = config_pb2.ConfigProto()
            rewrite = config.graph_options.rewrite_options
            rewrite.min_graph_nodes = -1
            rewrite.optimizers.extend(["constfold", "arithmetic", "function", "loop",
                                       "dependency", "remap"])
            frozen = tf_optimizer.OptimizeGraph(config, meta)
    open(name + ".pb", "wb").write(frozen.SerializeToString())

def dynamic(cell):
    return lambda x: tf.compat.v1.nn.dynamic_rnn(cell(), x, dtype=tf.float32)[0]

def lstm():
    return rc.LSTMCell(4, forget_bias=0.3, cell_clip=0.5, use_peepholes=True)

def bidirectional(x):
    out, _ = tf.compat.v1.nn.bidirectional_dynamic_rnn(
        rc.LSTMCell(4, forget_bias=0.2, cell_clip=0.6), rc.LSTMCell(4, forget_bias=0.2,
        cell_clip=0.6), x, dtype=tf.float32)
    return tf.concat(out, 2)

def two(x):
    with tf.compat.v1.variable_scope("encoder"):
        one = tf.compat.v1.nn.dynamic_rnn(lstm(), x, dtype=tf.float32)[0]
    with tf.compat.v1.variable_scope("decoder"):
        other = tf.compat.v1.nn.dynamic_rnn(rc.LSTMCell(4), x, dtype=tf.float32)[0]
    return tf.concat([one, other], 2)

freeze("basic_lstm", dynamic(lambda: rc.BasicLSTMCell(4, forget_bias=0.25)))
freeze("bidirectional", bidirectional)
freeze("two", two)
freeze("removed", dynamic(lstm), remove=True)
freeze("grappler", dynamic(lstm), grappler=True)

"""

_KERAS_TF2 = r"""
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf, tf_keras
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
model = tf_keras.Sequential([tf_keras.Input((None, 3)),
                             tf_keras.layers.LSTM(4, return_sequences=True)])
function = tf.function(lambda x: model(x)).get_concrete_function(
    tf.TensorSpec([None, None, 3], tf.float32))
graph = convert_variables_to_constants_v2(function).graph.as_graph_def()
open("keras.pb", "wb").write(graph.SerializeToString())
"""


@pytest.mark.slow
def test_tensorflows_own_graphs_give_forget_bias_and_clip(tmp_path: Path) -> None:
    """BasicLSTMCell, bidirectional_dynamic_rnn, two networks, remove_training_nodes and a
    grappler-optimized graph, frozen by TensorFlow: rnnport computes TensorFlow's y, or says
    what it needs."""
    subprocess.run([sys.executable, "-c", _TF1_GRAPHS], cwd=tmp_path, check=True)
    subprocess.run([sys.executable, "-c", _KERAS_TF2], cwd=tmp_path, check=True)
    x = np.load(tmp_path / "x.npy")

    def check(name: str, **options: Any) -> None:
        model = rnnport.read(tmp_path / f"{name}.pb", FMT, **options)
        expected = np.load(tmp_path / f"{name}.npy")
        np.testing.assert_allclose(np.asarray(model.forward(x)[0]), expected[..., :model.spec
                                   .output_size * model.spec.num_directions], atol=1e-5,
                                   rtol=0)

    check("basic_lstm")
    check("bidirectional")
    check("two", scope="encoder")
    assert rnnport.read(tmp_path / "two.pb", FMT, scope="decoder").spec.cell_clip is None
    with pytest.raises(RnnportError, match="the graph is incomplete.*pass forget_bias= and "
                                           "cell_clip="):
        rnnport.read(tmp_path / "removed.pb", FMT)
    check("removed", forget_bias=0.3, cell_clip=0.5)
    check("grappler")
    with pytest.raises(RnnportError, match="fmt='tf2'"):
        rnnport.read(tmp_path / "keras.pb", FMT)


def test_function_scopes_settle_each_function_once_however_deep_the_nesting():
    """A library nesting 3000 functions, listed innermost first, gets every scope (no pass
    per level), and a cycle of functions calling each other gets none."""
    from types import SimpleNamespace

    from rnnport.formats.tfgraph import _scopes

    depth = 3000
    calls: dict[str, list[tuple[str, Any]]] = {
        f"f{level}": [(f"f{level - 1}" if level else "", SimpleNamespace(name="while"))]
        for level in reversed(range(depth))}
    calls["a"] = [("b", SimpleNamespace(name="while"))]
    calls["b"] = [("a", SimpleNamespace(name="while"))]
    scopes = _scopes(calls)
    assert scopes[f"f{depth - 1}"] == "/".join(["while"] * depth)
    assert "a" not in scopes and "b" not in scopes
