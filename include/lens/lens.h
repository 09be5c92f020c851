// lens/lens.h: everything a training program includes.
//
// lens is OpenTelemetry for distributed deep-learning training: span groups switch trace granularity at run
// time for a few nanoseconds a check; configuration comes from the environment and the command line; a rank
// strategy picks the ranks that export. Define LENS_DISABLED for the whole program to compile it all out.
//
//   #include <lens/lens.h>
//   lens::Telemetry telemetry = lens::setup_telemetry(lens::Config::from_env("MYTRAINER_OTEL"));
//   if (LENS_GROUP_ENABLED(lens::group::step)) { ... }
//   telemetry.shutdown();
#pragma once

#include "lens/config.h"
#include "lens/context.h"
#include "lens/control.h"
#include "lens/device.h"
#include "lens/groups.h"
#include "lens/log.h"
#include "lens/megatron.h"
#include "lens/metrics.h"
#include "lens/ranks.h"
#include "lens/resource.h"
#include "lens/sampling.h"
#include "lens/straggler.h"
#include "lens/telemetry.h"
#include "lens/worker.h"
