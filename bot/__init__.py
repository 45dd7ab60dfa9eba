"""kernel-bot: verified, honestly measured faster GPU kernels as follow-up pull requests."""

__version__ = "0.1.0"
