"""gpu-triage: a terminal dashboard that tells why your GPUs are idle."""

__version__ = "0.1.0"
