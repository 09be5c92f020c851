"""One process, one pipeline, one thread-local context: spans opened from Python and from C++ (another extension
module linked to the same liblens.so) nest into each other on the same thread, and land in one file."""

import unittest

import lens_cpp_peer
from lens.helpers import managed_span
from lens.megatron import MegatronSpanGroup
from support import Run


class CrossLanguageTest(unittest.TestCase):
    def test_a_python_span_is_the_parent_of_a_cpp_span_and_the_other_way_round(self):
        with Run("all", group_cls=MegatronSpanGroup) as run:
            with managed_span(MegatronSpanGroup.STEP, "python.outer") as outer:
                def inside():
                    with managed_span(MegatronSpanGroup.MICROBATCH, "python.inner") as inner:
                        self.assertEqual(lens_cpp_peer.current_ids()[1], inner.get_span_context().span_id_hex)

                trace, cpp_span = lens_cpp_peer.layer_span("cpp.layer", inside)
                self.assertEqual(trace, outer.get_span_context().trace_id_hex)
        outer, layer, inner = run.span("python.outer"), run.span("cpp.layer"), run.span("python.inner")
        self.assertEqual(layer["parentSpanId"], outer["spanId"])
        self.assertEqual(layer["spanId"], cpp_span)
        self.assertEqual(inner["parentSpanId"], layer["spanId"])
        self.assertEqual({s["traceId"] for s in (outer, layer, inner)}, {outer["traceId"]})

    def test_groups_switch_for_both_languages_at_once(self):
        with Run("per_step", group_cls=MegatronSpanGroup) as run:
            lens_cpp_peer.layer_span("cpp.off", lambda: None)  # `layer` is not in per_step
            import lens
            lens.set_enabled_span_groups({"layer"})
            lens_cpp_peer.layer_span("cpp.on", lambda: None)
        self.assertEqual([s["name"] for s in run.spans], ["cpp.on"])


if __name__ == "__main__":
    unittest.main()
