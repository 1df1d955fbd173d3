"""The version of mcp-gym (a leaf module, so any layer can read it without importing the package's public face)."""

__version__ = "0.1.0"
