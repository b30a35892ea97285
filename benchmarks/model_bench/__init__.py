"""The parts of the whole-model benchmark (benchmarks/models.py): problems
(a model with XLA's and our convolution, one set of parameters), train and
inference steps, timing, memory, agreement, per-layer timing and reports."""
