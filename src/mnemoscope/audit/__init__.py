"""The audit core: one answer's verdict, and the calibration that certifies it.

Data flows one way through it: a request (:mod:`.requests`) goes to a backend (:mod:`.backends`:
the model in process, or one behind an OpenAI-compatible server), whose trace becomes signals
(:mod:`.signals`), a verdict (:mod:`.verdict`, the only place a verdict or threshold is decided)
and a result (:mod:`.auditor`, :mod:`.results`). A profile (:mod:`.profile`) holds what
calibration (:mod:`.calibrate`, :mod:`.draw`, :mod:`.validation`) fitted and certified; where the
context sits in a chat request is :mod:`.layout`'s job.

The core imports no research job (``mnemoscope.pipelines``: CRM, RePCS files, RADAR, SCAR, the
leaderboard) and no server; those import it. Nothing heavy is imported by this package itself.
"""
