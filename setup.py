"""Finds the packages for pyproject.toml: every package under psgd/, and the role
folders servers/ and workers/ installed inside the psgd namespace (psgd.servers,
psgd.workers) with their sub-packages. Metadata lives in pyproject.toml."""
from setuptools import find_packages, setup

ROLE_FOLDERS = {"psgd.servers": "servers", "psgd.workers": "workers"}


def packages() -> list[str]:
    found = find_packages(include=["psgd", "psgd.*"])
    for name, folder in ROLE_FOLDERS.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(where=folder)]
    return found


setup(packages=packages(), package_dir={"psgd": "psgd", **ROLE_FOLDERS})
