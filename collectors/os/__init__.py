"""The OS (desktop) domain: a real Linux desktop observed as its accessibility tree."""
