"""Consumer CLI and SDK."""
