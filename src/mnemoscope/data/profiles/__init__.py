"""Audit profiles shipped for the embedded default model (``mnemoscope.pipelines.profile.default_profile_path``)."""
