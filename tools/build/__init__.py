"""Building and proving: the zipapp (make.py build), the zero-dependency proof (check-deps)."""
