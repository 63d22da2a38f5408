"""The engine's bad-input errors: one family, so a caller (the CLI, the app) catches them all as
``EngineInputError`` and shows ``str(e)``, one English line. Pure Python."""

from __future__ import annotations


class EngineInputError(ValueError):
    """Base class of the engine's bad-input errors; the CLI turns these into exit code 2."""


class InvalidRequestError(EngineInputError):
    """A request cannot be served at all (empty prompt, longer than the model allows, ...)."""


class InvalidConfigError(EngineInputError):
    """An engine setting is out of range (block size <= 0, a KV budget too small, ...).

    ``str(e)`` is one English line (what the CLI prints). Where a caller may word the error
    itself, in another language (the capacity page reading a model file), ``code`` names the
    case and ``params`` holds its values, each short and printable; elsewhere ``code`` is None.
    """

    def __init__(self, message: str, code: str | None = None, **params: object) -> None:
        super().__init__(message)
        self.code = code
        self.params = params
