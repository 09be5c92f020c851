"""`import nemo.lens` served by lens where no real NeMo Lens is installed (CONTRACT §11): Megatron-LM's call sites
(`try: from nemo.lens.helpers import ... except ImportError: ...`) then run on lens without an edit.

Installed lens (a wheel, `pip install .`, `cmake --install`) puts `lens_nemo_lens.pth` beside this module; Python
runs its one line at every start, which calls install() here. This module imports nothing of lens and costs one
entry in sys.meta_path: lens itself is imported only when something imports `nemo.lens`.

    LENS_NEMO_LENS=0 python train.py   # nemo.lens is not served (unset or 1: served where no real one is)

The finder answers only for `nemo.lens` and its modules, and for `nemo` where no real `nemo` exists (an empty
package, as the namespace package a real NeMo Lens installs). It asks every other finder first, so a real package
always wins: an installed NeMo Lens is the one imported, and a real `nemo` without `lens` keeps its own modules. A
nemo.lens module lens does not have (nemo.lens.contrib) is not found. The first import of `nemo.lens` says on the
"lens" logger, once, which implementation serves it. A value of LENS_NEMO_LENS other than 0 or 1 makes that import
raise ValueError naming the variable; nothing else of the interpreter changes.
"""

import importlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types

VARIABLE = "LENS_NEMO_LENS"

# nemo.lens's modules and what answers for each.
ALIASES = {
    "nemo.lens": "lens",
    "nemo.lens.helpers": "lens.helpers",
    "nemo.lens.groups": "lens.groups",
    "nemo.lens.fallbacks": "lens.fallbacks",
    "nemo.lens.logging_bridge": "lens.logging_bridge",
    "nemo.lens.megatron": "lens.megatron",
    "nemo.lens.state": "lens.state",
    "nemo.lens.distributed": "lens.distributed",
    "nemo.lens.propagation": "lens.propagation",
    "nemo.lens.config": "lens.config",
    "nemo.lens.handle": "lens.handle",
    "nemo.lens.strategies": "lens.strategies",
    "nemo.lens.sampling": "lens.sampling",
    "nemo.lens.semconv": "lens.semconv",
    "nemo.lens.package_info": "lens.package_info",
    "nemo.lens.resources": "lens.resources",
    "nemo.lens.resources.local": "lens.resources.local",
    "nemo.lens.resources.slurm": "lens.resources.slurm",
    "nemo.lens.resources.kubernetes": "lens.resources.kubernetes",
}


def enabled_by_environment():
    """True unless LENS_NEMO_LENS is 0; ValueError naming the variable for a value other than 0 or 1."""
    value = os.environ.get(VARIABLE, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{VARIABLE}={os.environ[VARIABLE]!r}: 1 serves nemo.lens with lens where no real NeMo "
                         "Lens is installed, 0 does not (unset: 1)")
    return value == "1"


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target):
        self._target = target

    def create_module(self, spec):
        if self._target is None:
            return types.ModuleType(spec.name)  # an empty `nemo`, only when no real one exists
        module = importlib.import_module(self._target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module):
        if self._target is not None:
            module.__spec__ = self._own_spec  # importlib set the alias's spec: lens's modules keep their own


class NemoLensFinder(importlib.abc.MetaPathFinder):
    """Stands first in sys.meta_path so that lens's modules are never loaded a second time under nemo.lens's
    names (the path finder would find them through lens's __path__)."""

    def __init__(self, checked_environment):
        self._checked_environment = checked_environment  # False: the .pth hook, which must not fail at startup
        self._said = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "nemo" and fullname != "nemo.lens" and not fullname.startswith("nemo.lens."):
            return None
        if not self._checked_environment and not enabled_by_environment():
            return None
        if fullname == "nemo":
            if self._found_elsewhere(fullname, path, target):
                return None
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(None), is_package=True)
        if fullname == "nemo.lens":
            real = self._found_elsewhere(fullname, path, target)
            self._say(real)
            if real is not None:
                return None
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader("lens"), is_package=True)
        lens = sys.modules.get("lens")
        if lens is not None and sys.modules.get("nemo.lens") is lens:
            target_name = ALIASES.get(fullname)
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name)) if target_name else None
        return None

    def _found_elsewhere(self, fullname, path, target):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _say(self, real):
        if self._said:
            return
        self._said = True
        if real is not None:
            where = real.origin or ", ".join(real.submodule_search_locations or [])
            logging.getLogger("lens").info("lens: nemo.lens is NeMo Lens (%s); lens does not serve it", where)
        else:
            logging.getLogger("lens").info("lens: nemo.lens is served by lens (no NeMo Lens is installed; %s=0 "
                                           "turns this off)", VARIABLE)


def install(explicit=False):
    """Puts the finder first in sys.meta_path (once). The .pth hook (explicit=False) reads LENS_NEMO_LENS when
    `nemo.lens` is imported, never at startup; `import lens.compat.nemo_lens` (explicit=True) serves it always."""
    for finder in sys.meta_path:
        if isinstance(finder, NemoLensFinder):
            if explicit:
                finder._checked_environment = True
            return
    sys.meta_path.insert(0, NemoLensFinder(checked_environment=explicit))
