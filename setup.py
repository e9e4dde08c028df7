"""Only what pyproject.toml cannot say: install src/nobroker-celery.pth into
site-packages, beside the packages (the hook that makes kombu find the
`nobroker://` transport; see src/_nobroker_celery.py and docs/CELERY.md)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "nobroker-celery.pth"


class BuildWithPth(build_py):
    """build_py, plus the .pth file at the top of the built tree (site-packages)."""

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", PTH), os.path.join(self.build_lib, PTH))


setup(cmdclass={"build_py": BuildWithPth})
