"""What a user of an installed lens relies on, checked from that environment's interpreter: the `lens` command
beside it answers --help, `import nemo.lens` is lens with no edit (the .pth hook), and one span is exported to a
file.

    VENV/bin/python installed_lens_check.py OUT_DIR [torch-first]   (torch-first: Debian's torch imported before)"""

import glob
import os
import subprocess
import sys

out_dir = sys.argv[1]
command = os.path.join(os.path.dirname(sys.executable), "lens")
shown = subprocess.run([command, "--help"], capture_output=True, text=True, check=True).stdout
assert "report" in shown, f"{command} --help does not name report: {shown}"
os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file", NEMO_LENS_FILE_DIR=out_dir,
                  NEMO_LENS_SPAN_GROUPS="all", NEMO_LENS_HANG_SIGNAL="none")
if sys.argv[2:] == ["torch-first"]:
    import torch  # noqa: F401: its native libraries load first

from nemo.lens import NemoLensConfig, managed_span, setup_telemetry  # noqa: E402: no edit, the installed hook
import lens  # noqa: E402
import nemo.lens  # noqa: E402

assert nemo.lens is lens and "site-packages" in lens.__file__, (nemo.lens, lens.__file__)
handle = setup_telemetry(NemoLensConfig.from_env(), rank=0, world_size=1)
with managed_span("step", "from.the.installed.lens"):
    pass
handle.shutdown()
assert handle.span_stats()["exported"] == 1, handle.span_stats()
written = "".join(open(path).read() for path in glob.glob(os.path.join(out_dir, "*", "rank0.traces.jsonl")))
assert '"from.the.installed.lens"' in written, written
print(f"Python {sys.version_info[0]}.{sys.version_info[1]}: lens {lens.__version__} from "
      f"{os.path.dirname(lens.__file__)}: the command, nemo.lens and one span")
