"""nobroker and its peers draining real-shaped jobs (python make.py bench-realistic)."""
