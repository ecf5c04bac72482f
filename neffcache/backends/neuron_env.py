"""Every TorchNeuron / Neuron SDK environment variable name neffcache uses, in one place.

Some of these names are documented as "to be confirmed on hardware" (DESIGN.md §1); a rename
upstream is a one-line change here.
"""

NEFF_CACHE_DIR = "TORCH_NEURONX_NEFF_CACHE_DIR"
NEFF_LOCK_DIR = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"
HLO_CACHE_DIR = "TORCH_NEURONX_HLO_CACHE_DIR"
COMPILE_ONLY = "TORCH_NEURONX_COMPILE_ONLY"
PLATFORM_TARGET = "NEURON_PLATFORM_TARGET_OVERRIDE"
LOGICAL_NC_CONFIG = "NEURON_LOGICAL_NC_CONFIG"
CC_FLAGS = "NEURON_CC_FLAGS"
RT_VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"

NEFF_CACHE_DEFAULT = "/tmp/neff_cache"
NEFF_LOCK_DEFAULT = "/tmp/local_cache"

# Python distributions whose versions enter the neuron fingerprint.
SDK_DISTRIBUTIONS = ("torch-neuronx", "neuronx-cc", "neuronx-nki", "nki", "libneuronxla")
