"""context-proxy: an OpenAI-compatible reverse proxy that keeps long conversations in the window."""

__version__ = "0.1.0"
