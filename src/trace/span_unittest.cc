// Spans as a collector sees them: tree shape, parentage across threads, attributes, events, links, status,
// exceptions, limits, and no heap allocation on the span path.
#include "lens/span.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "lens/version.h"
#include "support/alloc_counter.h"
#include "support/capture.h"
#include "trace/record.h"
#include "trace/span_drain.h"
#include "trace/thread_state.h"

namespace lens {
namespace {

namespace mg = megatron::group;
using testing::attribute;
using testing::Capture;
using testing::json;

TEST(Spans, NestedScopesMakeOneTreeInOneTrace) {
  Capture c;
  {
    LENS_SPAN(mg::job, "root");
    {
      LENS_SPAN(mg::step, "child", {"megatron.iteration", 3});
      { LENS_SPAN(mg::layer, "grandchild"); }
    }
    { LENS_SPAN(mg::step, "sibling"); }
  }
  json root = c.span("root"), child = c.span("child"), grandchild = c.span("grandchild"), sibling = c.span("sibling");
  ASSERT_FALSE(root.is_null());
  EXPECT_FALSE(root.contains("parentSpanId"));
  EXPECT_EQ(child["parentSpanId"], root["spanId"]);
  EXPECT_EQ(grandchild["parentSpanId"], child["spanId"]);
  EXPECT_EQ(sibling["parentSpanId"], root["spanId"]);
  for (const json* s : {&child, &grandchild, &sibling}) EXPECT_EQ((*s)["traceId"], root["traceId"]);
  EXPECT_EQ(attribute(child, "megatron.iteration")["intValue"], "3");
  // Times nest.
  auto t = [](const json& s, const char* k) { return std::stoull(s[k].get<std::string>()); };
  EXPECT_LE(t(root, "startTimeUnixNano"), t(child, "startTimeUnixNano"));
  EXPECT_LE(t(grandchild, "endTimeUnixNano"), t(child, "endTimeUnixNano"));
  EXPECT_LE(t(child, "endTimeUnixNano"), t(root, "endTimeUnixNano"));
  // Children end first: they are exported first (light scopes and slot spans alike: one queue, in the order they end).
  std::vector<json> spans = c.spans();
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[0]["name"], "grandchild");
  EXPECT_EQ(spans[1]["name"], "child");
  EXPECT_EQ(spans[3]["name"], "root");
}

// Every communication span carries the rank's count of them so far, in the order they start, from any
// thread; no other span has it; the base catalogue (no `communication` group) adds nothing.
TEST(Spans, CommunicationSpansCarryTheRanksCollectiveSequence) {
  {
    Capture c;
    {
      LENS_SPAN(mg::step, "step");
      { LENS_SPAN(mg::communication, "first", {"peer", 1}); }
      std::thread([] { LENS_SPAN(mg::communication, "second"); }).join();
      { LENS_SPAN(mg::layer, "layer"); }
      { LENS_SPAN(mg::communication, "third"); }
    }
    EXPECT_EQ(attribute(c.span("first"), "lens.collective.seq")["intValue"], "1");
    EXPECT_EQ(attribute(c.span("first"), "peer")["intValue"], "1");
    EXPECT_EQ(attribute(c.span("second"), "lens.collective.seq")["intValue"], "2");
    EXPECT_EQ(attribute(c.span("third"), "lens.collective.seq")["intValue"], "3");
    EXPECT_TRUE(attribute(c.span("step"), "lens.collective.seq").is_null());
    EXPECT_TRUE(attribute(c.span("layer"), "lens.collective.seq").is_null());
  }
  Config base = testing::capture_config("all");
  base.catalogue = base_catalogue();
  Capture c(base);
  { LENS_SPAN(group::step, "step"); }
  EXPECT_TRUE(attribute(c.span("step"), "lens.collective.seq").is_null());
}

// A step span is a root of the trace every rank derives, whatever span is current, and a trace-id
// ratio sampler decides on that id (so every rank keeps or drops the same iterations).
TEST(Spans, ASpanGivenATraceIdIsARootOfThatTrace) {
  Config config = testing::capture_config("all");
  config.traces_sampler = TracesSampler::kParentBasedTraceIdRatio;
  config.traces_sampler_ratio = 0.25;
  Capture c(config);
  std::vector<std::int64_t> kept_expected;
  {
    LENS_SPAN(mg::job, "megatron.train");
    for (std::int64_t iteration = 1; iteration <= 40; ++iteration) {
      const TraceId id = step_trace_id("run-s", iteration);
      std::uint64_t low = 0;
      for (int i = 8; i < 16; ++i) low = (low << 8) | id.bytes[static_cast<std::size_t>(i)];
      if (low < (std::uint64_t{1} << 62)) kept_expected.push_back(iteration);  // 0.25 * 2^64
      ScopedSpan step;
      step.start(mg::step, "megatron.train_step", {{"megatron.iteration", iteration}}, {.trace_id = &id});
    }
  }
  std::vector<std::int64_t> kept;
  for (const json& s : c.spans()) {
    if (s["name"] != "megatron.train_step") continue;
    EXPECT_FALSE(s.contains("parentSpanId")) << "a root, not a child of megatron.train";
    const std::int64_t iteration = std::stoll(attribute(s, "megatron.iteration")["intValue"].get<std::string>());
    std::string expected = to_traceparent(SpanContext{step_trace_id("run-s", iteration), SpanId{{1}}, 0, false});
    EXPECT_EQ(s["traceId"], expected.substr(3, 32));
    kept.push_back(iteration);
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, kept_expected);
  EXPECT_GT(kept.size(), 2u);
  EXPECT_LT(kept.size(), 20u);
}

// The step layout (CONTRACT §6) where the consumer gives no trace id (Megatron-LM's Python code): each step span
// starts the trace of the rank's count of steps so far, linked to where it would have been, also where LENS_SPAN
// could be a light scope (the default sampler). It is a child of the trace's root, `lens.step`, which this rank (the
// lowest that exports) exports with the step's times.
TEST(Spans, InTheStepLayoutAStepGivenNoTraceIdStartsTheNextStepTrace) {
  Config config = testing::capture_config("all");
  config.trace_layout = TraceLayout::kStep;
  config.run_id = "run-l";
  Capture c(config);
  std::string segment_span;
  {
    LENS_SPAN(mg::job, "megatron.train");
    segment_span = to_traceparent(current_context()).substr(36, 16);
    for (int i = 0; i < 3; ++i) {
      {
        const std::string_view name = i == 1 ? "megatron.train.iteration" : "megatron.train_step";  // either mode's
        LENS_SPAN(mg::step, name);
        LENS_SPAN(mg::forward_backward, "megatron.forward_backward");
      }
      // Today's Megatron-LM's other spans of the step group: in the segment's trace, never a step of their own.
      LENS_SPAN(mg::step, "megatron.train.iteration_report");
      LENS_SPAN(mg::step, "megatron.train.log");
    }
  }
  for (const json& s : c.spans()) {
    if (s["name"] == "megatron.train.iteration_report" || s["name"] == "megatron.train.log") {
      EXPECT_FALSE(s.contains("links") && !s["links"].empty()) << s["name"];
    }
  }
  std::vector<std::string> step_traces;
  std::map<std::string, json> roots;  // by span id
  for (const json& s : c.spans())
    if (s["name"] == "lens.step") roots[s["spanId"]] = s;
  ASSERT_EQ(roots.size(), 3u);
  for (const json& s : c.spans()) {
    if (s["name"] != "megatron.train_step" && s["name"] != "megatron.train.iteration") continue;
    ASSERT_EQ(s["links"].size(), 1u);
    EXPECT_EQ(s["links"][0]["spanId"], segment_span);
    step_traces.push_back(s["traceId"]);
    const json& root = roots[s["parentSpanId"]];
    ASSERT_FALSE(root.is_null()) << "under its trace's lens.step";
    EXPECT_FALSE(root.contains("parentSpanId"));
    EXPECT_EQ(root["traceId"], s["traceId"]);
    EXPECT_EQ(root["startTimeUnixNano"], s["startTimeUnixNano"]);
    EXPECT_EQ(root["endTimeUnixNano"], s["endTimeUnixNano"]);
    EXPECT_FALSE(root.contains("attributes") && !root["attributes"].empty());
  }
  ASSERT_EQ(step_traces.size(), 3u);
  for (std::int64_t n = 0; n < 3; ++n) {
    const TraceId trace = step_trace_id("run-l", n);
    const std::string root = to_traceparent(SpanContext{trace, step_root_span_id(trace), 0, false});
    EXPECT_EQ(step_traces[static_cast<std::size_t>(n)], root.substr(3, 32));
    EXPECT_TRUE(roots.contains(root.substr(36, 16))) << "the root's id is derived from the trace's";
  }
  for (const json& s : c.spans()) {  // what runs inside a step is in the step's trace
    if (s["name"] != "megatron.forward_backward") continue;
    EXPECT_NE(std::find(step_traces.begin(), step_traces.end(), s["traceId"]), step_traces.end());
  }
}

// Every other rank's step span is a child of the root the lowest exporting rank exports: a remote parent, and no
// `lens.step` of its own, so each step has exactly one root.
TEST(Spans, InTheStepLayoutOnlyTheLowestExportingRankExportsTheRoots) {
  Config config = testing::capture_config("all");
  config.trace_layout = TraceLayout::kStep;
  config.rank_strategy = "all_ranks";
  config.run_id = "run-r";
  Capture c(config, {}, RankInfo{1, 2, 1});
  for (int i = 0; i < 2; ++i) {
    LENS_SPAN(mg::step, "megatron.train_step");
  }
  int steps = 0;
  for (const json& s : c.spans()) {
    EXPECT_NE(s["name"], "lens.step");
    if (s["name"] != "megatron.train_step") continue;
    const TraceId trace = step_trace_id("run-r", steps++);
    EXPECT_EQ(s["parentSpanId"], to_traceparent(SpanContext{trace, step_root_span_id(trace), 0, false}).substr(36, 16));
    EXPECT_TRUE(s["flags"].get<int>() & 0x200) << "the parent is remote (OTLP's SPAN_FLAGS_CONTEXT_IS_REMOTE)";
  }
  EXPECT_EQ(steps, 2);
}

// A span started with a tracer's scope is exported in that scope's ScopeSpans; lens's own spans in `lens` at lens's
// version. One request holds one ScopeSpans per scope.
TEST(Spans, EachInstrumentationScopeIsAScopeSpansOfItsOwn) {
  Capture c(testing::capture_config("all"));
  const InstrumentationScope training = instrumentation_scope("megatron.training", "0.14.0");
  EXPECT_NE(training.id, 0);
  EXPECT_EQ(instrumentation_scope("megatron.training", "0.14.0").id, training.id) << "the same pair, the same scope";
  EXPECT_NE(instrumentation_scope("megatron.training").id, training.id) << "another version, another scope";
  EXPECT_EQ(instrumentation_scope("lens").id, 0);
  EXPECT_EQ(instrumentation_scope("").id, 0);
  {
    Span step(mg::step, "megatron.train_step", {}, {.scope = training});
    { LENS_SPAN(mg::layer, "lens.layer"); }
    Span(mg::step, "megatron.optimizer_step", {}, {.scope = training}).end();
  }
  std::map<std::string, std::set<std::string>> names_by_scope;
  for (const json& r : c.requests()) {
    std::set<std::string> in_request;
    for (const json& rs : r["resourceSpans"])
      for (const json& ss : rs["scopeSpans"]) {
        const std::string scope = ss["scope"]["name"].get<std::string>() + "@" + ss["scope"].value("version", "");
        EXPECT_TRUE(in_request.insert(scope).second) << scope << " twice in one request";
        for (const json& s : ss["spans"]) names_by_scope[scope].insert(s["name"]);
      }
  }
  EXPECT_EQ(names_by_scope, (std::map<std::string, std::set<std::string>>{
                                {"megatron.training@0.14.0", {"megatron.train_step", "megatron.optimizer_step"}},
                                {std::string("lens@") + LENS_VERSION_STRING, {"lens.layer"}}}));
}

// A key set again keeps its last value and appears once, in a span with few attributes and in one with more than
// the exporter decodes at once (16).
TEST(Spans, AnAttributeSetAgainKeepsItsLastValue) {
  static const char* const kKeys[] = {"k0",  "k1",  "k2",  "k3",  "k4",  "k5",  "k6",  "k7",  "k8",  "k9",
                                      "k10", "k11", "k12", "k13", "k14", "k15", "k16", "k17", "k18", "k19"};
  Capture c;
  for (int distinct : {3, 20}) {
    LENS_SPAN_NAMED(s, mg::job, std::string_view(distinct == 3 ? "few" : "many"), {"k0", -1});
    for (int i = 0; i < distinct; ++i) s.set_attribute(std::string_view(kKeys[i]), i);
    s.set_attribute("k1", 100);  // again, last
  }
  for (const char* name : {"few", "many"}) {
    json span = c.span(name);
    const std::size_t distinct = std::string(name) == "few" ? 3 : 20;
    ASSERT_EQ(span["attributes"].size(), distinct) << span.dump();
    EXPECT_EQ(attribute(span, "k0")["intValue"], "0");
    EXPECT_EQ(attribute(span, "k1")["intValue"], "100");
    EXPECT_EQ(attribute(span, "k2")["intValue"], "2");
  }
}

TEST(Spans, DisabledGroupEvaluatesNothingAndLeavesNoGapInTheTree) {
  Capture c(testing::capture_config("job,layer"));
  int evaluated = 0;
  auto expensive = [&] {
    ++evaluated;
    return 1;
  };
  {
    LENS_SPAN(mg::job, "root");
    {
      LENS_SPAN(mg::data_loading, "off", {"x", expensive()});  // off: no span, arguments not evaluated
      LENS_SPAN(mg::layer, "layer");
    }
  }
  EXPECT_EQ(evaluated, 0);
  EXPECT_TRUE(c.span("off").is_null());
  EXPECT_EQ(c.span("layer")["parentSpanId"], c.span("root")["spanId"]);  // attaches to the nearest existing span
}

// With hang snapshots on, the loop's groups (step, forward_backward, microbatch, communication) are kept as
// positions when not enabled: the site runs, nothing is exported, and the tree is as if the span were not there.
TEST(Spans, APositionOnlySpanIsNeverExportedNorAParent) {
  Capture c(testing::capture_config("job,layer"));
  {
    LENS_SPAN(mg::job, "root");
    {
      LENS_SPAN_NAMED(position, mg::step, "position", {"megatron.iteration", 3});
      EXPECT_TRUE(LENS_GROUP_ENABLED(mg::step));    // the site runs
      EXPECT_FALSE(is_enabled(mg::step));           // but the group is not enabled
      EXPECT_FALSE(position.context().is_valid());  // no ids: not a parent, not a link target
      LENS_SPAN(mg::layer, "layer");
    }
  }
  EXPECT_TRUE(c.span("position").is_null());
  EXPECT_EQ(c.span("layer")["parentSpanId"], c.span("root")["spanId"]);
  EXPECT_FALSE(enabled_span_groups().contains(mg::step));  // what is enabled is what is exported
  EXPECT_EQ(c.telemetry().span_stats().produced, 2u);      // root and layer: positions are not counted
}

// Without hang snapshots there are no positions: a group that is off costs its check only.
TEST(Spans, WithoutHangSnapshotsAGroupThatIsOffEvaluatesNothing) {
  Config config = testing::capture_config("job");
  config.hang_signal = 0;
  Capture c(config);
  int evaluated = 0;
  { LENS_SPAN(mg::microbatch, "off", {"x", ++evaluated}); }
  EXPECT_EQ(evaluated, 0);
  EXPECT_FALSE(LENS_GROUP_ENABLED(mg::step));
}

// What kind of span each start makes: the handle says it with its kind, and a light scope written to keeps its kind
// (its slot beside its context entry) while its writes reach the exported span.
class ScopedProbe : public ScopedSpan {
 public:
  using Span::handle;
};
class SpanProbe : public Span {
 public:
  using Span::handle;
  using Span::Span;
};
using Kind = internal::SpanHandle::Kind;

TEST(SpanKinds, EachStartGivesItsHandleTheKindOfSpanItIs) {
  Capture c(testing::capture_config("job,layer"));  // hang snapshots on: step is kept as a position
  {
    ScopedProbe light;
    light.start(mg::job, "light");
    EXPECT_EQ(light.handle().kind, Kind::kLight);
    ScopedProbe copied_name;
    copied_name.start(mg::layer, std::string("copied"));
    EXPECT_EQ(copied_name.handle().kind, Kind::kSlot);  // a name that is no literal takes a slot
    SpanProbe slot(mg::layer, "slot");
    EXPECT_EQ(slot.handle().kind, Kind::kSlot);
    ScopedProbe position;
    position.start(mg::step, "position");
    EXPECT_EQ(position.handle().kind, Kind::kPosition);
    light.set_attribute("megatron.iteration", 3);  // promoted to a slot
    EXPECT_EQ(light.handle().kind, Kind::kLight);
    EXPECT_TRUE(light.is_recording());
    slot.end();
    EXPECT_EQ(slot.handle().kind, Kind::kNone);
    EXPECT_FALSE(slot.is_recording());
  }
  EXPECT_EQ(attribute(c.span("light"), "megatron.iteration")["intValue"], "3");
  EXPECT_FALSE(c.span("slot").is_null());
  EXPECT_TRUE(c.span("position").is_null());
}

TEST(SpanKinds, AGroupThatIsOffWithoutHangSnapshotsAndASampledOutSpanAreKindsOfTheirOwn) {
  Config config = testing::capture_config("job");
  config.hang_signal = 0;
  Capture c(config);
  ScopedProbe off;
  if (LENS_GROUP_ENABLED(mg::step)) off.start(mg::step, "off");
  EXPECT_EQ(off.handle().kind, Kind::kNotStarted);  // nothing but its kind written
  EXPECT_FALSE(off.context().is_valid());
  EXPECT_FALSE(off.is_recording());
  off.set_attribute("ignored", 1);
  off.end();
  EXPECT_FALSE(off.context().is_valid());
  const SpanContext unsampled_parent{TraceId{{1}}, SpanId{{2}}, 0, true};
  ContextScope scope(unsampled_parent);
  ScopedProbe light_sampled_out;
  light_sampled_out.start(mg::job, "sampled out");
  EXPECT_EQ(light_sampled_out.handle().kind, Kind::kSampledOut);
  EXPECT_FALSE(light_sampled_out.is_recording());
  EXPECT_EQ(current_context().span_id, light_sampled_out.context().span_id);  // its children follow it
  SpanProbe slot_sampled_out(mg::job, "sampled out too", {}, StartOptions{.parent = &unsampled_parent});
  EXPECT_EQ(slot_sampled_out.handle().kind, Kind::kSampledOut);
  EXPECT_TRUE(slot_sampled_out.context().is_valid());
}

// A plain lens::Span (a literal name, nothing written after its start) is queued as a scope record; one written to is
// queued with its header and arena. Both read back as the span they are.
TEST(SpanKinds, APlainSpanAndAWrittenOneExportAlike) {
  Capture c;
  const SpanContext remote{TraceId{{7}}, SpanId{{8}}, SpanContext::kSampledFlag, true};
  SpanContext root_context;
  {
    Span root(mg::job, "plain.root");
    root_context = root.context();
    Span child(mg::job, "plain.child", {}, StartOptions{.parent = &root_context});
    Span written(mg::job, "written.child", {}, StartOptions{.parent = &root_context});
    written.set_attribute("k", 1);
    Span under_remote(mg::job, "plain.under.remote", {}, StartOptions{.parent = &remote});
  }
  const json root = c.span("plain.root"), child = c.span("plain.child"), written = c.span("written.child"),
             under_remote = c.span("plain.under.remote");
  EXPECT_FALSE(root.contains("parentSpanId"));
  EXPECT_EQ(root["flags"].get<int>() & 0xff, 0x03);  // sampled, a random root trace id
  for (const json* s : {&child, &written}) {
    EXPECT_EQ((*s)["parentSpanId"], root["spanId"]);
    EXPECT_EQ((*s)["traceId"], root["traceId"]);
    EXPECT_EQ((*s)["kind"], 1);
    EXPECT_EQ((*s)["flags"], root["flags"]);
    EXPECT_GE(std::stoull((*s)["endTimeUnixNano"].get<std::string>()),
              std::stoull((*s)["startTimeUnixNano"].get<std::string>()));
  }
  EXPECT_EQ(attribute(written, "k")["intValue"], "1");
  EXPECT_EQ(under_remote["parentSpanId"], to_traceparent(remote).substr(36, 16));
  EXPECT_EQ(under_remote["flags"].get<int>() & 0x300, 0x300);  // the parent is known to be remote
}

TEST(SpanKinds, AnEndedSpansContextStaysReadableForALink) {
  Capture c;
  Span segment(mg::job, "segment");
  const SpanContext open = segment.context();
  segment.end();
  EXPECT_TRUE(segment.context().is_valid());
  EXPECT_EQ(segment.context().span_id, open.span_id);
  {
    LENS_SPAN_NAMED(scoped, mg::step, "scoped");
    const SpanContext before = scoped.context();
    scoped.end();
    EXPECT_EQ(scoped.context().span_id, before.span_id);
  }
  Span next(mg::job, "next");
  next.add_link(segment.context());
  next.end();
  EXPECT_EQ(c.span("next")["links"].size(), 1u);
}

// A writable buffer is copied, never kept as a pointer to the stack as a string literal is, and ends at its text.
TEST(TextArgs, OnlyConstArraysAreKeptByPointerAndBuffersEndAtTheirText) {
  static constexpr TextArg kLiteral("megatron.train_step");
  static_assert(kLiteral.is_static() && kLiteral.text() == "megatron.train_step");
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "step_%d", 3);
  TextArg from_buffer(buffer);
  EXPECT_FALSE(from_buffer.is_static());
  EXPECT_EQ(from_buffer.text(), "step_3");  // not 63 bytes with the NULs
  static const char kPadded[32] = "padded";
  EXPECT_EQ(TextArg(kPadded).text(), "padded");
  EXPECT_FALSE(TextArg(std::string("copied")).is_static());
  // An array that ends with a NUL is measured by strlen; one that does not is never read past its end.
  static constexpr char kNoNul[4] = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(TextArg(kNoNul).text(), "abc");  // at most its size - 1 bytes, as before
  char unterminated[3] = {'x', 'y', 'z'};
  EXPECT_EQ(TextArg(unterminated).text(), "xy");
  static_assert(TextArg("two\0parts").text() == "two");  // up to the first NUL, also when folded at compile time
  EXPECT_EQ(TextArg(kPadded).text().size(), 6u);
}

// The buffer is gone (and its stack reused) before the span is exported: the name and key were copied.
TEST(Spans, ANameAndKeyFromABufferOutliveTheBuffer) {
  Capture c;
  Span span = [] {
    char name[64], key[32];
    std::snprintf(name, sizeof name, "step_%d", 3);
    std::snprintf(key, sizeof key, "key_%d", 1);
    return Span(mg::job, name, {{key, 7}});
  }();
  [] {  // another frame over the same stack
    volatile char scribble[256];
    for (auto& byte : scribble) byte = 'x';
  }();
  span.end();
  json s = c.span("step_3");
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(attribute(s, "key_1"), json({{"intValue", "7"}}));
}

TEST(Spans, SpanIfRecordsOnlyWhenItsConditionHoldsAndEvaluatesItOnlyForAnEnabledGroup) {
  Capture c(testing::capture_config("job"));
  int evaluated = 0;
  auto holds = [&](bool value) {
    ++evaluated;
    return value;
  };
  { LENS_SPAN_IF(holds(true), mg::job, "kept"); }
  { LENS_SPAN_IF(holds(false), mg::job, "skipped"); }
  { LENS_SPAN_IF(holds(true), mg::layer, "group.off"); }
  EXPECT_EQ(evaluated, 2) << "the condition of a disabled group is not evaluated";
  EXPECT_FALSE(c.span("kept").is_null());
  EXPECT_TRUE(c.span("skipped").is_null());
  EXPECT_TRUE(c.span("group.off").is_null());
}

TEST(Spans, ContextCarriedIntoAnotherThread) {
  Capture c;
  {
    LENS_SPAN(mg::job, "main");
    SpanContext captured = current_context();
    std::thread worker([captured] {
      ContextScope scope(captured);
      LENS_SPAN(mg::data_loading, "worker");
    });
    worker.join();
    std::thread orphan([] { LENS_SPAN(mg::data_loading, "orphan"); });
    orphan.join();
  }
  EXPECT_EQ(c.span("worker")["parentSpanId"], c.span("main")["spanId"]);
  EXPECT_EQ(c.span("worker")["traceId"], c.span("main")["traceId"]);
  EXPECT_FALSE(c.span("orphan").contains("parentSpanId"));
  EXPECT_NE(c.span("orphan")["traceId"], c.span("main")["traceId"]);
}

TEST(Spans, ExplicitParentAndExplicitRoot) {
  Capture c;
  SpanContext remote = *from_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  {
    LENS_SPAN(mg::job, "current");
    Span with_parent(mg::step, "with_parent", {}, {.parent = &remote});
    Span new_trace(mg::step, "new_trace", {}, {.root = true});
    with_parent.end();
  }
  json p = c.span("with_parent"), r = c.span("new_trace");
  EXPECT_EQ(p["traceId"], "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(p["parentSpanId"], "b7ad6b7169203331");
  EXPECT_EQ(p["flags"].get<int>() & 0x300, 0x300);  // the parent is known to be remote
  EXPECT_FALSE(r.contains("parentSpanId"));
  EXPECT_NE(r["traceId"], c.span("current")["traceId"]);
  EXPECT_EQ(r["flags"].get<int>() & 0xff, 0x03);  // sampled, and a root trace id is random (W3C level 2)
}

TEST(Spans, SpanEndedOnAnotherThread) {
  Capture c;
  Span s(mg::step, "moved");
  std::thread([s = std::move(s)]() mutable { s.end(); }).join();
  EXPECT_FALSE(c.span("moved").is_null());
  EXPECT_EQ(c.telemetry().span_stats().produced, 1u);
}

TEST(Spans, EveryAttributeType) {
  Capture c;
  {
    const bool flags[] = {true, false};
    const std::int64_t ints[] = {1, -2, 3};
    const double reals[] = {0.5, -1.25};
    const std::string_view names[] = {"a", "b\"c"};
    std::string dynamic_key = "dyn.key";
    LENS_SPAN_NAMED(s, mg::job, "typed", {"b", true}, {"i", std::int64_t{-7}}, {"d", 2.5}, {"s", "text"});
    s.set_attributes({{"ba", std::span<const bool>(flags)},
                      {"ia", std::span<const std::int64_t>(ints)},
                      {"da", std::span<const double>(reals)},
                      {"sa", std::span<const std::string_view>(names)}});
    s.set_attribute(dynamic_key, std::string("value"));
    s.set_attribute("i", 8);  // a repeated key: the last value wins
  }
  json s = c.span("typed");
  EXPECT_EQ(attribute(s, "b"), json({{"boolValue", true}}));
  EXPECT_EQ(attribute(s, "i"), json({{"intValue", "8"}}));
  EXPECT_EQ(attribute(s, "d"), json({{"doubleValue", 2.5}}));
  EXPECT_EQ(attribute(s, "s"), json({{"stringValue", "text"}}));
  EXPECT_EQ(attribute(s, "dyn.key"), json({{"stringValue", "value"}}));
  EXPECT_EQ(attribute(s, "ba")["arrayValue"]["values"], json::parse(R"([{"boolValue":true},{"boolValue":false}])"));
  EXPECT_EQ(attribute(s, "ia")["arrayValue"]["values"],
            json::parse(R"([{"intValue":"1"},{"intValue":"-2"},{"intValue":"3"}])"));
  EXPECT_EQ(attribute(s, "da")["arrayValue"]["values"], json::parse(R"([{"doubleValue":0.5},{"doubleValue":-1.25}])"));
  EXPECT_EQ(attribute(s, "sa")["arrayValue"]["values"], json::parse(R"([{"stringValue":"a"},{"stringValue":"b\"c"}])"));
  int count_i = 0;
  for (const json& kv : s["attributes"]) count_i += kv["key"] == "i";
  EXPECT_EQ(count_i, 1);
}

TEST(Spans, EventsLinksStatusAndKind) {
  Capture c;
  SpanContext linked = *from_traceparent("00-11111111111111111111111111111111-2222222222222222-01");
  {
    Span s(mg::checkpoint, "save", {}, {.kind = SpanKind::kClient});
    s.add_event("shard.written", {{"bytes", 4096}});
    s.add_link(linked, {{"link.reason", "previous segment"}});
    s.set_status(StatusCode::kError, "disk full");
  }
  json s = c.span("save");
  EXPECT_EQ(s["kind"], 3);
  ASSERT_EQ(s["events"].size(), 1u);
  EXPECT_EQ(s["events"][0]["name"], "shard.written");
  EXPECT_EQ(attribute(s["events"][0], "bytes")["intValue"], "4096");
  ASSERT_EQ(s["links"].size(), 1u);
  EXPECT_EQ(s["links"][0]["traceId"], "11111111111111111111111111111111");
  EXPECT_EQ(s["links"][0]["spanId"], "2222222222222222");
  EXPECT_EQ(attribute(s["links"][0], "link.reason")["stringValue"], "previous segment");
  EXPECT_EQ(s["status"], json({{"code", 2}, {"message", "disk full"}}));
}

TEST(Spans, StatusRules) {
  Capture c;
  {
    Span ok(mg::job, "ok");
    ok.set_status(StatusCode::kOk, "ignored: only errors carry a description");
    ok.set_status(StatusCode::kError, "too late: ok is final");
    Span unset(mg::job, "unset");
  }
  EXPECT_EQ(c.span("ok")["status"], json({{"code", 1}}));
  EXPECT_EQ(c.span("unset")["status"], json::object());
}

TEST(Spans, ExceptionLeavingAScopeIsRecordedAndPropagatesUnchanged) {
  Capture c;
  struct TrainingDiverged : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  try {
    LENS_SPAN(mg::step, "scoped");
    throw TrainingDiverged("loss is nan");
  } catch (const TrainingDiverged& e) {
    EXPECT_STREQ(e.what(), "loss is nan");
  }
  auto step = traced(mg::step, "traced", [](int x) -> int {
    if (x < 0) throw std::invalid_argument("negative batch");
    return 2 * x;
  });
  EXPECT_EQ(step(21), 42);
  EXPECT_THROW(step(-1), std::invalid_argument);

  json scoped = c.span("scoped");
  EXPECT_EQ(scoped["status"]["code"], 2);
  ASSERT_EQ(scoped["events"].size(), 1u);
  EXPECT_EQ(scoped["events"][0]["name"], "exception");
  EXPECT_EQ(attribute(scoped["events"][0], "exception.escaped")["boolValue"], true);

  std::vector<json> traced_spans;
  for (const json& s : c.spans())
    if (s["name"] == "traced") traced_spans.push_back(s);
  ASSERT_EQ(traced_spans.size(), 2u);
  EXPECT_FALSE(traced_spans[0].contains("events"));
  const json& failed = traced_spans[1];
  EXPECT_EQ(failed["status"]["code"], 2);
  ASSERT_EQ(failed["events"].size(), 1u);  // one exception event, with the real type and message
  EXPECT_EQ(attribute(failed["events"][0], "exception.type")["stringValue"], "std::invalid_argument");
  EXPECT_EQ(attribute(failed["events"][0], "exception.message")["stringValue"], "negative batch");
}

TEST(Spans, OnlyTheExceptionThatLeavesAScopeFailsItsSpan) {
  Capture c;
  struct CleanUp {  // a destructor that runs while an exception unwinds the stack, and opens spans of its own
    ~CleanUp() {
      LENS_SPAN(mg::step, "cleanup");
      try {
        LENS_SPAN(mg::step, "cleanup.failed");
        throw std::runtime_error("second");
      } catch (const std::runtime_error&) {
      }
    }
  };
  std::thread fresh([] {  // a thread of its own: its state, and where it reads the count, made at its first span
    try {
      LENS_SPAN(mg::step, "outer");
      CleanUp clean_up;
      throw std::runtime_error("first");
    } catch (const std::runtime_error&) {
    }
    LENS_SPAN(mg::step, "after");
  });
  fresh.join();

  EXPECT_EQ(c.span("outer")["status"]["code"], 2);
  EXPECT_EQ(c.span("cleanup")["status"], json::object());    // started during the unwinding, ended normally
  EXPECT_EQ(c.span("cleanup.failed")["status"]["code"], 2);  // one more exception than when it started
  EXPECT_EQ(c.span("after")["status"], json::object());
}

TEST(Spans, TracedChecksTheGroupAtEachCall) {
  Capture c(testing::capture_config("job"));
  int calls = 0;
  auto f = traced(mg::step, "maybe", [&] { ++calls; });
  f();
  set_enabled_span_groups(GroupSet{mg::step});
  f();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(c.spans().size(), 1u);
}

TEST(Spans, TraceRegionIsASpanInItsGroup) {
  Capture c(testing::capture_config("trace_region"));
  { LENS_TRACE_REGION("dataset.build_index"); }
  EXPECT_FALSE(c.span("dataset.build_index").is_null());
  Capture off(testing::capture_config("per_step"));
  { LENS_TRACE_REGION("dataset.build_index"); }
  EXPECT_TRUE(off.spans().empty());
}

TEST(Spans, NamesFromLiteralsAndFromStrings) {
  Capture c;
  {
    std::string name = "dynamic.";
    name += std::to_string(7);
    Span s(mg::job, name);
    name = "changed";  // the span copied the name when it started
  }
  EXPECT_FALSE(c.span("dynamic.7").is_null());
}

TEST(Limits, CountsAndLengthsWithDroppedCounts) {
  Config config = testing::capture_config();
  config.limits.span_attribute_count = 2;
  config.limits.span_attribute_value_length = 4;
  config.limits.span_event_count = 1;
  config.limits.span_link_count = 1;
  config.limits.event_attribute_count = 1;
  Capture c(config);
  SpanContext other = *from_traceparent("00-11111111111111111111111111111111-2222222222222222-01");
  {
    LENS_SPAN_NAMED(s, mg::job, "limited", {"a", "abcdefgh"}, {"b", 1}, {"c", 2});
    s.add_event("e1", {{"x", 1}, {"y", 2}});
    s.add_event("e2");
    s.add_link(other);
    s.add_link(other);
  }
  json s = c.span("limited");
  EXPECT_EQ(s["attributes"].size(), 2u);
  EXPECT_EQ(attribute(s, "a")["stringValue"], "abcd");
  EXPECT_EQ(s["droppedAttributesCount"], 1);
  EXPECT_EQ(s["events"].size(), 1u);
  EXPECT_EQ(s["droppedEventsCount"], 1);
  EXPECT_EQ(s["events"][0]["droppedAttributesCount"], 1);
  EXPECT_EQ(s["links"].size(), 1u);
  EXPECT_EQ(s["droppedLinksCount"], 1);
}

TEST(Limits, AFullArenaDropsAndCountsInsteadOfAllocating) {
  Capture c;
  {
    Span s(mg::job, "big");
    std::string value(600, 'x');
    for (int i = 0; i < 8; ++i) s.set_attribute(std::string("k") + std::to_string(i), value);
  }
  json s = c.span("big");
  EXPECT_GT(s["droppedAttributesCount"].get<int>(), 0);
  EXPECT_EQ(s["attributes"].size() + s["droppedAttributesCount"].get<std::size_t>(), 8u);
}

TEST(Sampling, SampledOutSpansAreNotExportedAndTheirChildrenFollow) {
  Config config = testing::capture_config();
  config.traces_sampler = TracesSampler::kParentBasedAlwaysOff;
  Capture c(config);
  {
    LENS_SPAN(mg::job, "root");
    LENS_SPAN(mg::step, "child");
    EXPECT_TRUE(current_context().is_valid());
    EXPECT_FALSE(current_context().is_sampled());
  }
  EXPECT_TRUE(c.spans().empty());
  EXPECT_EQ(c.telemetry().span_stats().sampled_out, 2u);
}

TEST(Sampling, AlwaysOffIsDecidedAtSetupSoASpanIsMadeAsADisabledGroupsIs) {
  Config config = testing::capture_config("job,step");
  config.traces_sampler = TracesSampler::kAlwaysOff;
  Capture c(config);
  // The enabled set is kept, reported and changed as usual; nothing of it records.
  EXPECT_EQ(enabled_span_groups(), (GroupSet{mg::job, mg::step}));
  EXPECT_FALSE(is_enabled(mg::job));
  EXPECT_FALSE(LENS_GROUP_ENABLED(mg::job));
  EXPECT_TRUE(LENS_GROUP_ENABLED(mg::step));  // one of the loop's groups: kept as a hang snapshot's position
  const SpanContext sampled_remote{TraceId{{1}}, SpanId{{2}}, SpanContext::kSampledFlag, true};
  {
    LENS_SPAN(mg::job, "job.span");
    EXPECT_FALSE(current_context().is_valid());  // no span, no ids: nothing is current
    Span not_current(mg::job, "not.current");
    EXPECT_FALSE(not_current.context().is_valid());
    EXPECT_FALSE(not_current.is_recording());
    LENS_SPAN(mg::step, "position");
    EXPECT_FALSE(current_context().is_valid());  // a position has no ids either
  }
  {
    ContextScope scope(sampled_remote);  // always_off follows no parent: the remote context passes through unchanged
    LENS_SPAN(mg::job, "under.sampled.remote");
    EXPECT_EQ(current_context().span_id, sampled_remote.span_id);
  }
  EXPECT_EQ(set_enabled_span_groups({mg::job}), GroupSet{mg::job});
  EXPECT_EQ(enabled_span_groups(), GroupSet{mg::job});
  EXPECT_FALSE(LENS_GROUP_ENABLED(mg::job));
  c.telemetry().force_flush();
  EXPECT_TRUE(c.spans().empty());
  EXPECT_EQ(c.telemetry().span_stats().produced, 0u);
  EXPECT_EQ(c.telemetry().span_stats().sampled_out, 0u);
}

TEST(Sampling, ASamplerThatFollowsAParentIsAskedEvenWhereItDropsEveryRoot) {
  Config config = testing::capture_config("job");
  config.traces_sampler = TracesSampler::kParentBasedAlwaysOff;
  Capture c(config);
  EXPECT_TRUE(is_enabled(mg::job));
  {
    ContextScope scope(SpanContext{TraceId{{1}}, SpanId{{2}}, SpanContext::kSampledFlag, true});
    LENS_SPAN(mg::job, "under.sampled.remote");
  }
  EXPECT_EQ(c.spans().size(), 1u);
}

TEST(Sampling, TheDefaultSamplerKeepsRootsAndFollowsEveryParent) {
  Capture c;  // parentbased_always_on, the decision the span path makes inline
  const SpanContext sampled_remote{TraceId{{1}}, SpanId{{2}}, SpanContext::kSampledFlag, true};
  const SpanContext unsampled_remote{TraceId{{3}}, SpanId{{4}}, 0, true};
  {
    ContextScope scope(unsampled_remote);
    LENS_SPAN(mg::job, "under.unsampled");
    LENS_SPAN(mg::step, "under.unsampled.child");
    EXPECT_FALSE(current_context().is_sampled());
  }
  {
    ContextScope scope(sampled_remote);
    LENS_SPAN(mg::job, "under.sampled");
  }
  { LENS_SPAN(mg::job, "root"); }
  EXPECT_EQ(c.spans().size(), 2u);
  EXPECT_EQ(c.span("under.sampled")["parentSpanId"], "0200000000000000");
  EXPECT_FALSE(c.span("root").contains("parentSpanId"));
  EXPECT_EQ(c.telemetry().span_stats().sampled_out, 2u);
}

TEST(Shutdown, OpenSpansAreEndedInnermostFirstAsTruncated) {
  auto shared = std::make_shared<internal::MemoryExporter::Shared>();
  Telemetry t = internal::setup(testing::capture_config(), {.rank = 0, .world_size = 1, .reinit = true},
                                std::make_unique<internal::MemoryExporter>(shared));
  {
    LENS_SPAN(mg::job, "outer");
    { LENS_SPAN(mg::step, "done"); }
    LENS_SPAN(mg::step, "inner");
    EXPECT_TRUE(t.shutdown());
  }  // the scopes end after shutdown: nothing more is exported, nothing is counted twice
  std::vector<json> spans;
  for (const std::string& r : shared->requests) {
    json request = json::parse(r);
    for (const json& s : request["resourceSpans"][0]["scopeSpans"][0]["spans"]) spans.push_back(s);
  }
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0]["name"], "done");
  EXPECT_EQ(spans[1]["name"], "inner");
  EXPECT_EQ(spans[2]["name"], "outer");
  for (int i : {1, 2}) {
    EXPECT_EQ(attribute(spans[i], "nemo.span.truncated")["boolValue"], true);
    ASSERT_TRUE(spans[i].contains("events"));
    const json& e = spans[i]["events"].back();
    EXPECT_EQ(e["name"], "nemo.span.truncated");
    EXPECT_EQ(attribute(e, "reason")["stringValue"], "still open at telemetry shutdown");
    EXPECT_FALSE(spans[i]["status"].contains("code"));  // not an error
  }
  EXPECT_TRUE(attribute(spans[0], "nemo.span.truncated").is_null());
  SpanStats stats = t.span_stats();
  EXPECT_EQ(stats.produced, 3u);
  EXPECT_EQ(stats.exported, 3u);
  EXPECT_EQ(stats.dropped(), 0u);
  EXPECT_TRUE(shared->shut_down);
}

TEST(Shutdown, SpansEndedAfterShutdownAreCountedAsDropped) {
  Capture c;
  Span late(mg::job, "late");
  std::thread other([&] {
    LENS_SPAN(mg::job, "other-thread");  // a thread's spans are not truncated by another thread's shutdown
    c.telemetry().shutdown();
  });
  other.join();
  late.end();
  SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.produced, s.exported + s.dropped());
}

// A LENS_SPAN with a literal name and no attributes is a light scope (trace/scope_record.h): no slot, its
// identity in its context entry, a 64-byte scope record queued when it ends. Whatever a user does to it, it is the
// span it would have been in a slot: written to after it started, ended early, the current context, a parent or a
// child of other spans, in a hang snapshot, dropped and counted when the queue is full.
std::string span_id_hex(const SpanContext& c) {
  return to_traceparent(c).substr(36, 16);  // 00-<trace id>-<span id>-<flags>
}

TEST(LightScopes, AScopeWrittenToAfterItStartedKeepsWhatWasAddedAndItsChildren) {
  Capture c;
  {
    LENS_SPAN(mg::job, "root");
    LENS_SPAN_NAMED(step, mg::step, "step");
    { LENS_SPAN(mg::layer, "before"); }
    step.set_attribute("megatron.iteration", 7);
    step.add_event("checkpoint");
    { LENS_SPAN(mg::layer, "after"); }
    step.set_status(StatusCode::kError, "diverged");
  }
  json root = c.span("root"), step = c.span("step"), before = c.span("before"), after = c.span("after");
  EXPECT_EQ(c.spans().size(), 4u);  // each once
  EXPECT_EQ(step["parentSpanId"], root["spanId"]);
  EXPECT_EQ(before["parentSpanId"], step["spanId"]);
  EXPECT_EQ(after["parentSpanId"], step["spanId"]);
  for (const json* s : {&step, &before, &after}) EXPECT_EQ((*s)["traceId"], root["traceId"]);
  EXPECT_EQ(attribute(step, "megatron.iteration")["intValue"], "7");
  ASSERT_EQ(step["events"].size(), 1u);
  EXPECT_EQ(step["events"][0]["name"], "checkpoint");
  EXPECT_EQ(step["status"]["code"], 2);
  EXPECT_EQ(step["status"]["message"], "diverged");
  const SpanStats stats = c.telemetry().span_stats();
  EXPECT_EQ(stats.produced, 4u);
  EXPECT_EQ(stats.exported, 4u);
}

TEST(LightScopes, AScopeEndedEarlyStaysTheParentOfWhatItsScopeStartsLater) {
  Capture c;
  {
    LENS_SPAN(mg::job, "root");
    LENS_SPAN_NAMED(early, mg::step, "early");
    early.end();
    early.end();  // harmless
    LENS_SPAN(mg::layer, "later");
  }
  json root = c.span("root"), early = c.span("early"), later = c.span("later");
  EXPECT_EQ(c.spans().size(), 3u);
  EXPECT_EQ(early["parentSpanId"], root["spanId"]);
  EXPECT_EQ(later["parentSpanId"], early["spanId"]);
  EXPECT_EQ(later["traceId"], root["traceId"]);
  auto t = [](const json& s, const char* k) { return std::stoull(s[k].get<std::string>()); };
  EXPECT_LE(t(early, "endTimeUnixNano"), t(later, "startTimeUnixNano"));
}

TEST(LightScopes, AScopeIsTheCurrentContextAndAParentOfSpansOfEveryKind) {
  Capture c;
  Span outer(mg::job, "outer");  // not a scope: a slot's span, made current below
  std::string current_inside, scope_id;
  {
    ContextScope current(outer.context());
    LENS_SPAN_NAMED(scope, mg::step, "scope");
    current_inside = span_id_hex(current_context());
    scope_id = span_id_hex(scope.context());
    Span inner(mg::layer, "inner", {{"with", "attributes"}});  // a slot's span under a scope
    { LENS_SPAN(mg::layer, "leaf"); }
  }
  outer.end();
  EXPECT_FALSE(current_context().is_valid());
  json o = c.span("outer"), scope = c.span("scope"), inner = c.span("inner"), leaf = c.span("leaf");
  EXPECT_EQ(current_inside, scope_id);
  EXPECT_EQ(scope["spanId"], scope_id);
  EXPECT_EQ(scope["parentSpanId"], o["spanId"]);
  EXPECT_EQ(inner["parentSpanId"], scope["spanId"]);
  EXPECT_EQ(leaf["parentSpanId"], scope["spanId"]);
  for (const json* s : {&scope, &inner, &leaf}) EXPECT_EQ((*s)["traceId"], o["traceId"]);
}

TEST(LightScopes, TheIdsReadInsideAScopeAreTheOnesItIsExportedWith) {
  Capture c;
  std::string root_context, child_context, root_trace, child_trace;
  {
    LENS_SPAN_NAMED(root, mg::job, "root");
    root_context = span_id_hex(root.context());
    root_trace = to_traceparent(root.context()).substr(3, 32);
    LENS_SPAN(mg::step, "child");
    child_context = span_id_hex(current_context());  // its ids derived on this first read
    child_trace = to_traceparent(current_context()).substr(3, 32);
    // Another API's view of the current span (OpenTelemetry Python's get_current_span) writes to it.
    internal::SpanHandle copy;
    ASSERT_EQ(internal::current_kind(&copy), internal::CurrentKind::kSpan);
    const Attribute from_copy{"written.through", "a copy"};
    internal::set_attributes(copy, {&from_copy, 1});
  }
  json root = c.span("root"), child = c.span("child");
  EXPECT_EQ(root["spanId"], root_context);
  EXPECT_EQ(root["traceId"], root_trace);
  EXPECT_EQ(child["spanId"], child_context);
  EXPECT_EQ(child["traceId"], root_trace);
  EXPECT_EQ(child_trace, root_trace);
  EXPECT_EQ(attribute(child, "written.through")["stringValue"], "a copy");
}

// A scope's ids are derived from its thread's seed and its sequence number: distinct on a thread and across threads,
// never zero, a root's trace id marked random (W3C Trace Context level 2), as drawn ids were.
TEST(LightScopes, DerivedIdsAreDistinctNonZeroAndARootsTraceIsRandom) {
  Capture c;
  auto spans_on_a_thread = [] {
    for (int i = 0; i < 500; ++i) {
      LENS_SPAN(mg::step, "root");
      { LENS_SPAN(mg::layer, "child"); }
    }
  };
  std::thread other(spans_on_a_thread);
  spans_on_a_thread();
  other.join();
  std::set<std::string> span_ids, trace_ids;
  std::size_t roots = 0;
  for (const json& s : c.spans()) {
    const std::string id = s["spanId"];
    EXPECT_NE(id, "0000000000000000");
    span_ids.insert(id);
    if (s["name"] == "root") {
      ++roots;
      trace_ids.insert(s["traceId"].get<std::string>());
      EXPECT_EQ(s["flags"].get<int>() & 0x2, 0x2) << "W3C random flag";
    }
  }
  EXPECT_EQ(span_ids.size(), 2000u);
  EXPECT_EQ(roots, 1000u);
  EXPECT_EQ(trace_ids.size(), 1000u);
}

TEST(LightScopes, AHangSnapshotSeesEachOpenScopeOnceWithWhatWasAddedToIt) {
  Capture c;
  auto open_names = [] {
    std::vector<std::string> names;
    for (const auto& copy : internal::g_span_drain.load()->open_spans()) {
      internal::SpanView v(copy.record.data());
      names.emplace_back(v.name());
      if (v.name() == "promoted") {
        EXPECT_EQ(v.header().attribute_count, 1u);
      }
    }
    return names;
  };
  LENS_SPAN(mg::job, "outer");
  LENS_SPAN_NAMED(promoted, mg::step, "promoted");
  promoted.set_attribute("megatron.iteration", 3);
  LENS_SPAN(mg::layer, "inner");
  const std::vector<std::string> expected{"outer", "promoted", "inner"};  // outermost first
  EXPECT_EQ(open_names(), expected);
  { LENS_SPAN(mg::layer, "ended"); }
  ASSERT_TRUE(c.telemetry().force_flush());
  EXPECT_EQ(open_names(), expected);  // an ended one is not open, and a flush leaves the open ones
}

// Runs `body` inside `depth` nested spans that each hold a slot (an attribute that is copied, not packed).
void inside_spans_holding_slots(int depth, const std::function<void()>& body) {
  if (depth == 0) return body();
  LENS_SPAN(mg::job, "holds a slot", {"depth", std::to_string(depth)});
  inside_spans_holding_slots(depth - 1, body);
}

TEST(LightScopes, AScopeThatNeedsASlotWhenNoneIsFreeIsDroppedAndCounted) {
  Capture c;
  inside_spans_holding_slots(internal::ThreadState::kMaxOpenSpans, [] {
    { LENS_SPAN(mg::layer, "light"); }  // needs no slot: exported
    {
      LENS_SPAN_NAMED(written, mg::layer, "written to");
      written.set_attribute("megatron.iteration", 7);  // needs one: dropped, counted once
      written.add_event("lost as well");
      LENS_SPAN(mg::layer, "its child");  // still exported, under it
    }
    try {
      LENS_SPAN(mg::layer, "left by an exception");
      throw std::runtime_error("no slot for its status");
    } catch (const std::runtime_error&) {
    }
    LENS_SPAN(mg::layer, "with a slot", {"a", std::string("copied")});  // refused a slot: dropped, counted
  });
  EXPECT_EQ(c.spans().size(), static_cast<std::size_t>(internal::ThreadState::kMaxOpenSpans) + 2);
  EXPECT_TRUE(c.span("written to").is_null());
  EXPECT_TRUE(c.span("left by an exception").is_null());
  EXPECT_EQ(c.span("its child")["parentSpanId"].get<std::string>().size(), 16u);
  ASSERT_TRUE(c.telemetry().shutdown());
  const SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.dropped_no_slot, 3u);
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
  EXPECT_EQ(s.produced, static_cast<std::uint64_t>(internal::ThreadState::kMaxOpenSpans) + 5);
}

TEST(LightScopes, AFullQueueDropsAndCountsTheScopesThatDoNotFit) {
  Config config = testing::capture_config("job");
  config.span_batch.max_queue_size = 64;  // the smallest queue budget, 64 KiB: about a thousand scope records
  Capture c(config);
  c.exporter().hang = true;  // the first batch never returns: the queue is not read meanwhile
  constexpr int kProduced = 10000;
  for (int i = 0; i < kProduced; ++i) {
    LENS_SPAN(mg::job, "flood");
  }
  const SpanStats during = c.telemetry().span_stats();
  EXPECT_GT(during.dropped_queue_full, 0u);
  EXPECT_EQ(during.produced, static_cast<std::uint64_t>(kProduced));
  c.exporter().release();
  ASSERT_TRUE(c.telemetry().shutdown());
  const SpanStats s = c.telemetry().span_stats();
  EXPECT_EQ(s.produced, static_cast<std::uint64_t>(kProduced));
  EXPECT_EQ(s.exported + s.dropped(), s.produced);
  EXPECT_EQ(s.dropped(), s.dropped_queue_full);
  EXPECT_GT(s.exported, 500u);  // a first batch and the budget's worth of 64-byte records
}

// Without a TSC the span clock is steady_clock, a call: a scope's start and end then take their paths that may call
// (span_entry_points.cc: start_scope_out_of_line; light_scopes.cc: end_light_scope_at_exit_out_of_line), so that the
// usual ones make no call. Recorded alike, through chunks linked on the way, with and without attributes.
TEST(LightScopes, WithoutATscTheyAreRecordedAlike) {
  const bool tsc = internal::g_clock_uses_tsc;
  internal::g_clock_uses_tsc = false;  // before the setup, which anchors its time map on this clock
  {
    Capture c;
    const std::uint64_t before = internal::unix_nanos_now();
    {
      LENS_SPAN(mg::job, "root");
      LENS_SPAN(mg::step, "step", {"megatron.iteration", 3}, {"megatron.phase", "train"});
      for (int i = 0; i < 200; ++i) {  // 64-byte records: more than the first chunk holds
        LENS_SPAN(mg::layer, "layer");
      }
      EXPECT_TRUE(internal::current_thread_state_if_any()->all_slots_free());  // light scopes all
    }
    json root = c.span("root"), step = c.span("step");
    EXPECT_EQ(c.spans().size(), 202u);
    EXPECT_EQ(step["parentSpanId"], root["spanId"]);
    EXPECT_EQ(attribute(step, "megatron.iteration")["intValue"], "3");
    EXPECT_EQ(attribute(step, "megatron.phase")["stringValue"], "train");
    auto t = [](const json& s, const char* k) { return std::stoull(s[k].get<std::string>()); };
    EXPECT_LE(before, t(root, "startTimeUnixNano") + 1'000'000);  // steady ticks mapped to Unix time, not raw
    EXPECT_LE(t(root, "startTimeUnixNano"), t(step, "startTimeUnixNano"));
    EXPECT_LE(t(step, "startTimeUnixNano"), t(step, "endTimeUnixNano"));
    EXPECT_LE(t(step, "endTimeUnixNano"), t(root, "endTimeUnixNano"));
    EXPECT_LT(t(root, "endTimeUnixNano") - t(root, "startTimeUnixNano"), 60'000'000'000ull);
    const SpanStats stats = c.telemetry().span_stats();
    EXPECT_EQ(stats.exported, 202u);
  }
  internal::g_clock_uses_tsc = tsc;
}

// A LENS_SPAN whose attributes are literal keys with numbers, bools or literal strings is a light scope too, its
// attributes packed into its scope record (lens/internal/scope_attributes.h): exported as a slot's span would be.
TEST(LightScopes, PackedAttributesAreExportedAsASlotsSpanWouldBe) {
  Capture c;
  const std::int64_t iteration = -42;
  {
    LENS_SPAN(mg::step, "packed", {"megatron.iteration", iteration}, {"megatron.loss", 2.5},
              {"megatron.is_last_stage", true}, {"megatron.phase", "train"}, {"megatron.repeated", 1},
              {"megatron.repeated", 2});
    EXPECT_TRUE(internal::current_thread_state_if_any()->all_slots_free());  // a light scope: no slot
  }
  {
    LENS_SPAN(mg::step, "in a slot", {"megatron.iteration", iteration}, {"megatron.loss", 2.5},
              {"megatron.is_last_stage", true}, {"megatron.phase", std::string("train")}, {"megatron.repeated", 1},
              {"megatron.repeated", 2});
  }
  json packed = c.span("packed"), slot = c.span("in a slot");
  ASSERT_FALSE(packed.is_null());
  EXPECT_EQ(attribute(packed, "megatron.iteration")["intValue"], "-42");
  EXPECT_EQ(attribute(packed, "megatron.loss")["doubleValue"], 2.5);
  EXPECT_EQ(attribute(packed, "megatron.is_last_stage")["boolValue"], true);
  EXPECT_EQ(attribute(packed, "megatron.phase")["stringValue"], "train");
  EXPECT_EQ(attribute(packed, "megatron.repeated")["intValue"], "2");  // the last value of a key set twice
  EXPECT_EQ(packed["attributes"], slot["attributes"]);
  EXPECT_EQ(packed["kind"], slot["kind"]);
}

// Only a string literal is kept by pointer (a light scope's packed attributes rely on it); a buffer written at run
// time, a pointer and a std::string are copied.
TEST(Attributes, OnlyAStringLiteralValueIsMarkedStatic) {
  static_assert(AttributeValue("train").is_static() && AttributeValue("train").as_string().size() == 5);
  char buffer[16] = "warmup";
  const char* pointer = buffer;
  const std::string text = "train";
  EXPECT_FALSE(AttributeValue(buffer).is_static());
  EXPECT_EQ(AttributeValue(buffer).as_string(), "warmup");
  EXPECT_FALSE(AttributeValue(pointer).is_static());
  EXPECT_FALSE(AttributeValue(text).is_static());
  EXPECT_FALSE(AttributeValue(std::string_view(text)).is_static());
  EXPECT_FALSE(internal::are_packable({{"phase", pointer}}));
  EXPECT_TRUE(internal::are_packable({{"phase", "train"}, {"iteration", 3}, {"loss", 2.5}, {"last", true}}));
}

TEST(LightScopes, APackedScopeWrittenToOrLeftByAnExceptionKeepsItsAttributes) {
  Capture c;
  {
    LENS_SPAN_NAMED(step, mg::step, "written to", {"megatron.iteration", 7}, {"megatron.phase", "train"});
    step.set_attribute("megatron.iteration", 8);  // promoted to a slot: a later value of a key wins
    step.set_attribute("megatron.loss", 1.5);
  }
  try {
    LENS_SPAN(mg::step, "left by an exception", {"megatron.iteration", 9});
    throw std::runtime_error("diverged");
  } catch (const std::runtime_error&) {
  }
  json written = c.span("written to"), left = c.span("left by an exception");
  EXPECT_EQ(written["attributes"].size(), 3u);
  EXPECT_EQ(attribute(written, "megatron.iteration")["intValue"], "8");
  EXPECT_EQ(attribute(written, "megatron.phase")["stringValue"], "train");
  EXPECT_EQ(attribute(written, "megatron.loss")["doubleValue"], 1.5);
  EXPECT_EQ(attribute(left, "megatron.iteration")["intValue"], "9");
  EXPECT_EQ(left["status"]["code"], 2);
}

// What cannot be packed takes the slot path and is exported all the same: more than 8 attributes, a copied key or
// value (a buffer written again before the span ends keeps the value it had), an array, limits that would cut.
TEST(LightScopes, AttributesThatCannotBePackedAreRecordedInASlot) {
  Config config = testing::capture_config();
  config.limits.span_attribute_value_length = 3;
  Capture c(config);
  {
    LENS_SPAN(mg::step, "nine", {"a1", 1}, {"a2", 2}, {"a3", 3}, {"a4", 4}, {"a5", 5}, {"a6", 6}, {"a7", 7}, {"a8", 8},
              {"a9", 9});
  }
  char buffer[16] = "before";
  {
    LENS_SPAN(mg::step, "copied", {"phase", buffer});
    EXPECT_FALSE(internal::current_thread_state_if_any()->all_slots_free());  // in a slot
    std::snprintf(buffer, sizeof buffer, "after");
  }
  const std::int64_t ranks[] = {0, 1};
  { LENS_SPAN(mg::step, "array", {"ranks", std::span<const std::int64_t>(ranks)}); }
  { LENS_SPAN(mg::step, "cut", {"phase", "train"}, {"megatron.iteration", 1}); }
  EXPECT_EQ(c.span("nine")["attributes"].size(), 9u);
  EXPECT_EQ(attribute(c.span("copied"), "phase")["stringValue"], "bef");
  EXPECT_EQ(attribute(c.span("array"), "ranks")["arrayValue"]["values"].size(), 2u);
  EXPECT_EQ(attribute(c.span("cut"), "phase")["stringValue"], "tra");
  EXPECT_EQ(attribute(c.span("cut"), "megatron.iteration")["intValue"], "1");
}

TEST(LightScopes, AHangSnapshotSeesAnOpenScopesPackedAttributes) {
  Capture c;
  LENS_SPAN(mg::step, "open", {"megatron.iteration", 5}, {"megatron.phase", "train"});
  std::vector<std::string> seen;
  for (const auto& copy : internal::g_span_drain.load()->open_spans()) {
    internal::SpanView v(copy.record.data());
    if (v.name() != "open") continue;
    v.for_each_attribute([&](const internal::AttributeView& a) {
      seen.push_back(std::string(a.key) + "=" +
                     (a.type == ValueType::kInt ? std::to_string(a.as_int()) : std::string(a.as_string())));
    });
  }
  const std::vector<std::string> expected{"megatron.iteration=5", "megatron.phase=train"};
  EXPECT_EQ(seen, expected);
}

TEST(Allocation, TheSpanPathAllocatesNothingEnabledOrDisabled) {
  Capture c(testing::capture_config("per_step"));
  { LENS_SPAN(mg::step, "warm-up"); }  // the thread's first span creates its state
  long before = lens::testing::allocation_count();
  for (int i = 0; i < 1000; ++i) {
    LENS_SPAN(mg::step, "enabled", {"i", i}, {"loss", 1.5}, {"phase", "train"});
    LENS_SPAN_NAMED(s, mg::layer, "disabled", {"i", i});
    s.set_attribute("x", 1);
    { LENS_SPAN(mg::optimizer, "nested"); }
  }
  EXPECT_EQ(lens::testing::allocation_count() - before, 0);
  EXPECT_EQ(c.telemetry().span_stats().produced, 2001u);
}

// OpenTelemetry's start_time / end_time are kept exactly as given (Unix nanoseconds, not through the
// span clock), an hour back as well as now; update_name renames; a span of no group (ungated) is recorded where
// `job` is off but another group is on.
TEST(Spans, GivenTimesAreKeptExactlyAndANameCanChange) {
  Capture c(testing::capture_config("step"));
  const std::uint64_t hour_ago = internal::unix_nanos_now() - 3'600'000'000'000ULL;
  {
    StartOptions options;
    options.start_unix_nanos = hour_ago;
    options.ungated = true;  // `job` (its group here) is off: recorded all the same
    internal::SpanHandle h;
    internal::start_span(h, mg::job, "backdated", {}, options);
    internal::update_name(h, "backdated.renamed");
    internal::end_span(h, false, hour_ago + 1'500'000'000ULL);
  }
  { LENS_SPAN(mg::job, "gated.off"); }
  json renamed = c.span("backdated.renamed");
  ASSERT_FALSE(renamed.is_null());
  EXPECT_EQ(std::stoull(renamed["startTimeUnixNano"].get<std::string>()), hour_ago);
  EXPECT_EQ(std::stoull(renamed["endTimeUnixNano"].get<std::string>()), hour_ago + 1'500'000'000ULL);
  EXPECT_TRUE(c.span("gated.off").is_null());
}

// What is current, for another API's context: a live span (its handle, writable), a context attached by
// that API, a context alone, nothing.
TEST(Spans, TheCurrentKindTellsASpanFromAnAttachedContext) {
  Capture c;
  internal::SpanHandle h;
  EXPECT_EQ(internal::current_kind(&h), internal::CurrentKind::kNone);
  {
    LENS_SPAN_NAMED(step, mg::step, "step");
    ASSERT_EQ(internal::current_kind(&h), internal::CurrentKind::kSpan);
    const Attribute a{"set.through.current", std::int64_t{7}};
    internal::set_attributes(h, {&a, 1});
    internal::ThreadState* pushed = internal::push_context(step.context(), nullptr, true);
    EXPECT_EQ(internal::current_kind(&h), internal::CurrentKind::kAttached);
    internal::pop_context(pushed);
    ContextScope remote(SpanContext{step.context().trace_id, SpanId{{9}}, 1, true});
    EXPECT_EQ(internal::current_kind(&h), internal::CurrentKind::kContext);
  }
  EXPECT_EQ(attribute(c.span("step"), "set.through.current")["intValue"], "7");
}

// Another API's detach (OpenTelemetry Python's context.detach) takes its entry and the attached ones above it, as a
// context variable's reset forgets later values; never a live span's entry, never another thread's, never twice.
TEST(Spans, AMisusedDetachTakesNoOtherSpansEntry) {
  using internal::DetachResult;
  Capture c;
  const SpanContext outer{TraceId{{1}}, SpanId{{1}}, 1, true}, inner{TraceId{{1}}, SpanId{{2}}, 1, true};
  internal::ThreadState* a = internal::push_context(outer, nullptr, true);
  const std::uint32_t depth_a = internal::context_depth(a);
  internal::ThreadState* b = internal::push_context(inner, nullptr, true);
  const std::uint32_t depth_b = internal::context_depth(b);
  EXPECT_EQ(depth_b, depth_a + 1);
  DetachResult elsewhere = DetachResult::kPopped;
  std::thread([&] { elsewhere = internal::pop_attached_context(b, depth_b); }).join();
  EXPECT_EQ(elsewhere, DetachResult::kOtherThread);
  EXPECT_EQ(current_context().span_id, inner.span_id);
  EXPECT_EQ(internal::pop_attached_context(b, depth_b), DetachResult::kPopped);
  EXPECT_EQ(internal::pop_attached_context(b, depth_b), DetachResult::kGone);  // twice
  { LENS_SPAN(mg::step, "child.of.outer"); }
  {
    LENS_SPAN(mg::step, "open.above.outer");
    EXPECT_EQ(internal::pop_attached_context(a, depth_a), DetachResult::kUnderOpenSpans);
  }
  internal::push_context(inner, nullptr, true);
  EXPECT_EQ(internal::pop_attached_context(a, depth_a), DetachResult::kPopped);  // out of order: both go
  EXPECT_FALSE(current_context().is_valid());
  EXPECT_EQ(c.span("child.of.outer")["parentSpanId"], span_id_hex(outer));
}

}  // namespace
}  // namespace lens
