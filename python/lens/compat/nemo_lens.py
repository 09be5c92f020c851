"""Opt-in: `import nemo.lens` resolves to lens where no real NeMo Lens is installed (CONTRACT §11).

    import lens.compat.nemo_lens  # noqa: F401
    from nemo.lens.helpers import managed_span   # lens.helpers.managed_span

Megatron-LM's call sites (`try: from nemo.lens.helpers import ... except ImportError: ...`) then run on lens
without an edit. The finder this adds asks every other finder first, so a real package always wins: a `nemo.lens`
that is installed is the one imported, and a real `nemo` without `lens` keeps its own modules. A nemo.lens module
that lens does not have (nemo.lens.something_else) is not found.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

import lens

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


class _NemoLensFinder(importlib.abc.MetaPathFinder):
    """Answers for `nemo` and `nemo.lens` only where no other finder has them, and for nemo.lens's modules only
    while `nemo.lens` is lens. It stands first in sys.meta_path so that lens's modules are never loaded a second
    time under nemo.lens's names (the path finder would find them through lens's __path__)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "nemo":
            if self._found_elsewhere(fullname, path, target):
                return None
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(None), is_package=True)
        if fullname == "nemo.lens":
            if self._found_elsewhere(fullname, path, target):
                return None
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader("lens"), is_package=True)
        if fullname.startswith("nemo.lens.") and sys.modules.get("nemo.lens") is lens:
            target_name = ALIASES.get(fullname)
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_name)) if target_name else None
        return None

    def _found_elsewhere(self, fullname, path, target):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            if finder.find_spec(fullname, path, target) is not None:
                return True
        return False


def _install():
    if any(isinstance(finder, _NemoLensFinder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _NemoLensFinder())


_install()
