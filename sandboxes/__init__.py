"""sandboxes of trajforge."""
