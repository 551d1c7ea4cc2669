"""Package discovery for dlproc (metadata lives in pyproject.toml).

The top-level folders sim/, boards/ and firmware/ are installed as the sub-packages
``dlproc.sim``, ``dlproc.boards`` and ``dlproc.firmware``, so the design card's layout stays visible
in the repository while every install (editable or wheel) carries their sources.
"""

from setuptools import find_packages, setup

MAPPED = {"dlproc.sim": "sim", "dlproc.boards": "boards", "dlproc.firmware": "firmware"}

packages = find_packages(include=["dlproc", "dlproc.*"])
package_dir = {}
for package, folder in MAPPED.items():
    packages.append(package)
    package_dir[package] = folder
    for sub in find_packages(where=folder):
        packages.append(f"{package}.{sub}")
        package_dir[f"{package}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
