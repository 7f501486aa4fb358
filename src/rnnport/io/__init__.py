"""File containers that are not a framework: atomic writes (and, later, TensorBundle, HDF5)."""
