"""The package version, read by pyproject.toml and recorded in every case this package writes."""
__version__ = "0.1.0"
