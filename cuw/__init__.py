"""cuda-wheels-forge: split one CUDA wheel build across N compile shards and a link job."""

__version__ = "0.1.0"
