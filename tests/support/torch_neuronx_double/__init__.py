"""TEST DOUBLE of TorchNeuron (``torch_neuronx``), for worker tests on hosts without Trainium.

This directory is put on ``PYTHONPATH`` for worker subprocesses only (never imported by the
test process as ``torch_neuronx``). It holds:

- ``torch_neuronx/``: a fake package that, like the real one, reads its cache variables once
  at import (``TORCH_NEURONX_NEFF_CACHE_DIR``, ``..._LOCAL_CACHE_DIR``, ``..._HLO_CACHE_DIR``,
  ``TORCH_NEURONX_COMPILE_ONLY``), registers the ``"neuron"`` device and ``torch.distributed``
  backend (gloo underneath), and writes NEFFs in TorchNeuron's layout:
  ``<dir>/<k[0:2]>/<k[2:4]>/<k>.neff`` via a temp file and a rename under an exclusive file
  lock per key in the lock dir, kernels as ``<dir>/<sha256>/<sha256>.neff``, and (like a
  crashed concurrent writer) a stray ``.tmp`` file. In compile-only mode eager ops leave
  no NEFF (there is no device to run them on). Everything it sees and does is appended as
  JSON lines to ``$TORCH_NEURONX_DOUBLE_RECORD``.
- ``neuron_double_pipeline.py``: ``DoubleNeuronPipeline``, a pipeline class with
  ``load_config``/``from_pretrained``/``.to("neuron")``/component ``.compile``/
  ``.compile_repeated_blocks`` that "compiles" through the double, and ``DoubleTransformer``
  whose ``from_pretrained`` takes diffusers' ``parallel_config``. Its model directory's
  ``config.json`` can ask it to fail (``{"fail": "message"}``), crash (``{"crash": true}``)
  or hang (``{"sleep": 600}``) during the warm-up call.

``write_fake_distributions`` makes a directory of fake ``*.dist-info`` metadata, so that a
process with it on ``sys.path`` reports, say, neuronx-cc 2.99.0 to ``importlib.metadata``
(and so to neffcache's fingerprint) without any Neuron package installed.
"""

from collections.abc import Mapping
from pathlib import Path

PATH = Path(__file__).resolve().parent
RECORD_VAR = "TORCH_NEURONX_DOUBLE_RECORD"
PIPELINE_CLASS = "neuron_double_pipeline:DoubleNeuronPipeline"


def write_fake_distributions(directory: Path, versions: Mapping[str, str]) -> Path:
    """FAKE package metadata: ``<name>-<version>.dist-info/METADATA`` for each distribution,
    found by ``importlib.metadata`` when ``directory`` is on ``sys.path`` / ``PYTHONPATH``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, version in versions.items():
        info = directory / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            f"Summary: TEST DOUBLE metadata, not the real package\n", encoding="utf-8")
    return directory
