"""Partitioning the primitives over a mesh: custom_partitioning glue
(partitioned.py), the rules of unfold / fold (columns.py) and of the
convolutions (conv.py), and the halo exchange of sharded spatial dimensions
(halo.py)."""
