"""mnemoscope: is a language model answering from memory or from what it was given?

The package is layered; each layer only consumes what the previous one produced::

    models/   spec -> loaded model + tokenizer + identity
    trace/    model + prompts -> typed traces (hidden states, log-probs, paired traces)
    data/     JSONL records in, validated, with per-line errors

Importing :mod:`mnemoscope` is cheap: torch and transformers are imported only by
the functions that need them.
"""

from mnemoscope.errors import InputError, MnemoscopeError, ModelLoadError

__version__ = "0.1.0"

__all__ = ["InputError", "MnemoscopeError", "ModelLoadError", "__version__"]
