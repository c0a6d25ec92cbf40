"""The MCP domain: an MCP client environment over real servers and the shipped stub servers."""
