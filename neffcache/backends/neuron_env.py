"""Every TorchNeuron / Neuron SDK name neffcache uses, spelt only here (a test checks)."""

# Cache roots and scratch (read by torch_neuronx once, at import).
NEFF_CACHE_DIR = "TORCH_NEURONX_NEFF_CACHE_DIR"
NEFF_LOCK_DIR = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"
HLO_CACHE_DIR = "TORCH_NEURONX_HLO_CACHE_DIR"
NEFF_CACHE_DEFAULT = "/tmp/neff_cache"
HLO_CACHE_DEFAULT = "/tmp/neuron_hlo_cache"

# Compile-only mode (compile on a host without Trainium) and the target it compiles for.
COMPILE_ONLY = "TORCH_NEURONX_COMPILE_ONLY"
COMPILE_ONLY_ON = "1"
PLATFORM_TARGET = "NEURON_PLATFORM_TARGET_OVERRIDE"
TARGETS = ("trn2", "trn3")

# What enters TorchNeuron's own key (and so neffcache's fingerprint).
LOGICAL_NC_CONFIG = "NEURON_LOGICAL_NC_CONFIG"
CC_FLAGS = "NEURON_CC_FLAGS"

# Distributions whose versions enter the neuron fingerprint; NKI is `neuronx-nki` or `nki`.
SDK_DISTRIBUTIONS = ("torch-neuronx", "neuronx-cc", "neuronx-nki", "nki", "libneuronxla")

# The Neuron runtime's Debian package (read from dpkg's status file) and shared library.
RUNTIME_PACKAGE = "aws-neuronx-runtime-lib"
RUNTIME_LIB_DIRS = ("/opt/aws/neuron/lib",)
RUNTIME_LIB_NAME = "libnrt.so"

# torch.distributed: the process-group backend and the DeviceMesh device type.
DIST_BACKEND = "neuron"
DEVICE = "neuron"
