"""The opt-in NeMo Lens shim and the fallbacks: Megatron's import idiom runs on lens unchanged, a real installed
nemo.lens is never shadowed, and lens.fallbacks imports where no native code is."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

PACKAGE = os.path.join(os.environ.get("LENS_BUILD_DIR", ""), "python", "lens")

MEGATRON_IDIOM = textwrap.dedent("""
    try:
        from nemo.lens.helpers import managed_span as _otel_managed_span
        from nemo.lens.helpers import trace_fn as _otel_trace_fn
        from nemo.lens.groups import SpanGroup
        from nemo.lens import NemoLensConfig, setup_telemetry
        from nemo.lens.logging_bridge import setup_logging_bridge
        from nemo.lens.fallbacks import is_span_group_enabled as _fallback_enabled
        from nemo.lens.state import is_span_group_enabled as _otel_sg_enabled
        source = "nemo.lens"
    except ImportError:
        from lens.fallbacks import managed_span as _otel_managed_span
        source = "fallbacks"
    print(source, _otel_managed_span.__module__)
""")


def python(code, path):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(path)}).stdout.strip()


def installed_python(code, path, **env):
    """Runs `code` as in an environment where lens is installed: the build's python folder is a site directory, so
    Python reads lens_nemo_lens.pth there as it does in site-packages. Returns (stdout, stderr, exit status)."""
    site_dir = os.path.dirname(PACKAGE)
    prelude = f"import site; site.addsitedir({site_dir!r})\n"
    result = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(path), **env})
    return result.stdout.strip(), result.stderr, result.returncode


LOG_TO_STDERR = "import logging; logging.basicConfig(level=logging.INFO, format='%(name)s %(message)s')\n"


class InstalledHookTest(unittest.TestCase):
    """The .pth hook of an installed lens: Megatron's imports of nemo.lens reach lens with no edit."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="lens-hook-")
        self.addCleanup(shutil.rmtree, self.root)
        self.path = [p for p in os.environ["PYTHONPATH"].split(os.pathsep) if p != os.path.dirname(PACKAGE)]

    def test_megatrons_imports_reach_lens_and_the_first_says_so_once(self):
        out, err, status = installed_python(
            "import sys\nprint('lens' in sys.modules)\n" + LOG_TO_STDERR + MEGATRON_IDIOM +
            "import nemo.lens, nemo.lens.helpers, lens\nprint(nemo.lens is lens)", self.path)
        self.assertEqual(status, 0, err)
        self.assertEqual(out.splitlines(), ["False", "nemo.lens lens._native", "True"])  # lens loads on first use
        said = [line for line in err.splitlines() if "nemo.lens is" in line]
        self.assertEqual(said, ["lens lens: nemo.lens is served by lens (no NeMo Lens is installed; LENS_NEMO_LENS=0 "
                                "turns this off)"])

    def test_lens_nemo_lens_0_leaves_nemo_lens_unserved(self):
        out, err, status = installed_python(MEGATRON_IDIOM, self.path, LENS_NEMO_LENS="0")
        self.assertEqual((out, status), ("fallbacks lens.fallbacks", 0), err)

    def test_a_bad_value_is_an_error_naming_the_variable_at_the_import_and_nowhere_else(self):
        out, err, status = installed_python("print('starts')\nimport nemo.lens", self.path, LENS_NEMO_LENS="yes")
        self.assertEqual(out, "starts")
        self.assertNotEqual(status, 0)
        self.assertIn("ValueError: LENS_NEMO_LENS='yes': 1 serves nemo.lens with lens", err)
        # Megatron's `except ImportError` does not swallow it: the run stops at its first import, not untraced.
        out, err, status = installed_python(MEGATRON_IDIOM, self.path, LENS_NEMO_LENS="yes")
        self.assertNotEqual(status, 0)
        self.assertIn("LENS_NEMO_LENS='yes'", err)

    def test_a_real_nemo_lens_is_the_one_imported_and_lens_says_so(self):
        stand_in = os.path.join(self.root, "nemo", "lens")  # as NeMo Lens installs it: `nemo` a namespace package
        os.makedirs(stand_in)
        with open(os.path.join(stand_in, "__init__.py"), "w") as f:
            f.write("REAL = True\n")
        code = LOG_TO_STDERR + "import nemo.lens\nprint(getattr(nemo.lens, 'REAL', False))"
        out, err, status = installed_python(code, [self.root] + self.path)
        self.assertEqual((out, status), ("True", 0), err)
        self.assertIn(f"lens lens: nemo.lens is NeMo Lens ({os.path.join(stand_in, '__init__.py')}); lens does not "
                      "serve it", err)

    def test_nothing_but_nemo_and_nemo_lens_is_answered(self):
        out, err, status = installed_python(
            "import importlib.util as u\n"
            "print(u.find_spec('nemo_other'), u.find_spec('nemo.collections') if u.find_spec('nemo') else 'no nemo')\n"
            "import nemo.lens\n"
            "print(u.find_spec('nemo.lens.contrib'), u.find_spec('nemo.collections'))", self.path)
        self.assertEqual(out.splitlines(), ["None None", "None None"], err)


class CompatTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="lens-compat-")
        self.path = os.environ["PYTHONPATH"].split(os.pathsep)

    def tearDown(self):
        shutil.rmtree(self.root)

    def test_without_the_shim_nemo_lens_is_not_there(self):
        self.assertEqual(python(MEGATRON_IDIOM, self.path), "fallbacks lens.fallbacks")

    def test_the_shim_makes_megatrons_imports_resolve_to_lens(self):
        out = python("import lens.compat.nemo_lens\n" + MEGATRON_IDIOM +
                     "import nemo.lens, lens, lens.helpers, lens.telemetry\n"
                     "print(nemo.lens is lens, nemo.lens.helpers is lens.helpers, lens.__spec__.name)\n"
                     "print(sorted(m for m in __import__('sys').modules if m.startswith('nemo.lens')))", self.path)
        self.assertEqual(out.splitlines(), [
            "nemo.lens lens._native", "True True lens",
            "['nemo.lens', 'nemo.lens.fallbacks', 'nemo.lens.groups', 'nemo.lens.helpers', 'nemo.lens.logging_bridge', "
            "'nemo.lens.state']"])

    def test_megatrons_state_import_answers_from_lenss_own_set(self):
        # training.py imports is_span_group_enabled from nemo.lens.state; without the module the whole loop would
        # fall back to no-ops without a word.
        out = python(textwrap.dedent("""
            import lens.compat.nemo_lens
            from nemo.lens.state import is_span_group_enabled, enabled_span_groups, set_pp_trace_carrier
            from nemo.lens.state import get_pp_trace_carrier
            from nemo.lens.distributed import broadcast_trace_context, create_linked_span
            from nemo.lens.propagation import inject_context, extract_context
            import os, lens
            before = is_span_group_enabled("step")
            os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="per_step", NEMO_LENS_EXPORTER="console",
                              NEMO_LENS_METRICS_ENABLED="0", NEMO_LENS_HANG_SIGNAL="none")
            handle = lens.setup_telemetry(lens.NemoLensConfig.from_env())
            print(before, is_span_group_enabled("step"), is_span_group_enabled("layer"),
                  "step" in enabled_span_groups())
            lens.set_enabled_span_groups(["job"])
            print(is_span_group_enabled("step"), sorted(enabled_span_groups()))
            set_pp_trace_carrier({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
            print(sorted(get_pp_trace_carrier()))
            handle.shutdown()
        """), self.path)
        self.assertEqual(out.splitlines()[-3:], ["False True False True", "False ['job']", "['traceparent']"])

    def test_a_real_nemo_lens_is_never_shadowed(self):
        stand_in = os.path.join(self.root, "nemo", "lens")
        os.makedirs(stand_in)
        open(os.path.join(self.root, "nemo", "__init__.py"), "w").close()
        with open(os.path.join(stand_in, "__init__.py"), "w") as f:
            f.write("REAL = True\n")
        with open(os.path.join(stand_in, "helpers.py"), "w") as f:
            f.write("def managed_span(*a, **k):\n    return None\n")
        out = python("import lens.compat.nemo_lens\nimport nemo.lens, nemo.lens.helpers\n"
                     "print(getattr(nemo.lens, 'REAL', False), nemo.lens.helpers.__file__.startswith(%r))" % self.root,
                     [self.root] + self.path)
        self.assertEqual(out, "True True")

    def test_a_real_nemo_without_lens_keeps_its_modules_and_gains_lens(self):
        os.makedirs(os.path.join(self.root, "nemo"))
        with open(os.path.join(self.root, "nemo", "__init__.py"), "w") as f:
            f.write("NEMO = 'real'\n")
        out = python("import lens.compat.nemo_lens\nimport nemo, nemo.lens.helpers\n"
                     "print(nemo.NEMO, nemo.lens.helpers.__name__)", [self.root] + self.path)
        self.assertEqual(out, "real lens.helpers")

    def test_the_fallbacks_import_with_no_native_code(self):
        bare = os.path.join(self.root, "lens")
        shutil.copytree(PACKAGE, bare, ignore=shutil.ignore_patterns("_native*", "__pycache__"))
        out = python("import lens.fallbacks as f\n"
                     "with f.managed_span('step', 'x', a=1) as s: print(s, f.is_span_group_enabled('step'))\n"
                     "try:\n    import lens.helpers\nexcept ImportError:\n    print('helpers need native code')\n",
                     [self.root])
        self.assertEqual(out.splitlines(), ["None False", "helpers need native code"])


if __name__ == "__main__":
    unittest.main()
