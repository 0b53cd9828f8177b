// libtorch_job_sizer.cpp: the suites linked with LibTorch size jobs as gtrain-worker does (the model
// built, the data opened: job_sizing.h), so the plan, submit and report code they call in-process
// takes any model, as gtrain-worker's CLI does.
#include "launcher/commands/job_sizing.h"

namespace {

[[maybe_unused]] const bool kJobSizerSet = (gtrain::set_job_sizer(gtrain::describe_job_with_libtorch), true);

}  // namespace
