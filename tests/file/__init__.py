"""The file engine: replay state, framing, crash, fault, fuzz and explorer tests."""
