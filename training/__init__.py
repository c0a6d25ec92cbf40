"""training of trajforge."""
