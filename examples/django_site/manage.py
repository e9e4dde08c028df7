#!/usr/bin/env python3
"""Django's command-line utility for the nobroker example site."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # The example runs from a checkout: nobroker's source beside it, nothing installed.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
