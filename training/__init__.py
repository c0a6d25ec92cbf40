"""Training a language world model from a release: CPT, SFT and GSPO on TRL (``train``),
the rewards (``rewards``, ``metrics``) and the fidelity evaluation (``evaluate``)."""
