"""Opt-in: `import nemo.lens` resolves to lens where no real NeMo Lens is installed (CONTRACT §11).

    import lens.compat.nemo_lens  # noqa: F401
    from nemo.lens.helpers import managed_span   # lens.helpers.managed_span

Megatron-LM's call sites (`try: from nemo.lens.helpers import ... except ImportError: ...`) then run on lens
without an edit. The finder this adds sits at the end of sys.meta_path, so every real package wins: a `nemo.lens`
that is installed is always the one imported, and a real `nemo` without `lens` keeps its own modules.
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
    """Answers for nemo.lens* (and an empty `nemo`) only after every other finder found nothing."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "nemo":
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(None), is_package=True)
        if fullname in ALIASES:
            is_package = fullname == "nemo.lens"
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(ALIASES[fullname]), is_package=is_package)
        return None


def _install():
    if any(isinstance(finder, _NemoLensFinder) for finder in sys.meta_path):
        return
    sys.meta_path.append(_NemoLensFinder())


_install()
