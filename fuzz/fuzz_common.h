/* Helpers shared by the libFuzzer harnesses (header only: every fuzz_*.c is
 * its own executable). */
#ifndef KACE_FUZZ_COMMON_H
#define KACE_FUZZ_COMMON_H

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kace/kace.h"

/* An invariant broke: say which and abort so that libFuzzer keeps the input. */
#define FUZZ_CHECK(cond, ...)                                                                                \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: invariant failed: %s\n  ", __FILE__, __LINE__, #cond);                   \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

/* An exact-size copy of the input so that ASan sees any read past its end. */
static inline char *fuzz_copy(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1);
    if (copy && size)
        memcpy(copy, data, size);
    return copy;
}

/* Skips "<digits>:"; NULL when s does not start that way. */
static inline const char *fuzz_skip_number(const char *s)
{
    if (!isdigit((unsigned char)*s))
        return NULL;
    while (isdigit((unsigned char)*s))
        s++;
    return *s == ':' ? s + 1 : NULL;
}

/* The library's promise for a failure: a non-empty message with a ':' that
 * starts with "<origin>:"; for malformed input (KACE_ERR_PARSE)
 * "<origin>:<line>:<col>: ". Exempt from the origin prefix: out of memory
 * (libFuzzer's -malloc_limit_mb can cause it) and KACE_ERR_MODEL, whose
 * messages come from the forest backend (lib/model/forest.c), which does not know
 * the origin (reported: kace_model_from_text should prefix them). */
static inline void fuzz_check_failure(const kace_ctx *ctx, kace_status st, const char *origin)
{
    const char *msg = kace_errmsg(ctx);
    FUZZ_CHECK(st != KACE_OK, "status");
    FUZZ_CHECK(msg && msg[0] != '\0', "status %d (%s) without a message", (int)st, kace_strerror(st));
    FUZZ_CHECK(strchr(msg, ':') != NULL, "message without ':': %s", msg);
    if (st == KACE_ERR_NOMEM || st == KACE_ERR_MODEL)
        return;
    size_t n = strlen(origin);
    FUZZ_CHECK(strncmp(msg, origin, n) == 0 && msg[n] == ':', "message does not start with '%s:': %s", origin,
               msg);
    if (st == KACE_ERR_PARSE) {
        const char *p = fuzz_skip_number(msg + n + 1);
        p = p ? fuzz_skip_number(p) : NULL;
        FUZZ_CHECK(p && *p == ' ' && p[1] != '\0', "parse error without '%s:line:col: ': %s", origin, msg);
    }
}

static inline bool fuzz_is_name(const char *s, size_t size)
{
    size_t n = strnlen(s, size);
    if (n == 0 || n >= size)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20)
            return false;
    return true;
}

#endif
