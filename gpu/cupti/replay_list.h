/* One line of kace profile's replay list ($KACE_CUPTI_REPLAY, written by
 * lib/measure/profile.c): "gx gy gz bx by bz name", six decimal sizes from
 * 1 to 2^32 - 1 separated by spaces, then the kernel's name to the end of
 * the line. Header-only, so that fuzz/fuzz_replay_list.c tests the very
 * code libkace_cupti.so runs. */
#ifndef KACE_REPLAY_LIST_H
#define KACE_REPLAY_LIST_H

#include <stdint.h>

/* The name's start in line (NUL-terminated, without its '\n'), with the
 * sizes in d; NULL when the line is not a signature. */
static inline const char *replay_list_line(const char *line, unsigned d[6])
{
    const char *p = line;
    for (int i = 0; i < 6; i++) {
        uint64_t v = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 11) {
            v = v * 10 + (uint64_t)(*p++ - '0');
            digits++;
        }
        if (digits == 0 || digits == 11 || v == 0 || v > UINT32_MAX || *p != ' ')
            return NULL;
        d[i] = (unsigned)v;
        while (*p == ' ')
            p++;
    }
    return *p ? p : NULL;
}

#endif
