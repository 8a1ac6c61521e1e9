"""lrkv — reference-and-verification suite for Low-Rank Key-Value attention."""

__version__ = "0.1.0"
