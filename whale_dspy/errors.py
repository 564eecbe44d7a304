"""The error hierarchy: one base so callers can catch everything whale-dspy raises."""

from __future__ import annotations


class WhaleError(Exception):
    """Base of every error whale-dspy raises on purpose."""


class ConfigError(WhaleError, ValueError):
    """A configuration value is out of range; raised before any expensive work."""


class HarnessError(WhaleError):
    """A harness source failed to parse, load, build or run."""


class BackendError(WhaleError):
    """The inference server failed to start, died, or refused an adapter."""


class TrainingError(WhaleError):
    """The weight trainer failed; the previous adapter stays in place."""
