#include "lens/groups.h"

#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "groups/switch.h"
#include "lens/config.h"
#include "lens/megatron.h"

namespace lens {
namespace {

namespace mg = megatron::group;

// A bare integer is not a span group (is_enabled(3) is a compile error: tests/compile_errors/).
static_assert(!std::is_convertible_v<int, SpanGroup>, "is_enabled(3) must not compile");

TEST(Catalogue, BaseHasTheEightGroupsInOrder) {
  constexpr Catalogue c = base_catalogue();
  ASSERT_EQ(c.group_count(), 8u);
  const char* names[] = {"job",  "checkpoint",       "evaluate", "model_init", "load_checkpoint",
                         "step", "forward_backward", "optimizer"};
  for (std::uint8_t i = 0; i < 8; ++i) EXPECT_EQ(c.group_name(SpanGroup(i)), names[i]);
  EXPECT_EQ(c.group_name(group::optimizer), "optimizer");
}

TEST(Catalogue, BasePresets) {
  constexpr Catalogue c = base_catalogue();
  EXPECT_EQ(c.find_preset("default")->groups, (GroupSet{group::job, group::checkpoint, group::evaluate}));
  EXPECT_EQ(c.find_preset("per_step")->groups, c.all());
  for (const char* name : {"all", "profiling", "full"}) EXPECT_EQ(c.find_preset(name)->groups, c.all()) << name;
  EXPECT_EQ(c.all().bits(), 0xFFu);
}

TEST(Catalogue, MegatronHasSixteenGroupsAndItsOwnPresets) {
  constexpr Catalogue c = megatron::catalogue();
  ASSERT_EQ(c.group_count(), 16u);
  EXPECT_EQ(c.group_name(mg::microbatch), "microbatch");
  EXPECT_EQ(c.group_name(mg::trace_region), "trace_region");
  const GroupSet production{mg::job, mg::checkpoint, mg::evaluate, mg::first_iteration, mg::inference};
  EXPECT_EQ(c.find_preset("default")->groups, production);
  const GroupSet per_step =
      production | GroupSet{mg::model_init, mg::load_checkpoint, mg::step,        mg::forward_backward,
                            mg::optimizer,  mg::communication,   mg::data_loading};
  EXPECT_EQ(c.find_preset("per_step")->groups, per_step);
  for (const char* name : {"all", "profiling", "full"}) EXPECT_EQ(c.find_preset(name)->groups, c.all()) << name;
  // Only `all` has the finest groups.
  for (SpanGroup fine : {mg::microbatch, mg::layer, mg::activation_offload, mg::trace_region}) {
    EXPECT_FALSE(c.find_preset("per_step")->groups.contains(fine));
    EXPECT_TRUE(c.find_preset("all")->groups.contains(fine));
  }
  EXPECT_EQ(c.preset_count(), 5u);  // the base presets were replaced, not added to
}

TEST(Catalogue, ConsumerExtensionAndItsMistakes) {
  Catalogue c = base_catalogue();
  EXPECT_EQ(c.add_group("tokenizer"), SpanGroup(8));
  EXPECT_THROW(c.add_group("tokenizer"), std::invalid_argument);
  EXPECT_THROW(c.add_group("Upper"), std::invalid_argument);
  EXPECT_THROW(c.add_group(""), std::invalid_argument);
  EXPECT_THROW(c.set_preset("bad", GroupSet(std::uint64_t{1} << 40)), std::invalid_argument);
  static const auto* names = [] {
    auto* n = new std::vector<std::string>;
    for (int i = 9; i < 65; ++i) n->push_back("g" + std::to_string(i));
    return n;
  }();
  for (int i = 9; i < 64; ++i) EXPECT_EQ(c.add_group((*names)[i - 9]).id(), i);
  EXPECT_EQ(c.all().bits(), ~std::uint64_t{0});
  EXPECT_THROW(c.add_group(names->back()), std::length_error);  // the 65th
}

TEST(Catalogue, PresetIsLookedUpBeforeAGroupOfTheSameName) {
  Catalogue c = base_catalogue();
  c.set_preset("step", {group::step, group::optimizer});
  EXPECT_EQ(resolve(c, "step", "test"), (GroupSet{group::step, group::optimizer}));
}

TEST(Resolve, TrimsLowerCasesSkipsEmptyTokensAndUnites) {
  constexpr Catalogue c = megatron::catalogue();
  EXPECT_EQ(resolve(c, "  Job , ,LAYER,,  ", "test"), (GroupSet{mg::job, mg::layer}));
  EXPECT_EQ(resolve(c, "default,microbatch", "test"), c.find_preset("default")->groups | GroupSet{mg::microbatch});
  EXPECT_EQ(resolve(c, "PER_STEP", "test"), c.find_preset("per_step")->groups);
  EXPECT_EQ(resolve(c, "full", "test"), c.all());
  EXPECT_EQ(resolve(c, "profiling,job", "test"), c.all());
}

TEST(Resolve, EmptySpecEnablesNothing) {
  EXPECT_TRUE(resolve(megatron::catalogue(), "", "test").empty());
  EXPECT_TRUE(resolve(megatron::catalogue(), " , ,", "test").empty());
}

TEST(Resolve, UnknownTokenNamesSourceTokenEveryValidNameAndTheClosest) {
  try {
    resolve(megatron::catalogue(), "job, Per_Stp", "MEGATRON_OTEL_SPAN_GROUPS");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("MEGATRON_OTEL_SPAN_GROUPS"), std::string::npos) << m;
    EXPECT_NE(m.find("'Per_Stp'"), std::string::npos) << m;
    EXPECT_NE(m.find("did you mean 'per_step'?"), std::string::npos) << m;
    // Every group and preset, sorted.
    EXPECT_NE(m.find("activation_offload, all, checkpoint, communication, data_loading, default, evaluate, "
                     "first_iteration, forward_backward, full, inference, job, layer, load_checkpoint, "
                     "microbatch, model_init, optimizer, per_step, profiling, step, trace_region"),
              std::string::npos)
        << m;
  }
}

// `all,-layer` (the trainer's --help example) removes a group from a preset.
TEST(Resolve, AMinusRemovesAGroupOrAPresetWhateverTheOrder) {
  constexpr Catalogue c = megatron::catalogue();
  GroupSet all_but_layer(c.all().bits() & ~GroupSet{mg::layer}.bits());
  EXPECT_EQ(resolve(c, "all,-layer", "test"), all_but_layer);
  EXPECT_EQ(resolve(c, "-layer,all", "test"), all_but_layer);
  EXPECT_EQ(resolve(c, " ALL , - Layer ", "test"), all_but_layer);
  GroupSet per_step = c.find_preset("per_step")->groups;
  EXPECT_EQ(resolve(c, "per_step,microbatch,-communication", "test"),
            GroupSet((per_step | GroupSet{mg::microbatch}).bits() & ~GroupSet{mg::communication}.bits()));
  EXPECT_EQ(resolve(c, "all,-per_step", "test"), GroupSet(c.all().bits() & ~per_step.bits()));
  EXPECT_EQ(resolve(c, "layer,-layer", "test"), GroupSet{});  // a removal wins over the same name added
  EXPECT_TRUE(resolve(c, "-job", "test").empty());
}

TEST(Resolve, AnUnknownRemovalIsAnErrorWithARemovalSuggested) {
  for (const char* spec : {"all,-layr", "all,-", "all, - "}) {
    try {
      resolve(megatron::catalogue(), spec, "MEGATRON_OTEL_SPAN_GROUPS");
      FAIL() << spec << ": no error";
    } catch (const ConfigError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("unknown span group '-"), std::string::npos) << m;
      EXPECT_NE(m.find("each also as -name to remove it"), std::string::npos) << m;
      if (std::string_view(spec) == "all,-layr") {
        EXPECT_NE(m.find("did you mean '-layer'?"), std::string::npos) << m;
      }
    }
  }
}

TEST(Resolve, FlagIsNamedAsTheSource) {
  try {
    resolve(base_catalogue(), "laeyr", "--otel-span-groups");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--otel-span-groups='laeyr'"), std::string::npos) << e.what();
  }
}

TEST(Describe, NamesGroupsInCatalogueOrder) {
  EXPECT_EQ(describe(megatron::catalogue(), GroupSet{mg::layer, mg::job}), "job,layer");
  EXPECT_EQ(describe(megatron::catalogue(), GroupSet{}), "");
}

class Switch : public ::testing::Test {
 protected:
  void TearDown() override { internal::install_span_groups({}, {}); }
};

TEST_F(Switch, NothingIsEnabledBeforeSetup) {
  EXPECT_FALSE(is_enabled(group::job));
  EXPECT_FALSE(LENS_GROUP_ENABLED(group::job));
  EXPECT_TRUE(set_enabled_span_groups(GroupSet{group::job}).empty());  // no ceiling: stays empty
  EXPECT_FALSE(is_enabled(group::job));
}

TEST_F(Switch, SetReplacesTheWholeSetWithinTheCeiling) {
  internal::install_span_groups(megatron::catalogue().all(), GroupSet{mg::job});
  EXPECT_TRUE(is_enabled(mg::job));
  EXPECT_FALSE(is_enabled(mg::layer));
  EXPECT_EQ(set_enabled_span_groups(GroupSet{mg::layer}), GroupSet{mg::layer});
  EXPECT_FALSE(LENS_GROUP_ENABLED(mg::job));
  EXPECT_TRUE(LENS_GROUP_ENABLED(mg::layer));
  EXPECT_EQ(enabled_span_groups(), GroupSet{mg::layer});
  // Beyond the ceiling nothing is enabled.
  internal::install_span_groups(GroupSet{mg::job}, GroupSet{mg::job});
  EXPECT_EQ(set_enabled_span_groups(GroupSet{mg::job, mg::layer}), GroupSet{mg::job});
}

// Python's set_enabled_span_groups with a library's own group (outside the catalogue): ungated spans record while
// only such a group is on, on an exporting rank; elsewhere it stays off; setup and clear turn it off.
TEST_F(Switch, AGroupOutsideTheCatalogueRecordsUngatedSpansWithinTheCeiling) {
  EXPECT_FALSE(internal::set_outside_catalogue_enabled(true));  // no ceiling: a rank that does not export
  EXPECT_FALSE(internal::records_ungated_spans());
  internal::install_span_groups(base_catalogue().all(), GroupSet{});
  EXPECT_FALSE(internal::records_ungated_spans());
  EXPECT_TRUE(internal::set_outside_catalogue_enabled(true));
  EXPECT_TRUE(internal::records_ungated_spans());
  EXPECT_TRUE(enabled_span_groups().empty());  // the catalogue's groups are untouched
  internal::clear_span_groups();
  EXPECT_FALSE(internal::records_ungated_spans());
  EXPECT_TRUE(internal::set_outside_catalogue_enabled(true));
  internal::install_span_groups(base_catalogue().all(), GroupSet{group::step});  // a new setup starts without it
  EXPECT_TRUE(internal::records_ungated_spans());
  set_enabled_span_groups(GroupSet{});
  EXPECT_FALSE(internal::records_ungated_spans());
}

}  // namespace
}  // namespace lens
