"""CRM's pipeline: extract paired traces with CRM's extras, fit, evaluate, causal analyses.

* :mod:`~mnemoscope.pipelines.crm.extract`: records -> a CRM trace folder (resumable).
* :mod:`~mnemoscope.pipelines.crm.eval`: a folder -> leakage-free AUCs, controls, layer sweeps.
* :mod:`~mnemoscope.pipelines.crm.causal`: noise injection and activation patching.
* :mod:`~mnemoscope.pipelines.crm.run`: the end-to-end jobs behind ``mnemoscope crm`` (eval, fit an
  artefact, report).
"""
