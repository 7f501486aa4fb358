"""Generate golden ncnn files: PyTorch recurrent modules converted by pnnx, run by ncnn.

    .venv/bin/python tools/golden_ncnn.py [--out tests/golden/ncnn] [--case NAME ...] [--list]

Each case is a small ``torch.nn.Module`` holding an ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN``
(batch-first, batch 1), traced and converted with ``pnnx.export(module, path, (x,),
fp16=…)``, which writes ``<name>.ncnn.param`` and ``<name>.ncnn.bin`` (kept) beside its own
intermediate files (dropped). ``rnnport`` is not imported. Then:

* ncnn's own ``Net`` loads the pair and runs one sequence ``x`` ``(time, input)`` in
  float32 (``opt.use_fp16_*`` and ``use_bf16_storage`` off: ncnn's defaults compute in
  float16 on CPUs with float16 arithmetic, which no float32 reference matches): its
  input blob is the recurrent layers' input, its output blob the last recurrent layer's
  output (a head after it, or a projection before it, is not run: ``ex.input`` on a blob
  skips the layers before it). That output is ``y_ncnn``.
* PyTorch runs the same recurrent module on ``x[None]``: ``y_torch`` ``(time, D·H_out)``.

Weights are drawn uniform ±0.6 from a generator seeded by the case's name (biases too:
never PyTorch's zero-free but symmetric initialisation, never zeros), so every value is
distinct and a swapped gate cannot pass. Inputs are uniform ±1. Shapes: input 5, hidden 8,
time 6. ``fp16=True`` makes pnnx store every weight as float16 (tag ``0x01306B47``); ncnn
widens them to float32 when it loads them.

Files per case ``<name>``: ``<name>.ncnn.param``, ``<name>.ncnn.bin``, and ``<name>.npz``
holding ``x``, ``y_ncnn``, ``y_torch`` (float32). ``MANIFEST.json`` lists the cases, what
each holds and the versions that made them (pinned below: another version may write other
files, so the script refuses to run with one unless ``--any-version``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PINNED = {"torch": "2.13.0", "pnnx": "20261020", "ncnn": "1.0.20261020"}
INPUT, HIDDEN, TIME = 5, 8, 6


def _cases() -> dict[str, tuple[str, Callable[[], Any], bool]]:
    """Case name → (what it is, a builder of its torch module, fp16)."""
    import torch

    class Head(torch.nn.Module):
        """A Linear before the GRU and a Linear after: layers with weights around it."""

        def __init__(self) -> None:
            super().__init__()
            self.project = torch.nn.Linear(INPUT, INPUT)
            self.rnn = torch.nn.GRU(INPUT, HIDDEN, batch_first=True)
            self.head = torch.nn.Linear(HIDDEN, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(self.project(x))[0])

    def lstm(**kwargs: Any) -> Callable[[], Any]:
        return lambda: torch.nn.LSTM(INPUT, HIDDEN, batch_first=True, **kwargs)

    return {
        "lstm_bi_2layer": ("nn.LSTM(5, 8, num_layers=2, bidirectional=True)",
                           lstm(num_layers=2, bidirectional=True), False),
        "gru": ("nn.GRU(5, 8)", lambda: torch.nn.GRU(INPUT, HIDDEN, batch_first=True), False),
        "rnn_bi": ("nn.RNN(5, 8, bidirectional=True), tanh",
                   lambda: torch.nn.RNN(INPUT, HIDDEN, batch_first=True, bidirectional=True),
                   False),
        "lstm_proj": ("nn.LSTM(5, 8, proj_size=3)", lstm(proj_size=3), False),
        "lstm_f16": ("nn.LSTM(5, 8, num_layers=2), weights stored as float16 (fp16=True)",
                     lstm(num_layers=2), True),
        "gru_head": ("Linear(5, 5) → nn.GRU(5, 8) → Linear(8, 3): InnerProduct layers around "
                     "the GRU", Head, False),
    }


def _recurrent(module: Any) -> Any:
    import torch

    if isinstance(module, torch.nn.RNNBase):
        return module
    return next(child for child in module.modules() if isinstance(child, torch.nn.RNNBase))


def _randomize(module: Any, name: str) -> None:
    import torch

    rng = np.random.default_rng(zlib.crc32(name.encode()))
    with torch.no_grad():
        for parameter in module.parameters():
            values = rng.uniform(-0.6, 0.6, tuple(parameter.shape)).astype(np.float32)
            parameter.copy_(torch.from_numpy(values))


def _ncnn(param: Path, weights: Path, x: np.ndarray) -> np.ndarray:
    """ncnn running the recurrent layers of ``param`` on one sequence ``x``."""
    import ncnn

    lines = [line.split() for line in param.read_text().splitlines()[2:]]
    recurrent = [line for line in lines if line[0] in ("LSTM", "GRU", "RNN")]
    first, last = recurrent[0], recurrent[-1]
    source = first[4]
    target = last[4 + int(last[2])]
    with ncnn.Net() as net:
        # float32 arithmetic on every CPU (ncnn picks float16 where the CPU has it)
        net.opt.use_fp16_storage = net.opt.use_fp16_packed = False
        net.opt.use_fp16_arithmetic = net.opt.use_bf16_storage = False
        assert net.load_param(str(param)) == 0 and net.load_model(str(weights)) == 0
        with net.create_extractor() as extractor:
            extractor.input(source, ncnn.Mat(np.ascontiguousarray(x)))
            status, y = extractor.extract(target)
            assert status == 0, status
            return np.array(y)


def _wrap(module: Any) -> Any:
    """``module`` returning its first output alone (pnnx then converts one output)."""
    import torch

    class Output(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            found = self.inner(x)
            return found[0] if isinstance(found, tuple) else found

    return Output(module).eval()


def make(name: str, out: Path) -> dict[str, Any]:
    import pnnx
    import torch

    description, build, fp16 = _cases()[name]
    module = build()
    _randomize(module, name)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    x = rng.uniform(-1, 1, (TIME, INPUT)).astype(np.float32)
    wrapped = _wrap(module)
    with tempfile.TemporaryDirectory() as scratch:
        traced = Path(scratch) / f"{name}.pt"
        pnnx.export(wrapped, str(traced), (torch.from_numpy(x[None]),), fp16=fp16)
        for suffix in (".ncnn.param", ".ncnn.bin"):
            shutil.copyfile(Path(scratch) / f"{name}{suffix}", out / f"{name}{suffix}")
    recurrent = _recurrent(module)
    inner = x[None]
    if recurrent is not module:  # the layers before the recurrent one, in PyTorch
        with torch.no_grad():
            inner = module.project(torch.from_numpy(x[None])).numpy()
    with torch.no_grad():
        y_torch = recurrent(torch.from_numpy(inner))[0][0].numpy()
    y_ncnn = _ncnn(out / f"{name}.ncnn.param", out / f"{name}.ncnn.bin", inner[0])
    np.savez(out / f"{name}.npz", x=inner[0], y_ncnn=y_ncnn, y_torch=y_torch)
    difference = float(np.abs(y_ncnn - y_torch).max())
    print(f"{name}: ncnn against PyTorch, max |Δ| = {difference:.2e}")
    return {"name": name, "description": description, "fp16": fp16,
            "ncnn_vs_torch": difference}


def _versions() -> dict[str, str]:
    import ncnn
    import pnnx
    import torch

    return {"torch": torch.__version__.split("+")[0], "pnnx": str(pnnx.__version__),
            "ncnn": str(ncnn.__version__), "numpy": np.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "ncnn")
    parser.add_argument("--case", action="append", help="make only these cases")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--any-version", action="store_true",
                        help="run with other versions than the pinned ones")
    args = parser.parse_args(argv)
    cases = _cases()
    if args.list:
        for name, (description, _, _) in cases.items():
            print(f"{name}: {description}")
        return 0
    versions = _versions()
    wrong = {key: versions[key] for key in PINNED if versions[key] != PINNED[key]}
    if wrong and not args.any_version:
        print(f"golden_ncnn: pinned {PINNED}, found {wrong}; install the pinned versions or "
              "pass --any-version", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    made = [make(name, args.out) for name in (args.case or cases)]
    manifest_path = args.out / "MANIFEST.json"
    old = json.loads(manifest_path.read_text())["cases"] if manifest_path.exists() else []
    kept = [case for case in old if case["name"] not in {case["name"] for case in made}]
    manifest = {"tool": "tools/golden_ncnn.py", "versions": versions,
                "cases": sorted([*kept, *made], key=lambda case: case["name"])}
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
