"""The convolution: public function, primitives and their rules, algorithm
selection, workspace plans, and the CUDA and CPU lowerings."""

# Registering the rules and lowerings is importing their modules.
from . import batching, lowering_cpu, lowering_cuda  # noqa: F401
