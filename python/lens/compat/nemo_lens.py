"""`import nemo.lens` served by lens where no real NeMo Lens is installed, in this process, whatever LENS_NEMO_LENS
says (CONTRACT §11). An installed lens does this at every start already (its `.pth` hook, _lens_nemo_lens); this
import is for a lens that Python finds on PYTHONPATH, where no `.pth` file is read (a build tree):

    import lens.compat.nemo_lens  # noqa: F401
    from nemo.lens.helpers import managed_span   # lens.helpers.managed_span

A real `nemo.lens` that is installed is still the one imported.
"""

import _lens_nemo_lens

_lens_nemo_lens.install(explicit=True)
