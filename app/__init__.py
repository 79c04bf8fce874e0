"""sandshell: watch a local language model live inside a shell."""

__version__ = "0.1.0"
