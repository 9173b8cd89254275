"""Build steps pyproject.toml cannot declare: the import-hook .pth and the data directories.

* ``mnframe-chainer-hook.pth`` must sit at the top of site-packages (see
  ``_mnframe_chainer_hook``). ``build_py`` writes it into the wheel's root;
  ``editable_wheel`` adds it to the editable wheel (``pip install -e .``).
* The repository keeps ``conf/`` and ``recipes/`` at its top; the wheel ships
  them as ``mnframe/conf`` (YAML only) and the ``mnframe.recipes`` package
  (code, recipe YAML, bundled data). ``mnframe/config/compose.py`` finds them
  there, or in the checkout for an editable install.
"""

import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

PTH_FILE = "mnframe-chainer-hook.pth"
PTH_LINE = "import _mnframe_chainer_hook; _mnframe_chainer_hook.install_from_pth()\n"


def write_pth(directory):
    with open(os.path.join(directory, PTH_FILE), "w") as f:
        f.write(PTH_LINE)


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        write_pth(self.build_lib)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH_FILE)]


cmdclass = {"build_py": BuildPyWithPth}

try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # setuptools < 64: no PEP 660 editable installs (import mnframe still installs the hook)
    pass
else:

    class EditableWheelWithPth(editable_wheel):
        # Every file under the unpacked directory goes into the editable wheel.
        def _install_namespaces(self, installation_dir, pth_prefix):
            super()._install_namespaces(installation_dir, pth_prefix)
            write_pth(installation_dir)

    cmdclass["editable_wheel"] = EditableWheelWithPth


def _conf_packages():
    """conf/ and its group directories as data-only packages mnframe.conf[.group]."""
    groups = sorted(d for d in os.listdir("conf") if os.path.isdir(os.path.join("conf", d)))
    return ["mnframe.conf"] + [f"mnframe.conf.{g}" for g in groups]


recipe_packages = ["mnframe.recipes"] + [f"mnframe.recipes.{p}" for p in find_packages("recipes")]
conf_packages = _conf_packages()

setup(
    cmdclass=cmdclass,
    packages=find_packages(include=["mnframe", "mnframe.*", "_mnframe_chainer_hook"]) + recipe_packages + conf_packages,
    package_dir={"mnframe.recipes": "recipes", "mnframe.conf": "conf"},
    package_data={
        **{p: ["*.yaml"] for p in conf_packages},
        # */*.yaml: a recipe's own config group options (recipes/<name>/<group>/<option>.yaml)
        **{p: ["*.yaml", "*/*.yaml", "*.csv.gz", "*.txt"] for p in recipe_packages},
    },
)
