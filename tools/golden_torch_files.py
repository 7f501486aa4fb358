"""Generate golden PyTorch files as hubs, trainers and exporters write them.

    .venv/bin/python tools/golden_torch_files.py [--out tests/golden/torch_files] [--case NAME ...] [--list]

Every file here is written by the real tools (PyTorch 2.13 CPU, Lightning 2.6): ``torch.save``
zips under the names hubs and trainers give them (``pytorch_model.bin``, Lightning's
``epoch=0-step=2.ckpt``, ``checkpoint.pth.tar``, ``.pkl``, a file called ``weights``), the
weights nested as real checkpoints nest them (``state_dict`` with Lightning's ``model.``
prefix, DataParallel's ``module.``, ``model_state``, ``module``, ``net``, nested dicts), a
legacy (pre-1.6) ``torch.save`` pickle, float16 and bfloat16 weights, safetensors as
``save_file`` writes it, and ``torch.export.save`` archives (``.pt2``; one in the older
layout, ``serialized_exported_program.json``, built from PyTorch's own serializer). The
script never imports ``rnnport``.

Weights: every parameter is random (uniform ±0.5), every value distinct, biases included;
inputs uniform ±1, batch 2, time 5. Seeds: CRC32 of the case name.

Files, per case ``<name>``
--------------------------
``<name>/<file>``: the file the tool wrote.

``<name>.npz`` (plain arrays, ``allow_pickle=False``):

``meta``
    0-d unicode array holding a JSON object: ``case``, ``description``, ``file`` (relative to
    the output folder), ``kind`` (``zip``, ``legacy``, ``safetensors`` or ``pt2``),
    ``versions``, ``tolerance``, and ``networks``: one entry per recurrent network the file
    holds, in the order a breadth-first walk of the file meets them: ``prefix`` (the key
    path, as ``prefix=`` takes it), ``inner`` (the part of the keys before the parameter
    names), ``module`` (``class``, ``input_size``, ``hidden_size``, ``num_layers``,
    ``bidirectional``, ``proj_size``, ``bias``, ``nonlinearity``), ``x`` and ``y`` (npz keys).
``x/<k>``, ``y/<k>``
    Network ``k``'s input ``(batch, time, input)`` and the module's own output for it,
    ``(batch, time, D·H_out)`` (a cell stepped over time: its hidden state at each step),
    computed by PyTorch in float32 (float16 and bfloat16 weights cast up exactly first).
"""

from __future__ import annotations

import io
import json
import sys
import warnings
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import golden_manifest
import numpy as np
from golden_manifest import Made

REPO_ROOT = Path(__file__).resolve().parent.parent
BATCH, TIME = 2, 5

CASES = {
    "hub_bin": "pytorch_model.bin: a hub-style torch.save of a model's state_dict, a "
               "bidirectional 2-layer LSTM under 'encoder.rnn.' beside a Linear head",
    "lightning_ckpt": "a Lightning Trainer.save_checkpoint file: the GRU at "
                      "state_dict['model.rnn.*'], with optimizer, loops and callbacks",
    "dataparallel_tar": "checkpoint.pth.tar: {'epoch', 'arch', 'state_dict' of a "
                        "DataParallel model ('module.rnn.*'), 'optimizer'}",
    "model_state_pkl": "encoder.pkl: {'model_state': state_dict, 'step': …}, an LSTM with a "
                       "projection",
    "deepspeed_module": "mp_rank_00_model_states.pt: DeepSpeed's {'module': state_dict, …}, "
                        "a relu RNN",
    "seq2seq_weights": "weights (no suffix): {'net': {'encoder.rnn.*' GRU, "
                       "'decoder.rnn.*' LSTM}}, two networks side by side",
    "params_nested": "model.pth: {'params': {'rnn': {'weight_ih_l0': …}}}, nested dicts",
    "legacy_pt": "old.pt: the legacy (pre-1.6) torch.save pickle of a checkpoint "
                 "{'state_dict': …, 'epoch'}, a bidirectional LSTM",
    "fp16_pt": "half.pt: a float16 GRU state_dict",
    "bf16_safetensors": "model.safetensors: a bfloat16 LSTM under 'lstm.', safetensors' "
                        "save_file",
    "pt2_lstm": "model.pt2: torch.export.save of a bidirectional 2-layer LSTM "
                "(batch_first) and a Linear",
    "pt2_rnn_relu": "relu.pt2: torch.export.save of an nn.RNN(nonlinearity='relu'), which "
                    "only the graph records",
    "pt2_gru_cell": "cell.pt2: torch.export.save of an nn.GRUCell stepped over 5 steps",
    "pt2_lstm_proj": "proj.pt2: torch.export.save of an LSTM with proj_size",
    "pt2_two_models": "package.pt2: two ExportedPrograms in one archive (package_pt2), an "
                      "encoder LSTM and a Linear head",
    "tied_safetensors": "model.safetensors: safetensors' save_model of two GRUs sharing "
                        "weight_hh (the second copy dropped, named in the metadata)",
    "pt2_old_layout": "old_layout.pt2: the archive layout of earlier releases "
                      "(serialized_exported_program.json, serialized_state_dict.pt), written "
                      "from PyTorch's own serializer, a GRU",
}


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _randomize(module: Any, rng: np.random.Generator) -> None:
    import torch

    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.from_numpy(
                rng.uniform(-0.5, 0.5, tuple(parameter.shape)).astype(np.float32)))


def _module_facts(module: Any) -> dict[str, Any]:
    return {"class": type(module).__name__, "input_size": module.input_size,
            "hidden_size": module.hidden_size, "num_layers": getattr(module, "num_layers", 1),
            "bidirectional": bool(getattr(module, "bidirectional", False)),
            "proj_size": getattr(module, "proj_size", 0), "bias": bool(module.bias),
            "nonlinearity": getattr(module, "nonlinearity", None)}


def _output(module: Any, x: np.ndarray) -> np.ndarray:
    """The module's output for ``x`` (batch, time, input), in float32."""
    import torch

    module = module.float().eval()
    inputs = torch.from_numpy(x)
    with torch.no_grad():
        if type(module).__name__.endswith("Cell"):
            state: Any = None
            steps = []
            for step in range(inputs.shape[1]):
                state = module(inputs[:, step], state)
                steps.append(state[0] if isinstance(state, tuple) else state)
            return torch.stack(steps, 1).numpy()
        batch_first = module.batch_first
        y = module(inputs if batch_first else inputs.transpose(0, 1))[0]
        return (y if batch_first else y.transpose(0, 1)).numpy()


class Case:
    """One case being made: its networks (module, prefix, inner) and arrays."""

    def __init__(self, name: str, out: Path) -> None:
        self.name, self.out, self.rng = name, out, _rng(name)
        self.networks: list[dict[str, Any]] = []
        self.arrays: dict[str, np.ndarray] = {}
        (out / name).mkdir(parents=True, exist_ok=True)

    def path(self, file: str) -> Path:
        return self.out / self.name / file

    def network(self, module: Any, prefix: str, inner: str, dtype: Any = None) -> None:
        """Record ``module`` (already randomized) as the network at ``prefix``; ``dtype``: the
        dtype the file stores (the output is computed from those values, cast to float32)."""
        index = len(self.networks)
        x = self.rng.uniform(-1, 1, (BATCH, TIME, module.input_size)).astype(np.float32)
        reference = module
        if dtype is not None:  # the stored values, cast up exactly, compute the output
            reference = type(module)(**_constructor(module))
            reference.load_state_dict({key: value.to(dtype).float()
                                       for key, value in module.state_dict().items()})
        self.arrays[f"x/{index}"] = x
        self.arrays[f"y/{index}"] = _output(reference, x)
        self.networks.append({"prefix": prefix, "inner": inner, "module": _module_facts(module),
                              "x": f"x/{index}", "y": f"y/{index}"})

    def made(self, file: str, kind: str, description: str) -> Made:
        import torch

        versions = {"torch": torch.__version__, "numpy": np.__version__}
        try:
            import lightning

            versions["lightning"] = lightning.__version__
        except ImportError:
            pass
        meta = {"case": self.name, "description": description, "file": f"{self.name}/{file}",
                "kind": kind, "versions": versions, "tolerance": 1e-5,
                "networks": self.networks}
        arrays = {"meta": np.array(json.dumps(meta)), **self.arrays}
        np.savez(self.out / f"{self.name}.npz", **arrays)
        return (meta, [f"{self.name}.npz", f"{self.name}/{file}"],
                f"{file}: {len(self.networks)} network(s)", versions)


def _constructor(module: Any) -> dict[str, Any]:
    facts = _module_facts(module)
    kwargs = {"input_size": facts["input_size"], "hidden_size": facts["hidden_size"],
              "bias": facts["bias"]}
    if not facts["class"].endswith("Cell"):
        kwargs.update(num_layers=facts["num_layers"], bidirectional=facts["bidirectional"],
                      batch_first=module.batch_first)
        if facts["class"] == "LSTM":
            kwargs["proj_size"] = facts["proj_size"]
    if facts["nonlinearity"]:
        kwargs["nonlinearity"] = facts["nonlinearity"]
    return kwargs


# -- the cases -----------------------------------------------------------------------------


def _model(**parts: Any) -> Any:
    import torch

    model = torch.nn.Module()
    for name, part in parts.items():
        setattr(model, name, part)
    return model


def hub_bin(case: Case) -> Made:
    import torch

    rnn = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    model = _model(encoder=_model(rnn=rnn), head=torch.nn.Linear(8, 2))
    _randomize(model, case.rng)
    case.network(rnn, "encoder.rnn.", "encoder.rnn.")
    torch.save(model.state_dict(), case.path("pytorch_model.bin"))
    return case.made("pytorch_model.bin", "zip", CASES["hub_bin"])


def lightning_ckpt(case: Case) -> Made:
    import lightning
    import torch

    class Net(lightning.LightningModule):  # a small model trained for two steps
        def __init__(self, hidden: int = 4, lr: float = 0.01) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.model = _model(rnn=torch.nn.GRU(3, hidden, batch_first=True),
                                fc=torch.nn.Linear(hidden, 1))

        def training_step(self, batch: Any, index: int) -> Any:
            x, y = batch
            out = self.model.fc(self.model.rnn(x)[0][:, -1])
            return torch.nn.functional.mse_loss(out, y)

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    torch.manual_seed(zlib.crc32(case.name.encode()))
    net = Net()
    _randomize(net, case.rng)
    data = torch.utils.data.TensorDataset(torch.randn(8, 5, 3), torch.randn(8, 1))
    trainer = lightning.Trainer(max_epochs=1, max_steps=2, logger=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                enable_checkpointing=False, default_root_dir=str(case.path("")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(net, torch.utils.data.DataLoader(data, batch_size=4))
    name = "epoch=0-step=2.ckpt"
    trainer.save_checkpoint(case.path(name))
    case.network(net.model.rnn, "state_dict.model.rnn.", "model.rnn.")
    return case.made(name, "zip", CASES["lightning_ckpt"])


def dataparallel_tar(case: Case) -> Made:
    import torch

    rnn = torch.nn.GRU(3, 5, num_layers=2)
    model = torch.nn.DataParallel(_model(rnn=rnn, fc=torch.nn.Linear(5, 2)))
    _randomize(model, case.rng)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    case.network(rnn, "state_dict.module.rnn.", "module.rnn.")
    torch.save({"epoch": 12, "arch": "gru2", "state_dict": model.state_dict(),
                "best_acc1": 0.5, "optimizer": optimizer.state_dict()},
               case.path("checkpoint.pth.tar"))
    return case.made("checkpoint.pth.tar", "zip", CASES["dataparallel_tar"])


def model_state_pkl(case: Case) -> Made:
    import torch

    rnn = torch.nn.LSTM(3, 5, proj_size=2, batch_first=True)
    _randomize(rnn, case.rng)
    model = _model(lstm=rnn, linear=torch.nn.Linear(2, 3))
    case.network(rnn, "model_state.lstm.", "lstm.")
    torch.save({"model_state": model.state_dict(), "step": 1000}, case.path("encoder.pkl"))
    return case.made("encoder.pkl", "zip", CASES["model_state_pkl"])


def deepspeed_module(case: Case) -> Made:
    import torch

    rnn = torch.nn.RNN(3, 4, nonlinearity="relu", num_layers=2)
    _randomize(rnn, case.rng)
    model = _model(rnn=rnn)
    case.network(rnn, "module.rnn.", "rnn.")
    torch.save({"module": model.state_dict(), "buffer_names": [], "optimizer": None,
                "lr_scheduler": None, "sparse_tensor_module_names": set(), "skipped_steps": 0,
                "global_steps": 10, "global_samples": 80, "dp_world_size": 1,
                "mp_world_size": 1, "ds_config": {"train_batch_size": 8},
                "ds_version": "0.16.0"}, case.path("mp_rank_00_model_states.pt"))
    return case.made("mp_rank_00_model_states.pt", "zip", CASES["deepspeed_module"])


def seq2seq_weights(case: Case) -> Made:
    import torch

    encoder = torch.nn.GRU(3, 4, bidirectional=True, batch_first=True)
    decoder = torch.nn.LSTM(6, 8, batch_first=True)
    model = _model(encoder=_model(embed=torch.nn.Linear(2, 3), rnn=encoder),
                   decoder=_model(rnn=decoder, out=torch.nn.Linear(8, 6)))
    _randomize(model, case.rng)
    case.network(encoder, "net.encoder.rnn.", "encoder.rnn.")
    case.network(decoder, "net.decoder.rnn.", "decoder.rnn.")
    torch.save({"net": model.state_dict(), "iteration": 3}, case.path("weights"))
    return case.made("weights", "zip", CASES["seq2seq_weights"])


def params_nested(case: Case) -> Made:
    import torch

    rnn = torch.nn.GRU(3, 4)
    _randomize(rnn, case.rng)
    case.network(rnn, "params.rnn.", "")
    torch.save({"params": {"rnn": dict(rnn.state_dict())}, "config": {"hidden": 4}},
               case.path("model.pth"))
    return case.made("model.pth", "zip", CASES["params_nested"])


def legacy_pt(case: Case) -> Made:
    import torch

    rnn = torch.nn.LSTM(3, 4, bidirectional=True)
    _randomize(rnn, case.rng)
    case.network(rnn, "state_dict.", "")
    torch.save({"state_dict": rnn.state_dict(), "epoch": 4}, case.path("old.pt"),
               _use_new_zipfile_serialization=False)
    return case.made("old.pt", "legacy", CASES["legacy_pt"])


def fp16_pt(case: Case) -> Made:
    import torch

    rnn = torch.nn.GRU(3, 4, batch_first=True)
    _randomize(rnn, case.rng)
    case.network(rnn, "", "", dtype=torch.float16)
    torch.save({key: value.half() for key, value in rnn.state_dict().items()},
               case.path("half.pt"))
    return case.made("half.pt", "zip", CASES["fp16_pt"])


def bf16_safetensors(case: Case) -> Made:
    import torch
    from safetensors.torch import save_file

    rnn = torch.nn.LSTM(3, 4, batch_first=True)
    _randomize(rnn, case.rng)
    case.network(rnn, "lstm.", "lstm.", dtype=torch.bfloat16)
    save_file({f"lstm.{key}": value.to(torch.bfloat16).contiguous()
               for key, value in rnn.state_dict().items()},
              str(case.path("model.safetensors")), metadata={"format": "pt"})
    return case.made("model.safetensors", "safetensors", CASES["bf16_safetensors"])


def _export(module: Any, x: Any) -> Any:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(module.eval(), (x,))


def pt2_lstm(case: Case) -> Made:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
            self.fc = torch.nn.Linear(8, 2)

        def forward(self, x: Any) -> Any:
            return self.fc(self.rnn(x)[0])

    net = Net()
    _randomize(net, case.rng)
    case.network(net.rnn, "rnn.", "rnn.")
    torch.export.save(_export(net, torch.zeros(BATCH, TIME, 3)), case.path("model.pt2"))
    return case.made("model.pt2", "pt2", CASES["pt2_lstm"])


def pt2_rnn_relu(case: Case) -> Made:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.RNN(3, 4, nonlinearity="relu")

        def forward(self, x: Any) -> Any:
            return self.rnn(x.transpose(0, 1))[0].transpose(0, 1)

    net = Net()
    _randomize(net, case.rng)
    case.network(net.rnn, "rnn.", "rnn.")
    torch.export.save(_export(net, torch.zeros(BATCH, TIME, 3)), case.path("relu.pt2"))
    return case.made("relu.pt2", "pt2", CASES["pt2_rnn_relu"])


def pt2_gru_cell(case: Case) -> Made:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = torch.nn.GRUCell(3, 4)

        def forward(self, x: Any) -> Any:
            h = torch.zeros(x.shape[0], 4)
            steps = []
            for step in range(x.shape[1]):
                h = self.cell(x[:, step], h)
                steps.append(h)
            return torch.stack(steps, 1)

    net = Net()
    _randomize(net, case.rng)
    case.network(net.cell, "cell.", "cell.")
    torch.export.save(_export(net, torch.zeros(BATCH, TIME, 3)), case.path("cell.pt2"))
    return case.made("cell.pt2", "pt2", CASES["pt2_gru_cell"])


def pt2_lstm_proj(case: Case) -> Made:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(3, 5, proj_size=2, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.lstm(x)[0]

    net = Net()
    _randomize(net, case.rng)
    case.network(net.lstm, "lstm.", "lstm.")
    torch.export.save(_export(net, torch.zeros(BATCH, TIME, 3)), case.path("proj.pt2"))
    return case.made("proj.pt2", "pt2", CASES["pt2_lstm_proj"])


def pt2_old_layout(case: Case) -> Made:
    import torch
    from torch._export.serde.schema import SCHEMA_VERSION
    from torch._export.serde.serialize import serialize

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = torch.nn.GRU(3, 4, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.gru(x)[0]

    net = Net()
    _randomize(net, case.rng)
    case.network(net.gru, "gru.", "gru.")
    artifact = serialize(_export(net, torch.zeros(BATCH, TIME, 3)))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:  # as torch.export.save wrote it until 2.5
        archive.writestr("serialized_exported_program.json", artifact.exported_program)
        archive.writestr("serialized_state_dict.pt", artifact.state_dict)
        archive.writestr("serialized_constants.pt", artifact.constants)
        archive.writestr("serialized_example_inputs.pt", artifact.example_inputs)
        archive.writestr("version", ".".join(map(str, SCHEMA_VERSION)))
    case.path("old_layout.pt2").write_bytes(buffer.getvalue())
    loaded = torch.export.load(case.path("old_layout.pt2"))  # PyTorch still reads it
    assert set(loaded.state_dict) == {f"gru.{key}" for key in net.gru.state_dict()}
    return case.made("old_layout.pt2", "pt2", CASES["pt2_old_layout"])


def pt2_two_models(case: Case) -> Made:
    import torch
    from torch.export.pt2_archive._package import package_pt2

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.LSTM(3, 4, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.rnn(x)[0]

    encoder, head = Encoder(), torch.nn.Linear(4, 2)
    _randomize(encoder, case.rng)
    _randomize(head, case.rng)
    case.network(encoder.rnn, "enc.rnn.", "rnn.")
    package_pt2(str(case.path("package.pt2")), exported_programs={
        "enc": _export(encoder, torch.zeros(BATCH, TIME, 3)),
        "head": _export(head, torch.zeros(BATCH, TIME, 4))})
    return case.made("package.pt2", "pt2", CASES["pt2_two_models"])


def tied_safetensors(case: Case) -> Made:
    import torch
    from safetensors.torch import save_model

    first, second = torch.nn.GRU(3, 4, batch_first=True), torch.nn.GRU(3, 4, batch_first=True)
    _randomize(first, case.rng)
    _randomize(second, case.rng)
    second.weight_hh_l0 = first.weight_hh_l0  # one parameter in both
    model = _model(a=first, b=second)
    case.network(first, "a.", "a.")
    case.network(second, "b.", "b.")
    save_model(model, str(case.path("model.safetensors")))
    return case.made("model.safetensors", "safetensors", CASES["tied_safetensors"])


MAKERS: dict[str, Callable[[Case], Made]] = {name: globals()[name] for name in CASES}


def make(name: str, out: Path) -> Made:
    return MAKERS[name](Case(name, out))


if __name__ == "__main__":
    sys.exit(golden_manifest.main(None, description=__doc__.split("\n\n")[0],
                           default_out=REPO_ROOT / "tests" / "golden" / "torch_files",
                           cases=CASES, generator="tools/golden_torch_files.py", make=make))
