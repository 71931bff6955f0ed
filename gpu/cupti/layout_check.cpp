// Compile-time check that gpu/cupti/profiler_host.h, the C copy of the part
// of CUPTI's C++-only cupti_profiler_host.h that inject.c uses, matches the
// real header of the toolkit it is built against: same sizes, same field
// offsets, same enum values. Built with libkace_cupti.so; nothing runs.
#include <cstddef>

#include <cupti_profiler_host.h>

namespace kace_copy {
#include "profiler_host.h"
}

#define SAME_SIZE(type_) \
    static_assert(sizeof(::type_) == sizeof(kace_copy::type_), #type_ ": size differs from the CUDA header")
#define SAME_FIELD(type_, field_)                                                        \
    static_assert(offsetof(::type_, field_) == offsetof(kace_copy::type_, field_) &&     \
                      sizeof(::type_::field_) == sizeof(kace_copy::type_::field_),         \
                  #type_ "." #field_ ": offset or size differs from the CUDA header")

SAME_SIZE(CUpti_Profiler_Host_Initialize_Params);
SAME_FIELD(CUpti_Profiler_Host_Initialize_Params, structSize);
SAME_FIELD(CUpti_Profiler_Host_Initialize_Params, pPriv);
SAME_FIELD(CUpti_Profiler_Host_Initialize_Params, profilerType);
SAME_FIELD(CUpti_Profiler_Host_Initialize_Params, pChipName);
SAME_FIELD(CUpti_Profiler_Host_Initialize_Params, pCounterAvailabilityImage);
SAME_FIELD(CUpti_Profiler_Host_Initialize_Params, pHostObject);

SAME_SIZE(CUpti_Profiler_Host_Deinitialize_Params);
SAME_FIELD(CUpti_Profiler_Host_Deinitialize_Params, structSize);
SAME_FIELD(CUpti_Profiler_Host_Deinitialize_Params, pPriv);
SAME_FIELD(CUpti_Profiler_Host_Deinitialize_Params, pHostObject);

SAME_SIZE(CUpti_Profiler_Host_ConfigAddMetrics_Params);
SAME_FIELD(CUpti_Profiler_Host_ConfigAddMetrics_Params, structSize);
SAME_FIELD(CUpti_Profiler_Host_ConfigAddMetrics_Params, pPriv);
SAME_FIELD(CUpti_Profiler_Host_ConfigAddMetrics_Params, pHostObject);
SAME_FIELD(CUpti_Profiler_Host_ConfigAddMetrics_Params, ppMetricNames);
SAME_FIELD(CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);

SAME_SIZE(CUpti_Profiler_Host_GetConfigImageSize_Params);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImageSize_Params, structSize);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImageSize_Params, pPriv);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImageSize_Params, pHostObject);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize);

SAME_SIZE(CUpti_Profiler_Host_GetConfigImage_Params);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImage_Params, structSize);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImage_Params, pPriv);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImage_Params, pHostObject);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImage_Params, configImageSize);
SAME_FIELD(CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);

SAME_SIZE(CUpti_Profiler_Host_GetNumOfPasses_Params);
SAME_FIELD(CUpti_Profiler_Host_GetNumOfPasses_Params, structSize);
SAME_FIELD(CUpti_Profiler_Host_GetNumOfPasses_Params, pPriv);
SAME_FIELD(CUpti_Profiler_Host_GetNumOfPasses_Params, configImageSize);
SAME_FIELD(CUpti_Profiler_Host_GetNumOfPasses_Params, pConfigImage);
SAME_FIELD(CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);

SAME_SIZE(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, structSize);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, pPriv);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, pHostObject);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, pCounterDataImage);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, counterDataImageSize);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, rangeIndex);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, ppMetricNames);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, numMetrics);
SAME_FIELD(CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues);

static_assert(static_cast<int>(::CUPTI_PROFILER_TYPE_RANGE_PROFILER) ==
                  static_cast<int>(kace_copy::CUPTI_PROFILER_TYPE_RANGE_PROFILER),
              "CUPTI_PROFILER_TYPE_RANGE_PROFILER differs from the CUDA header");
static_assert(sizeof(::CUpti_ProfilerType) == sizeof(kace_copy::CUpti_ProfilerType),
              "CUpti_ProfilerType: size differs from the CUDA header");
