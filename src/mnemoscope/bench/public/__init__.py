"""Real public QA data read offline from PyPI wheels: see :mod:`mnemoscope.bench.public_data`."""
