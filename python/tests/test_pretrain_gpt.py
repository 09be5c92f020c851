"""The Python reference trainer (examples/python/pretrain_gpt.py) on real processes: 4 ranks under torchrun give
the same span names, parentage, links and resource keys as the C++ pretrain_gpt with the same flags, one run id on
every rank, though its job spans go through the OpenTelemetry API (as Megatron's do) and the C++ ones through lens's
C++ API; by hand and without lens's native code (Megatron's fallback idiom) it still trains, and its loss falls."""

import collections
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINER = os.path.join(SOURCE, "examples", "python", "pretrain_gpt.py")
CPP_TRAINER = os.environ.get("LENS_PRETRAIN_GPT", "")
PYTHON_WITH_OTEL = os.environ.get("LENS_VENV_PYTHON", "")
LENS_TOOL = os.environ.get("LENS_TOOL", "")
FAKE_CUDART = os.path.join(os.environ.get("LENS_BUILD_DIR", ""), "tests", "fake_cuda", "libcudart.so.12")
FLAGS = ["--pipeline-model-parallel-size", "2", "--num-layers", "4", "--hidden-size", "32",
         "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
         "--train-iters", "6", "--log-interval", "1", "--eval-interval", "3", "--eval-iters", "1",
         "--save-interval", "4", "--otel-enabled", "--otel-span-groups", "all"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEGATRON_OTEL_", "NEMO_LENS_", "OTEL_"))}
    env.update(extra)
    return env


def torchrun(program, flags, directory, python=True, nproc=4, **env_extra):
    # The Python trainer under the interpreter of .venv (Debian's torch, and opentelemetry-api from PyPI, which
    # NeMo Lens depends on and whose API the trainer calls as Megatron does): torchrun as `python -m`.
    launcher = [PYTHON_WITH_OTEL, "-m", "torch.distributed.run"] if python else ["torchrun", "--no_python"]
    launcher += ["--nproc_per_node", str(nproc), "--redirects", "9:0", "--tee", "9:0", "--monitor_interval", "0.2",
                 "--master_port", str(free_port())]
    env = clean_env(MEGATRON_OTEL_EXPORTER="file", MEGATRON_OTEL_FILE_DIR=os.path.join(directory, "telemetry"),
                    MEGATRON_OTEL_RANK_STRATEGY="all_ranks", **env_extra)
    save = ["--save", os.path.join(directory, "checkpoints")]
    run = subprocess.run(launcher + [program] + flags + save, env=env, capture_output=True, text=True, timeout=240)
    if run.returncode != 0:
        raise AssertionError(f"{program} failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return run.stdout + run.stderr


def telemetry(directory):
    """(spans, resources per rank file) of a run's files."""
    spans, resources = [], []
    for path in sorted(glob.glob(os.path.join(directory, "telemetry", "*", "rank*.traces.jsonl"))):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                for resource_spans in json.loads(line)["resourceSpans"]:
                    resources.append({a["key"]: a["value"] for a in resource_spans["resource"]["attributes"]})
                    for scope in resource_spans["scopeSpans"]:
                        spans.extend(scope["spans"])
    return spans, resources


def shape(spans):
    """What the two trainers must share: span names (with counts), (child, parent) names, (span, linked) names."""
    by_id = {s["spanId"]: s for s in spans}
    names = collections.Counter(s["name"] for s in spans)
    parents = {(s["name"], by_id[s["parentSpanId"]]["name"] if s.get("parentSpanId") in by_id else None)
               for s in spans}
    links = {(s["name"], by_id[link["spanId"]]["name"]) for s in spans for link in s.get("links", [])
             if link["spanId"] in by_id}
    return names, parents, links


def host_spans(spans):
    return [s for s in spans if not s["name"].endswith(".device")]


def device_spans(spans):
    return [s for s in spans if s["name"].endswith(".device")]


@unittest.skipUnless(CPP_TRAINER and PYTHON_WITH_OTEL, "set by ctest: LENS_PRETRAIN_GPT (the C++ trainer), "
                     "LENS_VENV_PYTHON (an interpreter with opentelemetry-api)")
class SameTelemetryAsTheCppTrainer(unittest.TestCase):
    """Both trainers, the same flags, on the CUDA runtime's simulator with device timing on (docs/GPU.md): the same
    spans, device spans included."""

    @classmethod
    def setUpClass(cls):
        cls.python_dir = tempfile.TemporaryDirectory(prefix="lens-pretrain-py-")
        cls.cpp_dir = tempfile.TemporaryDirectory(prefix="lens-pretrain-cpp-")
        flags = FLAGS + ["--testing-fake-cuda", FAKE_CUDART, "--testing-kernel-us", "300", "--peak-tflops", "0.001"]
        device = dict(MEGATRON_OTEL_DEVICE_TIMING="cuda", LENS_CUDART_LIBRARY=FAKE_CUDART)
        # Rank 1 (stage 0, a pipeline sender) profiled by torch.profiler over iterations 3 and 4 (Megatron's flags).
        profile = ["--profile", "--use-pytorch-profiler", "--profile-step-start", "3", "--profile-step-end", "5",
                   "--profile-ranks", "1", "--tensorboard-dir", os.path.join(cls.python_dir.name, "profile")]
        cls.python_out = torchrun(TRAINER, flags + profile, cls.python_dir.name, **device)
        torchrun(CPP_TRAINER, flags, cls.cpp_dir.name, python=False, **device)
        cls.python_spans, cls.python_resources = telemetry(cls.python_dir.name)
        cls.cpp_spans, cls.cpp_resources = telemetry(cls.cpp_dir.name)

    @classmethod
    def tearDownClass(cls):
        cls.python_dir.cleanup()
        cls.cpp_dir.cleanup()

    def test_the_same_span_names_parentage_and_links(self):
        # Device spans apart (the next test): one span differs in how each trainer opens it.
        python_names, python_parents, python_links = shape(host_spans(self.python_spans))
        cpp_names, cpp_parents, cpp_links = shape(host_spans(self.cpp_spans))
        self.assertEqual(python_names, cpp_names)
        self.assertEqual(python_parents, cpp_parents)
        self.assertEqual(python_links, cpp_links)
        self.assertIn(("megatron.pp.recv_forward.linked", "megatron.p2p.send_forward"), python_links)
        self.assertIn(("megatron.train", "megatron.pretrain"), python_links)  # the second segment's

    def test_the_same_resource_keys_and_one_run_id(self):
        python_keys = set().union(*(r.keys() for r in self.python_resources))
        cpp_keys = set().union(*(r.keys() for r in self.cpp_resources))
        self.assertEqual(python_keys, cpp_keys)
        self.assertIn("dl.pipeline_parallel.size", python_keys)
        run_ids = {r["nemo.run.id"]["stringValue"] for r in self.python_resources}
        self.assertEqual(len(run_ids), 1)
        ranks = {r["dl.rank"]["intValue"] for r in self.python_resources}
        self.assertEqual(ranks, {"0", "1", "2", "3"})

    def test_the_device_timed_spans_have_their_device_time(self):
        # The same device spans, but for the pipeline's linked receive: the Python trainer opens it through the
        # OpenTelemetry API as Megatron does, a span of no group, which is never device-timed (docs/GPU.md).
        python_devices, cpp_devices = (shape(device_spans(spans))[0] for spans in (self.python_spans, self.cpp_spans))
        self.assertEqual(python_devices, cpp_devices - collections.Counter(
            {"megatron.pp.recv_forward.linked.device": cpp_devices["megatron.pp.recv_forward.linked.device"]}))
        self.assertIn("megatron.layer.mlp.device", python_devices)
        for spans in (self.python_spans, self.cpp_spans):
            by_id = {s["spanId"]: s for s in spans}
            devices = [s for s in spans if s["name"].endswith(".device")]
            hosts = [s for s in spans if s["name"] in ("megatron.layer.self_attention", "megatron.layer.mlp",
                                                       "megatron.layer.forward", "megatron.forward_backward")]
            self.assertEqual(len([d for d in devices if by_id[d["parentSpanId"]] in hosts]), len(hosts))
            for d in devices:
                host = by_id[d["parentSpanId"]]
                self.assertEqual(d["name"], host["name"] + ".device")
                if host["name"] in ("megatron.layer.self_attention", "megatron.layer.mlp"):
                    self.assertGreaterEqual(int(d["endTimeUnixNano"]) - int(d["startTimeUnixNano"]), 300_000)

    def test_mfu_is_the_throughput_over_the_given_peak(self):
        for directory in (self.python_dir.name, self.cpp_dir.name):
            for path in glob.glob(os.path.join(directory, "telemetry", "*", "rank*.metrics.jsonl")):
                last = {}
                with open(path, encoding="utf-8") as lines:
                    for line in lines:
                        for resource_metrics in json.loads(line)["resourceMetrics"]:
                            for scope in resource_metrics["scopeMetrics"]:
                                for metric in scope["metrics"]:
                                    if "gauge" in metric:
                                        last[metric["name"]] = metric["gauge"]["dataPoints"][-1].get("asDouble")
                tflops = last["megatron.training.throughput_tflops"]
                self.assertAlmostEqual(last["megatron.training.mfu"], tflops / 0.001, delta=1e-9 * tflops, msg=path)

    @unittest.skipUnless(LENS_TOOL, "set by ctest: LENS_TOOL")
    def test_a_torch_profiler_trace_merges_beside_its_rank_on_the_same_clock(self):
        """`lens convert --merge` of the real torch.profiler trace of rank 1: its events on a process of their own
        after rank 1's, and on its clock: the matrix products torch ran inside rank 1's micro-batch spans, not
        before or after them (the micro-batches are milliseconds apart, a misalignment of a millisecond shows)."""
        trace = os.path.join(self.python_dir.name, "profile", "rank1.pt.trace.json")
        merged = os.path.join(self.python_dir.name, "merged.json")
        run = subprocess.run([LENS_TOOL, "convert", os.path.join(self.python_dir.name, "telemetry"), "--to",
                              "chrome-json", "-o", merged, "--merge", trace, "--merge-rank", "1"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with open(merged, encoding="utf-8") as f:
            out = json.load(f)
        self.assertEqual(str(out["baseTimeNanoseconds"]), out["metadata"]["lens.time_origin_unix_nano"])
        names = {e["pid"]: e["args"]["name"] for e in out["traceEvents"] if e.get("name") == "process_name"}
        rank1 = next(pid for pid, name in names.items() if name.startswith("rank 1 ("))
        profiler = next(pid for pid, name in names.items() if name == "rank 1 torch.profiler")
        order = {e["pid"]: e["args"]["sort_index"] for e in out["traceEvents"] if e.get("name") == "process_sort_index"}
        self.assertEqual(sorted(order, key=order.get).index(profiler), sorted(order, key=order.get).index(rank1) + 1)
        events = [e for e in out["traceEvents"] if e.get("ph") == "X"]
        micro = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["pid"] == rank1
                 and e["name"] in ("megatron.microbatch.forward", "megatron.microbatch.backward")]
        products = [e for e in events if e["pid"] == profiler and e["name"] in ("aten::mm", "aten::addmm", "aten::bmm")]
        self.assertGreater(len(products), 20, "torch's matrix products in the profile")
        inside = [p for p in products if any(a <= p["ts"] and p["ts"] + p["dur"] <= b for a, b in micro)]
        self.assertGreaterEqual(len(inside), 0.9 * len(products), "torch's matrix products inside the micro-batches")

    @unittest.skipUnless(LENS_TOOL, "set by ctest: LENS_TOOL")
    def test_the_page_draws_the_profile_below_its_rank(self):
        """`lens report --html --merge`: the profile's events of the iterations shown, on a lane of their own."""
        page = os.path.join(self.python_dir.name, "merged.html")
        run = subprocess.run([LENS_TOOL, "report", os.path.join(self.python_dir.name, "telemetry"), "--steps", "3-4",
                              "--html", page, "--merge",
                              os.path.join(self.python_dir.name, "profile", "rank1.pt.trace.json"),
                              "--merge-rank", "1"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(page, encoding="utf-8") as f:
            text = f.read()
        self.assertIn('data-profile-rank="1"', text)
        self.assertGreater(text.count('class="profiler"'), 20)
        self.assertIn("<title>aten::mm ", text)
        lanes = re.findall(r'data-(?:rank-lane|profile-rank)="(\d+)"', text)
        self.assertEqual(lanes[lanes.index("1") + 1], "1", "the profile's lane right below rank 1's")

    @unittest.skipUnless(LENS_TOOL, "set by ctest: LENS_TOOL")
    def test_a_profile_with_no_time_base_is_refused_with_what_to_add(self):
        relative = os.path.join(self.python_dir.name, "relative.json")
        with open(relative, "w", encoding="utf-8") as f:
            json.dump([{"name": "aten::mm", "ph": "X", "ts": 248, "dur": 10, "pid": "CPU functions", "tid": 1}], f)
        run = subprocess.run([LENS_TOOL, "convert", os.path.join(self.python_dir.name, "telemetry"), "--to",
                              "chrome-json", "-o", os.path.join(self.python_dir.name, "no.json"), "--merge", relative],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 2)
        self.assertIn("has no time base", run.stderr)
        self.assertIn("baseTimeNanoseconds", run.stderr)
        # A file that is no JSON, or is not there: refused by name, nothing written.
        broken = os.path.join(self.python_dir.name, "broken.json")
        with open(broken, "w", encoding="utf-8") as f:
            f.write('{"traceEvents": [{"ph": "X", "ts": 1')
        for trace, said in ((broken, "is not JSON"), (os.path.join(self.python_dir.name, "absent.json"),
                                                      "cannot read")):
            out = os.path.join(self.python_dir.name, "never.json")
            run = subprocess.run([LENS_TOOL, "convert", os.path.join(self.python_dir.name, "telemetry"), "--to",
                                  "chrome-json", "-o", out, "--merge", trace], capture_output=True, text=True,
                                 timeout=120)
            self.assertEqual(run.returncode, 2, run.stderr)
            self.assertIn(said, run.stderr)
            self.assertFalse(os.path.exists(out))

    def test_nothing_dropped_and_the_log_lines(self):
        self.assertEqual(len(re.findall(r"lens: spans: \d+ produced, \d+ exported, 0 dropped", self.python_out)), 4)
        self.assertIn(" iteration        6/       6 | learning rate:", self.python_out)


def losses_of(output):
    return [float(x) for x in re.findall(r"lm loss: ([0-9.E+-]+)", output)]


def attributes_of(span):
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


def contract_names_for(trainer):
    """The names of CONTRACT §6's table of Megatron-LM's spans that `the trainers` column gives to `trainer`."""
    with open(os.path.join(SOURCE, "docs", "CONTRACT.md"), encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("### Megatron-LM's span names"):]
    table = table[:table.index("\n#", 1)]
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|.*\| (\S+)[^|]*\|$", table, re.M)
            if m.group(2) in ("both", trainer)}


@unittest.skipUnless(PYTHON_WITH_OTEL, "set by ctest: LENS_VENV_PYTHON (an interpreter with opentelemetry-api)")
class TensorParallel(unittest.TestCase):
    """TP 2 x PP 2 against TP 1 x PP 2 of the same seed, model and global batch: the same losses within float
    rounding, with and without recomputation; the ranks in Megatron's order in the resource; every tensor-parallel
    all-reduce a span of its pass."""

    FLAGS = ["--pipeline-model-parallel-size", "2", "--num-layers", "4", "--hidden-size", "32",
             "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
             "--train-iters", "4", "--log-interval", "1", "--otel-enabled", "--otel-span-groups", "all"]

    def test_the_split_model_trains_as_the_whole_one_and_is_traced(self):
        with tempfile.TemporaryDirectory() as whole, tempfile.TemporaryDirectory() as split, \
                tempfile.TemporaryDirectory() as recomputed:
            want = losses_of(torchrun(TRAINER, self.FLAGS, whole, nproc=2))
            tp = ["--tensor-model-parallel-size", "2"]
            got = losses_of(torchrun(TRAINER, self.FLAGS + tp, split))
            got_recomputed = losses_of(torchrun(TRAINER, self.FLAGS + tp + [
                "--recompute-granularity", "full", "--recompute-method", "uniform"], recomputed))
            self.assertEqual(len(want), 4)
            for losses in (got, got_recomputed):
                self.assertEqual(len(losses), 4)
                for a, b in zip(losses, want):
                    self.assertAlmostEqual(a, b, delta=1e-3 * abs(b))
            spans, resources = telemetry(split)
            recomputed_spans, _ = telemetry(recomputed)
        for r in resources:
            rank = int(r["dl.rank"]["intValue"])
            keys = ("dl.tensor_parallel.size", "dl.tensor_parallel.rank", "dl.pipeline_parallel.rank",
                    "dl.data_parallel.rank")
            self.assertEqual(tuple(int(r[k]["intValue"]) for k in keys), (2, rank % 2, rank // 2, 0))
        by_id = {s["spanId"]: s for s in spans}
        passes = collections.Counter()
        for s in spans:
            if s["name"] != "megatron.tp.all_reduce":
                continue
            a = attributes_of(s)
            passes[a["megatron.tp.pass"]] += 1
            self.assertEqual(a["megatron.tp.region"], "reduce_from_tensor_model_parallel_region"
                             if a["megatron.tp.pass"] == "forward" else "copy_to_tensor_model_parallel_region")
            parent = by_id[s["parentSpanId"]]["name"]
            self.assertIn(parent, ("megatron.layer.self_attention", "megatron.layer.mlp")
                          if a["megatron.tp.pass"] == "forward" else ("megatron.microbatch.backward",))
        # 4 ranks x 2 layers x 2 all-reduces, in 4 iterations of 4 micro-batches (and the final evaluation's 4 x 4
        # forwards).
        self.assertEqual(passes, {"forward": 4 * 2 * 2 * (16 + 16), "backward": 4 * 2 * 2 * 16})
        recomputes = [s for s in recomputed_spans if s["name"] == "megatron.activation.recompute"]
        self.assertEqual(len(recomputes), 4 * 2 * 16)  # each layer in each micro-batch's backward

    def test_the_help_groups_the_otel_flags_as_megatron_does(self):
        help_text = subprocess.run([sys.executable, TRAINER, "--help"], capture_output=True, text=True,
                                   env=clean_env(PYTHONPATH=os.path.join(SOURCE, "python")), timeout=120).stdout
        group = help_text[help_text.index("\nopentelemetry:\n"):]
        for flag in ("--otel-enabled", "--otel-service-name", "--otel-span-groups"):
            self.assertIn(flag, group)
        for flag in ("--tensor-model-parallel-size", "--recompute-granularity", "--recompute-method"):
            self.assertNotIn(flag, group)

    def test_a_tensor_parallel_size_that_does_not_divide_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(AssertionError) as refused:
                torchrun(TRAINER, self.FLAGS + ["--tensor-model-parallel-size", "3"], tmp)
        self.assertIn("the world size 4 is not divisible by --tensor-model-parallel-size 3", str(refused.exception))


@unittest.skipUnless(PYTHON_WITH_OTEL, "set by ctest: LENS_VENV_PYTHON (an interpreter with opentelemetry-api)")
class MegatronNames(unittest.TestCase):
    def test_the_names_are_the_contracts_table(self):
        # SPAN_NAMES=megatron with every feature the table names for this trainer (TP 2 x PP 2 x DP 2: every
        # transfer and sync; recomputation, evaluation, saves, a resumed run): exactly the Megatron-LM names CONTRACT
        # §6 lists for it.
        want = contract_names_for("Python")
        self.assertGreater(len(want), 30)
        flags = TensorParallel.FLAGS + ["--tensor-model-parallel-size", "2", "--recompute-granularity", "full",
                                        "--recompute-method", "block", "--save-interval", "2", "--eval-interval", "2",
                                        "--eval-iters", "1"]
        got = set()
        with tempfile.TemporaryDirectory() as tmp:
            torchrun(TRAINER, flags, tmp, nproc=8, MEGATRON_OTEL_SPAN_NAMES="megatron")
            first, _ = telemetry(tmp)
            shutil.rmtree(os.path.join(tmp, "telemetry"))
            resumed = flags + ["--load", os.path.join(tmp, "checkpoints")]
            resumed[resumed.index("--train-iters") + 1] = "6"
            torchrun(TRAINER, resumed, tmp, nproc=8, MEGATRON_OTEL_SPAN_NAMES="megatron")
            second, _ = telemetry(tmp)
        for s in first + second:
            if s["name"].startswith("megatron.") or s["name"] == "pre_startup":
                got.add(s["name"])
        self.assertEqual(got, want)
        steps = [attributes_of(s) for s in first if s["name"] == "megatron.evaluate.step"]
        self.assertTrue(steps)
        self.assertEqual({a["megatron.eval_iteration"] for a in steps}, {"1"})
        for s in first:
            if s["name"] in ("megatron.startup", "megatron.train"):
                self.assertNotIn("parentSpanId", s, s["name"])  # traces of their own


class RunsByHandAndWithoutLens(unittest.TestCase):
    def test_the_loss_falls_with_only_the_fallbacks(self):
        # By hand (RANK, WORLD_SIZE, MASTER_*), and lens's Python sources without its native code: Megatron's
        # idiom falls back to the no-ops, and training is unchanged.
        port = str(free_port())
        env = clean_env(PYTHONPATH=os.path.join(SOURCE, "python"), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                        WORLD_SIZE="2")
        # A text this test owns, which 40 iterations learn well past the noise (the default corpus, the project's
        # docs, changes with every edit of them).
        corpus = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
        with corpus:
            corpus.write("the quick brown fox jumps over the lazy dog. " * 3000)
        self.addCleanup(os.unlink, corpus.name)
        flags = ["--pipeline-model-parallel-size", "2", "--num-layers", "2", "--hidden-size", "32",
                 "--num-attention-heads", "2", "--seq-length", "16", "--micro-batch-size", "2",
                 "--global-batch-size", "4", "--train-iters", "40", "--log-interval", "10", "--lr-warmup-iters", "2",
                 "--data-path", corpus.name, "--otel-enabled"]
        ranks = [subprocess.Popen([sys.executable, TRAINER] + flags, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
        outputs = [rank.communicate(timeout=240)[0] for rank in ranks]
        self.assertEqual([rank.returncode for rank in ranks], [0, 0], outputs)
        losses = [float(x) for x in re.findall(r"lm loss: ([0-9.E+-]+)", outputs[1])]
        self.assertEqual(len(losses), 4, outputs[1])
        self.assertLess(losses[-1], losses[0] - 0.5, losses)
        self.assertNotIn("lens: spans", outputs[1])  # no telemetry at all


if __name__ == "__main__":
    unittest.main()
