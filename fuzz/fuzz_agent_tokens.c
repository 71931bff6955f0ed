/* libFuzzer harness for the agent tokens file of `kace serve --agent-tokens`
 * (kace_agent_tokens_parse in lib/service/serve.c).
 *
 * Checks, beyond the sanitizers:
 *  - success gives at least one agent, failure none, and a message at
 *    "agents:<line>:<col>: ";
 *  - when the first line is exactly "NAME TOKEN", "Bearer TOKEN" names
 *    NAME. */
#include "fuzz_common.h"
#include "kace/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_copy(data, size);
    kace_ctx *ctx = kace_ctx_new();
    FUZZ_CHECK(text && ctx, "out of memory");
    kace_agent_tokens *t = NULL;
    kace_status st = kace_agent_tokens_parse(ctx, "agents", text, size, &t);
    if (st) {
        FUZZ_CHECK(st == KACE_ERR_PARSE || st == KACE_ERR_NOMEM, "status %d", (int)st);
        FUZZ_CHECK(!t, "agents on failure");
        const char *msg = kace_errmsg(ctx);
        if (st == KACE_ERR_PARSE) {
            const char *p = strncmp(msg, "agents:", 7) == 0 ? fuzz_skip_number(msg + 7) : NULL;
            p = p ? fuzz_skip_number(p) : NULL;
            FUZZ_CHECK(p && *p == ' ', "message not at agents:line:col: %s", msg);
        }
    } else {
        FUZZ_CHECK(t && kace_agent_tokens_count(t) >= 1, "no agent");
        /* a first line exactly "NAME TOKEN": its token names that agent */
        const char *nl = memchr(text, '\n', size);
        size_t first = nl ? (size_t)(nl - text) : size, n_name = 0;
        while (n_name < first && (islower((unsigned char)text[n_name]) || isdigit((unsigned char)text[n_name]) ||
                                  text[n_name] == '_' || text[n_name] == '-'))
            n_name++;
        bool plain = n_name > 0 && n_name < first && text[n_name] == ' ' && first - n_name - 1 < 4096;
        for (size_t i = n_name + 1; plain && i < first; i++)
            plain = (unsigned char)text[i] > ' ' && text[i] != 127;
        if (plain && first > n_name + 1) {
            char line[4200];
            snprintf(line, sizeof line, "Bearer %.*s", (int)(first - n_name - 1), text + n_name + 1);
            const char *name = kace_agent_of(t, line);
            FUZZ_CHECK(name && strlen(name) == n_name && strncmp(name, text, n_name) == 0,
                       "the first line's token names %s", name ? name : "no one");
        }
    }
    kace_agent_tokens_free(&t);
    kace_ctx_free(&ctx);
    free(text);
    return 0;
}
