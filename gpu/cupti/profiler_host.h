/* The subset of CUPTI's profiler host API (cupti_profiler_host.h) that
 * inject.c uses, declared for C: the CUDA 13 header includes the C++ header
 * <string> and so cannot be included from C. Layouts and names follow the
 * CUPTI API reference; every struct starts with structSize, which CUPTI
 * checks, so a layout mismatch is refused at run time rather than misread. */
#ifndef KACE_CUPTI_PROFILER_HOST_H
#define KACE_CUPTI_PROFILER_HOST_H

#include <stddef.h>
#include <stdint.h>

#include <cupti_result.h>

#ifndef CUPTI_PROFILER_STRUCT_SIZE
#define CUPTI_PROFILER_STRUCT_SIZE(type_, lastfield_) (offsetof(type_, lastfield_) + sizeof(((type_ *)0)->lastfield_))
#endif

typedef enum CUpti_ProfilerType {
    CUPTI_PROFILER_TYPE_RANGE_PROFILER,
    CUPTI_PROFILER_TYPE_PM_SAMPLING,
    CUPTI_PROFILER_TYPE_PROFILER_INVALID
} CUpti_ProfilerType;

typedef struct CUpti_Profiler_Host_Object CUpti_Profiler_Host_Object;

typedef struct CUpti_Profiler_Host_Initialize_Params {
    size_t structSize;
    void *pPriv;
    CUpti_ProfilerType profilerType;
    const char *pChipName;
    const uint8_t *pCounterAvailabilityImage;
    CUpti_Profiler_Host_Object *pHostObject;
} CUpti_Profiler_Host_Initialize_Params;
#define CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE \
    CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_Initialize_Params, pHostObject)

typedef struct CUpti_Profiler_Host_Deinitialize_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
} CUpti_Profiler_Host_Deinitialize_Params;
#define CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE \
    CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_Deinitialize_Params, pHostObject)

typedef struct CUpti_Profiler_Host_ConfigAddMetrics_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    const char **ppMetricNames;
    size_t numMetrics;
} CUpti_Profiler_Host_ConfigAddMetrics_Params;
#define CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE \
    CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics)

typedef struct CUpti_Profiler_Host_GetConfigImageSize_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    size_t configImageSize;
} CUpti_Profiler_Host_GetConfigImageSize_Params;
#define CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE \
    CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize)

typedef struct CUpti_Profiler_Host_GetConfigImage_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    size_t configImageSize;
    uint8_t *pConfigImage;
} CUpti_Profiler_Host_GetConfigImage_Params;
#define CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE \
    CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage)

typedef struct CUpti_Profiler_Host_GetNumOfPasses_Params {
    size_t structSize;
    void *pPriv;
    size_t configImageSize;
    uint8_t *pConfigImage;
    size_t numOfPasses;
} CUpti_Profiler_Host_GetNumOfPasses_Params;
#define CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE \
    CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses)

typedef struct CUpti_Profiler_Host_EvaluateToGpuValues_Params {
    size_t structSize;
    void *pPriv;
    CUpti_Profiler_Host_Object *pHostObject;
    const uint8_t *pCounterDataImage;
    size_t counterDataImageSize;
    size_t rangeIndex;
    const char **ppMetricNames;
    size_t numMetrics;
    double *pMetricValues;
} CUpti_Profiler_Host_EvaluateToGpuValues_Params;
#define CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE \
    CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues)

CUptiResult cuptiProfilerHostInitialize(CUpti_Profiler_Host_Initialize_Params *pParams);
CUptiResult cuptiProfilerHostDeinitialize(CUpti_Profiler_Host_Deinitialize_Params *pParams);
CUptiResult cuptiProfilerHostConfigAddMetrics(CUpti_Profiler_Host_ConfigAddMetrics_Params *pParams);
CUptiResult cuptiProfilerHostGetConfigImageSize(CUpti_Profiler_Host_GetConfigImageSize_Params *pParams);
CUptiResult cuptiProfilerHostGetConfigImage(CUpti_Profiler_Host_GetConfigImage_Params *pParams);
CUptiResult cuptiProfilerHostGetNumOfPasses(CUpti_Profiler_Host_GetNumOfPasses_Params *pParams);
CUptiResult cuptiProfilerHostEvaluateToGpuValues(CUpti_Profiler_Host_EvaluateToGpuValues_Params *pParams);

#endif
