"""The audit service: calibration profile, audit engine, tamper-evident storage, FastAPI app.

Import the pieces from their modules (``mnemoscope.server.app.create_app``,
``mnemoscope.audit.auditor.Auditor``, ``mnemoscope.audit.calibrate.calibrate``, ...); nothing heavy is imported here.
"""

__all__: list[str] = []
