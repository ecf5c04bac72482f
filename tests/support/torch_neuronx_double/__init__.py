"""TEST DOUBLE of TorchNeuron (``torch_neuronx``), for worker tests on hosts without Trainium.

This directory is put on ``PYTHONPATH`` for worker subprocesses only (never imported by the
test process as ``torch_neuronx``). It holds:

- ``torch_neuronx/``: a fake package that, like the real one, reads its cache variables once
  at import (``TORCH_NEURONX_NEFF_CACHE_DIR``, ``..._LOCAL_CACHE_DIR``, ``..._HLO_CACHE_DIR``)
  and writes NEFFs in TorchNeuron's layout: ``<dir>/<k[0:2]>/<k[2:4]>/<k>.neff`` via a temp
  file and a rename, kernels as ``<dir>/<sha256>/<sha256>.neff``, a lock file per key in the
  lock dir, and (like a crashed concurrent writer) a stray ``.tmp`` file. Everything it sees
  and does is appended as JSON lines to ``$TORCH_NEURONX_DOUBLE_RECORD``.
- ``neuron_double_pipeline.py``: ``DoubleNeuronPipeline``, a pipeline class with
  ``from_pretrained``/``.to("neuron")``/component ``.compile``/``.compile_repeated_blocks``
  that "compiles" through the double. Its model directory's ``config.json`` can ask it to
  fail (``{"fail": "message"}``), crash (``{"crash": true}``) or hang (``{"sleep": 600}``)
  during the warm-up call.
"""

from pathlib import Path

PATH = Path(__file__).resolve().parent
RECORD_VAR = "TORCH_NEURONX_DOUBLE_RECORD"
PIPELINE_CLASS = "neuron_double_pipeline:DoubleNeuronPipeline"
