"""trainsim: a discrete-event simulator of large-language-model training clusters."""

__version__ = "0.1.0"
