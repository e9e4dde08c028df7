"""The long crash-and-recover run over the test harness (make.py torture)."""
