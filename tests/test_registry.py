"""Every registered format declares the protocol, and the registry is a package too."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rnnport
from rnnport.formats import FEATURE_CODES, get
from rnnport.formats._protocol import BIAS_KINDS, Format, Suffix
from rnnport.spec import Spec


@pytest.mark.parametrize("name", rnnport.formats())
def test_every_format_declares_the_protocol(name: str) -> None:
    declared = get(name)
    assert isinstance(declared, Format) and declared.name == name
    for verb in ("sniff", "reader", "writer", "counter", "read_options_for",
                 "write_options_for", "output_files", "input_files", "explain_arrays"):
        assert callable(getattr(declared, verb)), f"{name}.{verb}"
    for options in (declared.read_options, declared.write_options, declared.features,
                    declared.one_bias):
        assert isinstance(options, frozenset)
    assert declared.features <= set(FEATURE_CODES) and declared.one_bias <= set(BIAS_KINDS)
    assert all(isinstance(s, Suffix) and s.text.startswith(".") and s.what
               for s in declared.suffixes)
    assert declared.sniff(object()) is False
    for spec in (Spec("lstm", 2, 3), Spec("rnn_relu", 2, 3, bias=False)):
        assert set(declared.read_options_for(spec)) <= declared.read_options
        assert set(declared.write_options_for(spec)) <= declared.write_options


def test_a_module_without_a_declaration_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from rnnport import formats

    monkeypatch.setattr(formats, "_REGISTRY", dict(formats._REGISTRY))
    formats.register("nothing", "rnnport.errors", "a module that declares no format")
    with pytest.raises(rnnport.FormatError, match="declares no FORMAT named 'nothing'"):
        formats.get("nothing")
    with pytest.raises(rnnport.FormatError, match="expected a new identifier"):
        formats.register("cudnn", "rnnport.formats.cudnn", "again")


def test_import_rnnport_formats_is_the_package_and_still_callable() -> None:
    script = ("import rnnport.formats as f, rnnport\n"
              "assert f is rnnport.formats and f.get('cudnn').name == 'cudnn'\n"
              "assert rnnport.formats() == f.formats() and callable(f)\n"
              "from rnnport import formats\n"
              "print(formats())")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == str(rnnport.formats())


def test_a_format_declaration_checks_what_its_verbs_are_given() -> None:
    """Called directly, not only through rnnport.read/write: nothing is dropped silently."""
    from rnnport import RNN, Spec

    reset_before = RNN.random(Spec("gru", 2, 3, reset_after=False))
    with pytest.raises(rnnport.UnsupportedFeatureError, match="cudnn format cannot hold a "
                       "reset-before GRU.*Formats that hold it: keras, onnx, npz, tf1, .*"
                       r"\(keras: reset_after=False; onnx: linear_before_reset=0; tf1: GRUCell"):
        get("cudnn").write(reset_before)
    with pytest.raises(rnnport.UnsupportedFeatureError, match="nothing to count"):
        get("torch").param_count(RNN.random(Spec("lstm", 2, 3, peepholes=True)))
    with pytest.raises(rnnport.UnknownOptionError, match="unknown option 'bogus'"):
        get("tf1").read({}, bogus=1)
    with pytest.raises(rnnport.UnknownOptionError, match="unknown option 'bogus'"):
        get("tf1").write(RNN.random(Spec("lstm", 2, 3)), bogus=1)
