"""SCAR: spectral contamination and alignment rupture (``../shared/papers/scar-spectral-rupture.txt``).

Detection only: this module consumes per-prompt, per-layer hidden states (and gradients) of a
suspect and of a clean anchor of the same family, evaluated on the **same** prompts in the
same order (:class:`ScarData`), and returns a typed :class:`ScarResult`. Extraction lives in
:mod:`mnemoscope.pipelines.scar`.

Protocol (choices the paper leaves open are marked *choice*; see ``docs/scar.md``):

1. Signals per layer ``l = 2..N-1`` (block outputs; *choice*: the embedding state, block 1
   and the last block only enter as neighbours, see :meth:`ScarDetector._profile`): curvature ``kappa(l)`` of the spectral slope,
   thermodynamic length ``L(l)`` of the step ``l -> l+1``, drift norm ``||v(l)||``
   (:mod:`mnemoscope.features.spectral`).
2. Robust z-scores across layers (median/MAD), optional Savitzky-Golay (window 3).
   ``reference="within"`` z-scores the suspect's own signals (the paper's main form);
   ``"anchor_delta"`` z-scores the anchor-relative deltas ``kappa - kappa_a``,
   ``L - L_a`` and ``||v - v_a||``.
3. ``T(l) = a z_kappa - b z_L + c z_v`` (signed) and the hinge composite
   ``a [z_kappa]+ + b [-z_L]+ + c [z_v]+``.
4. Thresholds from the anchor (never from the suspect): ``tau_kappa`` = 90th percentile of
   the anchor's ``z_kappa`` across layers, ``z_L`` below the anchor's 10th percentile,
   ``tau_v`` = 90th percentile of the anchor's ``z_v``.
5. Permutation p-values per layer: prompts are swapped between suspect and anchor (each
   prompt's pair of rows is exchanged with probability 1/2, the exact null of "the two models
   are interchangeable on these prompts"). Statistic (*choice*): ``T_suspect(l) -
   T_anchor(l)`` for ``"within"``, ``T(l)`` of the deltas for ``"anchor_delta"``; one-sided
   (greater), +1-corrected. Benjamini-Hochberg across layers.
6. Bands (:func:`rupture_bands`): maximal contiguous runs where all conditions hold; accepted
   when ``width >= 2`` and some layer in the band has ``q <= q_fdr``. ``l*`` = left-most
   arg-max of the signed ``T`` in the accepted band with the highest peak. ``rule="paper"``
   (default) is this AND of the three conditions; two relaxations are offered for diagnosis:
   ``"any2"`` (at least two of the three conditions on each layer of the run, composite test)
   and ``"per_signal"`` (each signal's condition alone, tested with that signal's own
   permutation statistic and BH across layers). Every audit records the bands under all three
   rules (``bands_by_rule``); ``bands`` / ``l*`` / ``SCAR`` follow the detector's ``rule``.
7. Scores: ``SCAR`` = peak hinge ``T`` in that band, ``SCAR_area`` = its mean over the band,
   ``SCAR_raw`` = ``a max dkappa + b (-min L) + c max ||v||^2`` (raw units), and the band-free
   ``peak`` = ``max_l`` hinge ``T`` and ``excess`` = ``max_l (T - T_anchor)``. Percentile
   bootstrap CIs resample prompts (paired) and keep the observed band fixed (*choice*).

The package is split by concern: :mod:`~mnemoscope.detectors.scar.types` (``ScarData``,
``ScarResult``, ``Band``, the rule names), :mod:`~mnemoscope.detectors.scar.bands` (the band
rules), :mod:`~mnemoscope.detectors.scar.detector` (``ScarDetector``, ``resolve_k``,
``calibrate_weights``) and :mod:`~mnemoscope.detectors.scar.diagnostics`
(``per_prompt_scores``). Every name is re-exported here, so
``from mnemoscope.detectors.scar import X`` keeps working.
"""

from __future__ import annotations

from mnemoscope.detectors.scar.bands import band_conditions, contiguous_runs, result_bands, rupture_bands
from mnemoscope.detectors.scar.detector import ScarDetector, calibrate_weights, resolve_k
from mnemoscope.detectors.scar.diagnostics import PerPromptScores, per_prompt_scores
from mnemoscope.detectors.scar.types import (
    FIRST_LAYER,
    RULES,
    SIGNALS,
    Band,
    Reference,
    Rule,
    ScarData,
    ScarResult,
    result_summary,
)

__all__ = [
    "FIRST_LAYER",
    "RULES",
    "SIGNALS",
    "Band",
    "PerPromptScores",
    "Reference",
    "Rule",
    "ScarData",
    "ScarDetector",
    "ScarResult",
    "band_conditions",
    "calibrate_weights",
    "contiguous_runs",
    "per_prompt_scores",
    "resolve_k",
    "result_bands",
    "result_summary",
    "rupture_bands",
]
