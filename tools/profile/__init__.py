"""Where time goes: per layer (make.py profile) and on the commit path (profile-commit)."""
