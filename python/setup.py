"""How a wheel gets the ipybox binary (pyproject.toml has the metadata).

scripts/wheels.sh sets two variables for each target:

    IPYBOX_WHEEL_BINARY    the cross-built binary, relative to this folder
                           (_bin/ipybox, or _bin/ipybox.exe for Windows)
    IPYBOX_WHEEL_PLATFORM  the wheel's platform tag, such as
                           manylinux_2_17_x86_64.manylinux2014_x86_64

and the wheel carries the binary as its script (ipybox-X.data/scripts/),
which pip and pipx install on PATH as it is: no Python shim in front of it.
Its tag is py3-none-PLATFORM: the binary does not depend on the Python, and
the Python API is pure. With neither variable set (a checkout, an sdist),
the wheel is the Python API alone, py3-none-any.
"""

import os
import sys

from setuptools import setup

try:
    from setuptools.command.build_scripts import build_scripts as _build_scripts
except ImportError:  # setuptools before 69: its vendored distutils (imported through setuptools)
    from distutils.command.build_scripts import build_scripts as _build_scripts

try:  # setuptools 70.1 and newer
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # Debian 12's setuptools 66 with the wheel package
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

BINARY = os.environ.get("IPYBOX_WHEEL_BINARY", "")
PLATFORM = os.environ.get("IPYBOX_WHEEL_PLATFORM", "")
if bool(BINARY) != bool(PLATFORM):
    sys.exit("setup.py: set both IPYBOX_WHEEL_BINARY and IPYBOX_WHEEL_PLATFORM, or neither")
if BINARY and os.path.basename(BINARY) not in ("ipybox", "ipybox.exe"):
    sys.exit(f"setup.py: IPYBOX_WHEEL_BINARY {BINARY!r}: the file must be named ipybox or ipybox.exe")
if not BINARY and "bdist_wheel" in sys.argv:
    print(
        "setup.py: no IPYBOX_WHEEL_BINARY: this wheel is the Python API alone, without the ipybox binary "
        "(README.md, 'Building from source')",
        file=sys.stderr,
    )


class build_scripts(_build_scripts):
    """Copies each script byte for byte, mode included. distutils would
    read the binary as Python source to rewrite its #! line."""

    def copy_scripts(self):
        self.mkpath(self.build_dir)
        outfiles = []
        for script in self.scripts:
            dst = os.path.join(self.build_dir, os.path.basename(script))
            self.copy_file(script, dst)
            outfiles.append(dst)
        return outfiles, outfiles


class bdist_wheel(_bdist_wheel):
    """Tags a wheel that carries a binary py3-none-PLATFORM. Its Python
    files stay at the wheel's root and go to purelib (Root-Is-Purelib:
    true): they are the same on every platform."""

    def get_tag(self):
        if PLATFORM:
            return "py3", "none", PLATFORM
        return super().get_tag()


setup(
    scripts=[BINARY] if BINARY else [],
    cmdclass={"build_scripts": build_scripts, "bdist_wheel": bdist_wheel},
)
