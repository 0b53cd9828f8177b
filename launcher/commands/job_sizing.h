// job_sizing.h: describe_job_with_libtorch, the JobSizer of gtrain-worker (plan_command.h): the
// jobs whose model must be built, or whose data must be opened, to be sized.
#pragma once

#include "launcher/commands/plan_command.h"

namespace gtrain {

// The model's sizes (from its shape, with the data's vocabulary, or built once on the CPU: a
// plugin's model loads its library) and the steps (the data's size for train.epochs).
JobDescription describe_job_with_libtorch(const JobConfig& cfg);

}  // namespace gtrain
