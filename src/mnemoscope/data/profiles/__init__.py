"""Audit profiles shipped for the embedded default model (``mnemoscope.audit.profile.default_profile_path``)."""
