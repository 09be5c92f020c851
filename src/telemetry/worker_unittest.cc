// The worker bootstrap (CONTRACT §9): built from a live setup, through its text form and back, and a worker's setup
// from it reporting as its rank.
#include "lens/worker.h"

#include <gtest/gtest.h>

#include "support/capture.h"

namespace lens {
namespace {

namespace mg = megatron::group;

TEST(WorkerBootstrap, SurvivesItsTextFormWithAnyCharactersAndEveryAttributeType) {
  WorkerBootstrap b;
  b.enabled = true;
  b.service_name = "svc=with,odd\nchars %41 ünï";
  b.span_groups = "per_step, layer";
  b.resolved_span_groups = {"job", "layer"};
  b.rank = 3;
  b.world_size = 8;
  b.run_id = "run-42";
  b.resource_attrs = {{"s", std::string("a=b,c\n%")},
                      {"i", std::int64_t{-7}},
                      {"d", 0.1},
                      {"b", true},
                      {"key with = sign", std::string("")}};
  b.link = *from_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  WorkerBootstrap back = WorkerBootstrap::parse(b.serialize());
  EXPECT_EQ(back.enabled, b.enabled);
  EXPECT_EQ(back.service_name, b.service_name);
  EXPECT_EQ(back.span_groups, b.span_groups);
  EXPECT_EQ(back.resolved_span_groups, b.resolved_span_groups);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.world_size, 8);
  EXPECT_EQ(back.run_id, "run-42");
  EXPECT_EQ(back.resource_attrs, b.resource_attrs);
  EXPECT_EQ(to_traceparent(back.link), to_traceparent(b.link));
  EXPECT_EQ(b.serialize().find('\n', b.serialize().find("service_name=")) - b.serialize().find("service_name="),
            std::string("service_name=svc%3Dwith%2Codd%0Achars %2541 ünï").size());  // one line per key
}

TEST(WorkerBootstrap, MalformedTextIsAConfigErrorNamingTheLine) {
  for (const char* text : {"", "not a bootstrap", "lens-worker-bootstrap 1\nrank=three",
                           "lens-worker-bootstrap 1\nrank=1\nnonsense", "lens-worker-bootstrap 1\nlink=00-zz",
                           "lens-worker-bootstrap 1\nresource.k=x:1", "lens-worker-bootstrap 1\nrun_id=%4"}) {
    try {
      WorkerBootstrap::parse(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("worker bootstrap, line"), std::string::npos) << e.what();
    }
  }
}

// OTEL_PROPAGATORS without tracecontext: no span context leaves the process.
TEST(WorkerBootstrap, CarriesNoContextWhenTraceContextIsNotAPropagator) {
  Config config = testing::capture_config("per_step");
  config.propagate_trace_context = false;
  testing::Capture c(config);
  LENS_SPAN(mg::checkpoint, "megatron.save_checkpoint");
  ASSERT_TRUE(current_context().is_valid());
  EXPECT_FALSE(build_worker_bootstrap(c.telemetry(), {}).link.is_valid());
}

TEST(WorkerBootstrap, IsBuiltFromTheRanksSetupWithTheCurrentSpanAsItsLink) {
  Config config = testing::capture_config("per_step,layer");
  config.service_name = "trainer";
  config.run_id = "r1";
  testing::Capture c(config);
  std::string save_span;
  WorkerBootstrap b;
  {
    LENS_SPAN_NAMED(save, mg::checkpoint, "megatron.save_checkpoint");
    save_span = to_traceparent(save.context());
    b = build_worker_bootstrap(c.telemetry(), {{"megatron.num_layers", std::int64_t{4}}});
  }
  EXPECT_TRUE(b.enabled);
  EXPECT_EQ(b.service_name, "trainer");
  EXPECT_EQ(b.span_groups, "per_step,layer");
  EXPECT_EQ(b.run_id, "r1");
  EXPECT_EQ(b.rank, 0);
  EXPECT_NE(std::find(b.resolved_span_groups.begin(), b.resolved_span_groups.end(), "layer"),
            b.resolved_span_groups.end());
  EXPECT_EQ(std::find(b.resolved_span_groups.begin(), b.resolved_span_groups.end(), "microbatch"),
            b.resolved_span_groups.end());
  EXPECT_EQ(to_traceparent(b.link), save_span);
}

}  // namespace
}  // namespace lens
