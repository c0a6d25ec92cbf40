"""collectors of trajforge."""
