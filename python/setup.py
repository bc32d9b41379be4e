"""Records where libscr is when the package is built from an install tree.

In an install tree the package is PREFIX/share/scr/python/scr and libscr is
PREFIX/lib/libscr.so. Once pip has copied the package into a Python environment that
relation is lost, so the build writes scr/_install.py with the library's absolute path;
`import scr` tries it after SCR_LIBRARY and the install tree (see scr/__init__.py).
Built from anywhere else (the source repository), nothing is recorded.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def install_tree_library():
    """PREFIX/lib/libscr.so when this directory is PREFIX/share/scr/python and it exists."""
    scr_share = os.path.dirname(HERE)
    share = os.path.dirname(scr_share)
    if not (
        os.path.basename(HERE) == "python"
        and os.path.basename(scr_share) == "scr"
        and os.path.basename(share) == "share"
    ):
        return None
    lib = os.path.join(os.path.dirname(share), "lib", "libscr.so")
    return lib if os.path.isfile(lib) else None


class BuildPyRecordingLibscr(build_py):
    """build_py that also writes scr/_install.py (LIBSCR: the path or None).

    A package copied out of its install tree (e.g. to build it where the tree is read
    only) keeps an scr/_install.py it already holds: the installer may write one.
    """

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "scr", "_install.py")
        lib = install_tree_library()
        if lib is None and os.path.isfile(os.path.join(HERE, "scr", "_install.py")):
            return
        with open(target, "w", encoding="utf-8") as f:
            f.write('"""Written by setup.py at install time: the libscr to load."""\n')
            f.write("LIBSCR = %r\n" % lib)


setup(cmdclass={"build_py": BuildPyRecordingLibscr})
