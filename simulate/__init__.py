"""Simulated environments: a trained world model served as an environment of the shared
protocol (``SimEnv``), its backends (local transformers, OpenAI-compatible endpoints), an
OpenAI-compatible server over a local model (``trajforge sim serve``) and the fidelity
comparison against the real environment (``trajforge sim compare``)."""
