"""unfold (im2col) and fold (col2im): the public functions and the primitives."""
