"""Packaging hook: copy the files sandshell reads at run time into the wheel (`sandshell/_data/`).

They live outside the package in the repository (`system.md` and `container/` at the root), so
`package-data` cannot name them; everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = ("system.md", ".env.example", "container")


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout
        target = Path(self.build_lib) / "sandshell" / "_data"
        target.mkdir(parents=True, exist_ok=True)
        for name in SHIPPED:
            source = HERE / name
            if source.is_dir():
                shutil.copytree(
                    source, target / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                )
            else:
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": BuildWithData})
