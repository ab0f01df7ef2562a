"""Adapters that put the audit inside a RAG stack: LangChain, LlamaIndex, OpenTelemetry/OpenInference.

They translate the host framework's objects into :class:`~mnemoscope.audit.auditor.AuditRequest`
and call :class:`~mnemoscope.audit.auditor.Auditor`; no verdict is decided here.

* :mod:`mnemoscope.integrations.langchain` (``pip install 'mnemoscope[langchain]'``):
  ``MnemoscopeCallbackHandler``, ``MnemoscopeRunnable``, ``MnemoscopeLLM``;
* :mod:`mnemoscope.integrations.llamaindex` (``pip install 'mnemoscope[llamaindex]'``):
  ``MnemoscopeEvaluator``, ``MnemoscopeEventHandler``, ``MnemoscopeLlamaLLM``;
* :mod:`mnemoscope.integrations.otel` (``pip install 'mnemoscope[otel]'``): one span per audit
  (OpenInference conventions + ``mnemoscope.*``), off unless ``OTEL_EXPORTER_OTLP_*`` is set or
  :func:`~mnemoscope.integrations.otel.configure` is called;
* :mod:`mnemoscope.integrations.phoenix`: the verdict as an Arize Phoenix span annotation.

Nothing heavy is imported here: each submodule imports its framework when it is imported and
says which extra to install when the framework is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from mnemoscope.errors import MnemoscopeError

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(MnemoscopeError, ImportError):
    """An optional framework is not installed (the message names the extra to install)."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise one line naming the extra that installs it.

    Example:
        >>> require("json", "none").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{module} is not installed: pip install 'mnemoscope[{extra}]' ({e})"
        ) from None
