"""The Worker: settling, heartbeats, stopping, processes."""
