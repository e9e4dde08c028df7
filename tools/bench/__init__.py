"""The benchmarks of nobroker itself.

make.py bench, bench-md, bench-salvage, bench-dashboard and bench-wake run them.
"""
