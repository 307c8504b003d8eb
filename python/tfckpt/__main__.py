"""`python -m tfckpt ARGS...` runs the `tfckpt` command line installed with this package.

The executable is the one program behind both (the wheel puts it in the environment's bin,
the Debian package in /usr/bin): this looks for it beside the package where auditwheel puts
it in a repaired wheel (site-packages/tfckpt.scripts/, with a script in bin that runs it),
then where this Python installs scripts, then beside the interpreter, then on PATH, and
replaces the process with it, so that its exit code, signals and output are the command's own.
"""

import os
import shutil
import sys
import sysconfig


def _candidates():
    yield os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tfckpt.scripts")
    schemes = [None]
    user = f"{os.name}_user"
    if user in sysconfig.get_scheme_names():
        schemes.append(user)
    for scheme in schemes:
        try:
            yield sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            pass
    yield os.path.dirname(sys.executable)
    yield os.path.dirname(os.path.realpath(sys.executable))


def find_executable():
    """The path of the `tfckpt` executable, or None."""
    for d in _candidates():
        if d:
            path = os.path.join(d, "tfckpt")
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return shutil.which("tfckpt")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    path = find_executable()
    if path is None:
        sys.stderr.write("tfckpt: the tfckpt executable is not installed beside this package "
                         "(not in the environment's bin, nor on PATH)\n")
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, ["tfckpt", *argv])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
