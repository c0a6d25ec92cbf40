"""Small real web applications served on 127.0.0.1 for web episodes (``server``)."""
