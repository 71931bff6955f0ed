/* Physical ranges of the metrics the store keeps (include/kace/dataset.h):
 * an import refuses a value outside them, so that sm% = 200 or 1e308 never
 * reaches a fit or a prediction. Upper bounds are generous: they exist to
 * keep sums and products finite, not to second-guess a new GPU. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kace/dataset.h"

typedef struct metric_range {
    const char *name;
    double lo, hi;
    bool lo_open; /* lo itself is refused (throughputs: > 0) */
    const char *what;
} metric_range;

#define PERCENT 0, 100, false, "a percentage"
#define COUNT 0, 1e15, false, "a count or size"
#define THROUGHPUT 0, 1e9, true, "a throughput in samples/s"

static const metric_range ranges[] = {
    /* Kernel metrics (Nsight Compute, CUPTI). */
    {"Threads", COUNT},
    {"Compute (SM) Throughput", PERCENT},
    {"DRAM Throughput", PERCENT},
    {"Memory Throughput", PERCENT},
    {"Registers", COUNT},
    {"Static Shared Memory", COUNT},
    /* System metrics and exclusive throughput. */
    {"exclusive_throughput", THROUGHPUT},
    {"exclusive_throughput_sd", 0, 1e9, false, "a spread of samples/s"},
    /* kace export --dataset's clean run, alone without MPS, where Exclusive100 is alone under MPS. */
    {"exclusive_nomps", THROUGHPUT},
    {"Exclusive50", THROUGHPUT},
    {"sm%", PERCENT},
    {"mem%", PERCENT},
    {"memcap", 0, 4096, false, "GPU memory in GB"},
    {"power_W", 0, 1e5, false, "a power in W"},
    {"sm_clock_MHz", 0, 1e5, false, "a clock in MHz"},
    {"pcie_tx_MBps", 0, 1e9, false, "a bandwidth in MB/s"},
    {"pcie_rx_MBps", 0, 1e9, false, "a bandwidth in MB/s"},
    /* Xu et al. baseline metrics. */
    {"PCIe read bandwidth", 0, 1e9, false, "a bandwidth"},
    {"PCIe write bandwidth", 0, 1e9, false, "a bandwidth"},
    {"Short_Kernel", COUNT},
    {"avg_Thread", COUNT},
    {"Long_Kernel", 0, 1e15, false, "a duration"},
    {"ave_Kernel_Length", 0, 1e15, false, "a duration"},
    {"long/short_Ratio", 0, 1e15, false, "a ratio"},
    /* Host CPU% sums over cores (the reference data has 724). */
    {"CPU%", 0, 1e5, false, "a host CPU percentage summed over cores"},
    {"MainMem%", PERCENT},
    /* kace profile's cap on kernel replay (docs/profile.md). */
    {"replay_signatures", COUNT},
    {"replay_signatures_seen", COUNT},
    {"replay_time_share", 0, 1, false, "a share of GPU time"},
    {"replay_cover", 0, 1, false, "a share of GPU time"},
    {"replay_max", COUNT},
    {"counters_time_share", 0, 1, false, "a share of GPU time"},
    {"exclusive_mps10", THROUGHPUT},
    {"exclusive_mps20", THROUGHPUT},
    {"exclusive_mps30", THROUGHPUT},
    {"exclusive_mps40", THROUGHPUT},
    {"exclusive_mps50", THROUGHPUT},
    {"exclusive_mps60", THROUGHPUT},
    {"exclusive_mps70", THROUGHPUT},
    {"exclusive_mps80", THROUGHPUT},
    {"exclusive_mps90", THROUGHPUT},
    {"exclusive_mps100", THROUGHPUT},
};

static const metric_range *find(const char *name)
{
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++)
        if (strcmp(ranges[i].name, name) == 0)
            return &ranges[i];
    return NULL;
}

bool kace_metric_is_stored(const char *name)
{
    return name && find(name) != NULL;
}

const char *kace_metric_check(const char *name, double value, char *buf, size_t size)
{
    const metric_range *r = name ? find(name) : NULL;
    if (!r) {
        snprintf(buf, size, "unknown metric '%.60s'", name ? name : "");
        return buf;
    }
    if (isnan(value))
        return NULL; /* missing */
    if (!isfinite(value) || value < r->lo || (r->lo_open && value == r->lo) || value > r->hi) {
        snprintf(buf, size, "%s = %g is out of range (%s: %s%g..%g)", name, value, r->what,
                 r->lo_open ? "more than " : "", r->lo, r->hi);
        return buf;
    }
    return NULL;
}

double kace_throughput_max(void)
{
    return 1e9;
}
