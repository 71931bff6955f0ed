/* libFuzzer harness for the placer's parsers (lib/decide/place.c): the kace.conf
 * configuration (kace_place_config_parse), the job tag kace writes into a
 * Slurm admin comment (kace_place_tag_parse) and Slurm gres strings
 * (kace_place_gres_count).
 *
 * Checks, beyond the sanitizers:
 *  - configuration: failure is KACE_ERR_PARSE with a message starting with
 *    the origin; success has a store, gres mps or shard and options in range;
 *  - tag: a parsed tag has a non-empty name without spaces and a share in
 *    0..100, and formatting it again parses to the same;
 *  - gres: counts are never negative. */
#include "fuzz_common.h"
#include "kace/place.h"

static const char origin[] = "fuzz/kace.conf";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_copy(data, size);
    if (!text)
        return 0;
    kace_ctx *ctx = kace_ctx_new();
    kace_place_config cfg;
    kace_place_config_default(&cfg);
    kace_status st = kace_place_config_parse(ctx, text, size, origin, &cfg);
    if (st) {
        FUZZ_CHECK(st == KACE_ERR_PARSE, "status %d", st);
        FUZZ_CHECK(strncmp(kace_errmsg(ctx), origin, strlen(origin)) == 0, "message '%s'", kace_errmsg(ctx));
    } else {
        FUZZ_CHECK(cfg.store[0] != '\0', "no store");
        FUZZ_CHECK(strcmp(cfg.gres, "mps") == 0 || strcmp(cfg.gres, "shard") == 0, "gres '%s'", cfg.gres);
        FUZZ_CHECK(cfg.refresh_seconds >= 1 && cfg.load_all_max >= 0 && cfg.options.knee > 0 && cfg.options.knee <= 1 &&
                       cfg.options.min_share >= 1 && cfg.options.min_share <= 100 &&
                       cfg.options.default_share >= 10 && cfg.options.default_share <= 100 &&
                       cfg.options.min_confidence >= 0 && cfg.options.min_confidence <= 1,
                   "options out of range");
    }

    /* The same bytes as a NUL-terminated comment and gres string. */
    char *str = malloc(size + 1);
    if (str) {
        memcpy(str, data, size);
        str[size] = '\0';
        char workload[KACE_NAME_MAX], again[KACE_NAME_MAX], tag[KACE_NAME_MAX + 32];
        int share = -1, share2 = -1;
        if (kace_place_tag_parse(str, workload, &share)) {
            FUZZ_CHECK(workload[0] != '\0' && share >= 0 && share <= 100, "tag '%s' %d", workload, share);
            for (const char *p = workload; *p; p++)
                FUZZ_CHECK(!isspace((unsigned char)*p) && *p != ',', "workload '%s'", workload);
            FUZZ_CHECK(kace_place_tag_format(tag, sizeof tag, workload, share), "format");
            FUZZ_CHECK(kace_place_tag_parse(tag, again, &share2), "reparse '%s'", tag);
            FUZZ_CHECK(strcmp(again, workload) == 0 && share2 == share, "round trip '%s'", tag);
        }
        FUZZ_CHECK(kace_place_gres_count(str, "gpu") >= 0 && kace_place_gres_count(str, "mps") >= 0, "gres");
        free(str);
    }
    kace_ctx_free(&ctx);
    free(text);
    return 0;
}
