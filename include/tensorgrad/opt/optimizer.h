#pragma once
// Everything of tensorgrad::opt in one include: losses and metrics by their
// Keras names, the optimizer settings and state, what a model must give an
// optimizer context, the context itself and its hook stage, and the
// learning-rate schedules.
#include "tensorgrad/opt/hook_stage.h"
#include "tensorgrad/opt/losses.h"
#include "tensorgrad/opt/metrics.h"
#include "tensorgrad/opt/model_function.h"
#include "tensorgrad/opt/optimizer_context.h"
#include "tensorgrad/opt/optimizer_spec.h"
#include "tensorgrad/opt/schedules.h"
