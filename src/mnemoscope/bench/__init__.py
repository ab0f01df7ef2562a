"""Ground truth only: authored data with known answers, dataset loaders, injection, verification.

* :mod:`~mnemoscope.bench.corpus`: the fictional membership corpus and the contamination battery.
* :mod:`~mnemoscope.bench.reliance`, :mod:`~mnemoscope.bench.mixed`: context-reliance items
  (item-level and token-level).
* :mod:`~mnemoscope.bench.suites`: documents of the shipped suites.
* :mod:`~mnemoscope.bench.datasets`: loaders for WikiMIA/BookMIA/MIMIR-style files.
* :mod:`~mnemoscope.bench.inject`: LoRA injection of known members (the ground-truth siblings).
* :mod:`~mnemoscope.bench.verify`: closed-book / open-book verification of reliance labels.

The authored tables (invented facts, names, words) live as data files in ``bench/data/``.
The experiments that run detectors on this ground truth are in :mod:`mnemoscope.pipelines`.
"""

__all__: list[str] = []
