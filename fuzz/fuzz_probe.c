/* libFuzzer harness: the first minute's probe's parsing and arithmetic
 * (lib/measure/probe.c) on the same bytes: a /proc/meminfo or
 * /proc/PID/status text, and the bytes read as progress records (time and
 * samples steps) and as a window rule's lengths and spreads.
 *
 * Invariants: no read past the input (the copy is exact-size under ASan);
 * a kB field that is read is the key at a line's start followed by ':', and
 * reads the same again; a spread over windows is NaN or finite and >= 0; the
 * window rule gives NaN ("unmeasured") or a length within its bounds, with
 * a finite error; the pool's size is at most the caller's bound. */
#include <math.h>

#include "fuzz_common.h"
#include "kace/pool.h"
#include "measure/probe_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1); /* a C string: what read_text gives the parser */
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    static const char *const keys[] = {"MemAvailable", "MemTotal", "VmRSS", "M"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        unsigned long long kib = 0, again = 1;
        if (!kace_probe_kib_field(text, keys[k], &kib))
            continue;
        const char *at = strstr(text, keys[k]);
        FUZZ_CHECK(at != NULL, "read %s from a text without it", keys[k]);
        FUZZ_CHECK(kace_probe_kib_field(text, keys[k], &again) && again == kib, "%s reads differ", keys[k]);
    }
    free(text);

    /* Records: 4 bytes each, a time step (1..65536 us) and a samples step. */
    size_t n = size / 4;
    kace_progress_record *r = calloc(n ? n : 1, sizeof *r);
    if (!r)
        return 0;
    int64_t t = 1000000000LL;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        t += ((int64_t)data[4 * i] << 8 | data[4 * i + 1]) * 1000 + 1000;
        s += (double)(data[4 * i + 2] << 8 | data[4 * i + 3]);
        r[i] = (kace_progress_record){.t_ns = t, .samples = s, .stamped = true};
    }
    double len[KACE_PROBE_WINDOWS], cv[KACE_PROBE_WINDOWS];
    size_t m = 0;
    for (double w = 0.001; m < KACE_PROBE_WINDOWS; w *= 1.4142135623730951, m++) {
        len[m] = w;
        cv[m] = kace_probe_window_cv(r, n, w);
        FUZZ_CHECK(isnan(cv[m]) || (isfinite(cv[m]) && cv[m] >= 0), "spread %g at %g s", cv[m], w);
    }
    double gap = kace_probe_median_gap_s(r, n);
    FUZZ_CHECK(n < 2 ? isnan(gap) : gap > 0, "median gap %g of %zu records", gap, n);
    free(r);
    /* The rule over spreads taken from the bytes too. */
    for (size_t i = 0; i < m && i < size; i++)
        if (data[i] % 7 == 0)
            cv[i] = NAN;
        else if (data[i] % 5 == 0)
            cv[i] = data[i] / 255.0;
    double err;
    const char *basis;
    double target = size ? 0.001 + data[0] / 256.0 : 0.02, lo = 0.01, hi = size > 1 ? 0.01 + data[1] : 30;
    double w = kace_probe_window_rule(len, cv, m, target, lo, hi, &err, &basis);
    FUZZ_CHECK(isnan(w) ? strcmp(basis, "unmeasured") == 0 : (w >= lo && w <= hi && isfinite(err)),
               "window %g (%s) in [%g, %g], error %g", w, basis, lo, hi, err);
    size_t bound = size > 2 ? data[2] % 40 : 0;
    size_t p = kace_probe_pool_size(size > 3 ? data[3] : SIZE_MAX, size * 1000ULL, size > 4 ? data[4] : 0, 0.8,
                                    bound, NULL);
    FUZZ_CHECK(p <= (bound ? bound : KACE_POOL_MAX_MEMBERS), "pool %zu over the bound %zu", p, bound);
    return 0;
}
