"""The project's version, in a module of its own so that any module can name it without importing
the package (whose ``__init__`` imports :mod:`dspark.device`). pyproject.toml reads it from here."""

__version__ = "0.1.0"
