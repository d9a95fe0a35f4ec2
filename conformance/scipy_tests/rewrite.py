"""Copy SciPy test directories and rewrite their imports of public names to trnscipy.

Rules (applied to every ``import``/``from ... import`` in a file, nested ones too):

* ``import scipy.sparse as sp``, ``from scipy import linalg``, ``from scipy.sparse.linalg
  import cg`` and the like go through the ``scipy_trn`` proxies (conformance.scipy_tests.shim):
  public names of the three namespaces are trnscipy's, everything else SciPy's;
* ``import scipy`` / ``import scipy.linalg._expm_frechet`` (binding the name ``scipy``)
  import the module as before and then bind ``scipy`` to the proxy;
* ``from scipy.sparse.linalg._isolve import cg`` (a public object imported through a private
  module) takes the public name from the proxy when it is the very object SciPy exports
  publicly; private names stay SciPy's;
* a relative import out of the tests package (``from .._coo import x``) becomes the absolute
  SciPy import, then the rules above apply; ``from scipy.X.tests.test_y import z`` points to
  the copy of that test package.

The edits replace only the import statements' text (located with ``ast``), so the rest of
each file is SciPy's text, unchanged.
"""

import ast
import importlib
import os
import shutil

from conformance.scipy_tests.shim import PROXIED, TOP, proxy_name

__all__ = ["package_name", "rewrite_source", "copy_tests"]

_NAMESPACES = sorted(PROXIED, key=len, reverse=True)  # longest first


def package_name(scipy_tests_pkg):
    """``scipy.sparse.linalg._isolve.tests`` -> the copy's package name."""
    return scipy_tests_pkg.replace(".", "_")


def _public_namespace(module):
    """The mirrored public namespace ``module`` is (or lies under), or None."""
    for ns in _NAMESPACES:
        if module == ns or module.startswith(ns + "."):
            return ns
    return None


def _is_public_object(module, name):
    """True when ``module.name`` is the object a mirrored namespace exports as ``name``."""
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    for ns in _NAMESPACES:
        mod = importlib.import_module(ns)
        if name in getattr(mod, "__all__", ()) and getattr(mod, name, None) is obj:
            return ns
    return None


def _alias(a):
    return a.name if a.asname is None else f"{a.name} as {a.asname}"


def _absolute(node, package):
    """The absolute module of a (possibly relative) ImportFrom in ``package``."""
    if not node.level:
        return node.module
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


class _Rewriter:
    def __init__(self, package, copied):
        self.package = package      # the SciPy package the file belongs to
        self.copied = copied        # SciPy tests package -> its copy's package name

    def _copied_module(self, module):
        for pkg, new in self.copied.items():
            if module == pkg or module.startswith(pkg + "."):
                return new + module[len(pkg):]
        return None

    def import_from(self, node):
        module = _absolute(node, self.package)
        if node.level:
            inside = module == self.package or module.startswith(self.package + ".")
            if inside:
                return None   # within the tests package: the copy keeps it
        copy = self._copied_module(module)
        if copy is not None:
            return f"from {copy} import {', '.join(map(_alias, node.names))}"
        if module != "scipy" and _public_namespace(module) is None:
            return None if not node.level else \
                f"from {module} import {', '.join(map(_alias, node.names))}"
        if module == "scipy" or module in PROXIED:
            return f"from {proxy_name(module)} import {', '.join(map(_alias, node.names))}"
        # a private module under a mirrored namespace
        public, private = [], []
        for a in node.names:
            ns = a.name != "*" and _is_public_object(module, a.name)
            (public if ns else private).append((ns, a))
        statements = []
        if private:
            statements.append(f"from {module} import {', '.join(_alias(a) for _, a in private)}")
        for ns in dict.fromkeys(ns for ns, _ in public):
            names = ", ".join(_alias(a) for n, a in public if n == ns)
            statements.append(f"from {proxy_name(ns)} import {names}")
        if not public and not node.level:
            return None
        return "; ".join(statements)

    def import_(self, node):
        out, rebinds = [], False
        changed = False
        for a in node.names:
            if not (a.name == "scipy" or a.name.startswith("scipy.")):
                out.append(_alias(a))
                continue
            copy = self._copied_module(a.name)
            if a.asname is None:
                out.append(a.name)
                rebinds = True
            elif copy is not None:
                out.append(f"{copy} as {a.asname}")
                changed = True
            elif a.name == "scipy" or a.name in PROXIED:
                out.append(f"{proxy_name(a.name)} as {a.asname}")
                changed = True
            else:
                out.append(_alias(a))
        if rebinds:
            out.append(f"{TOP} as scipy")
            changed = True
        return f"import {', '.join(out)}" if changed else None


def rewrite_source(source, package, copied=None):
    """``source`` (a test file of SciPy package ``package``) with its imports rewritten."""
    tree = ast.parse(source)
    rw = _Rewriter(package, copied or {})
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            new = rw.import_from(node)
        elif isinstance(node, ast.Import):
            new = rw.import_(node)
        else:
            continue
        if new is not None:
            edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset,
                          new))
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(lineno, col):  # ast columns are UTF-8 byte offsets
        line = lines[lineno - 1]
        return offsets[lineno - 1] + len(line.encode()[:col].decode())

    out = source
    for l0, c0, l1, c1, new in sorted(edits, reverse=True):
        out = out[:pos(l0, c0)] + new + out[pos(l1, c1):]
    ast.parse(out)  # the rewritten file is still Python
    return out


def copy_tests(test_dirs, dest):
    """Copy each SciPy tests directory (data files included) to ``dest`` as a package and
    rewrite its Python files.  ``test_dirs``: SciPy tests packages such as
    ``scipy.linalg.tests``.  Returns {SciPy tests package: copied directory}."""
    copied = {pkg: package_name(pkg) for pkg in test_dirs}
    out = {}
    for pkg, new in copied.items():
        src = os.path.dirname(importlib.import_module(pkg).__file__)
        target = os.path.join(dest, new)
        shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
        for root, _, files in os.walk(target):
            sub = os.path.relpath(root, target)
            package = pkg if sub == "." else pkg + "." + sub.replace(os.sep, ".")
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(root, f)
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read()
                    with open(path, "w", encoding="utf-8") as fh:
                        fh.write(rewrite_source(text, package, copied))
        out[pkg] = target
    return out
