/* libFuzzer harness: one line of kace profile's replay list, as
 * libkace_cupti.so reads it (gpu/cupti/replay_list.h).
 *
 * Invariants: a line is taken or refused, never read past its end; a taken
 * line gives six sizes from 1 and a non-empty name inside the line, and
 * writing them back as kace profile does gives a line read the same way. */
#include <stdio.h>

#include "fuzz_common.h"
#include "../gpu/cupti/replay_list.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = malloc(size + 1);
    if (!line)
        return 0;
    if (size)
        memcpy(line, data, size);
    line[size] = '\0';
    unsigned d[6];
    const char *name = replay_list_line(line, d);
    if (name) {
        FUZZ_CHECK(name > line && name < line + size + 1 && *name, "name outside the line");
        for (int i = 0; i < 6; i++)
            FUZZ_CHECK(d[i] > 0, "size %d is 0", i);
        size_t len = strlen(name) + 6 * 11 + 8;
        char *again = malloc(len);
        if (again) {
            snprintf(again, len, "%u %u %u %u %u %u %s", d[0], d[1], d[2], d[3], d[4], d[5], name);
            unsigned e[6];
            const char *name2 = replay_list_line(again, e);
            FUZZ_CHECK(name2 && strcmp(name2, name) == 0 && memcmp(d, e, sizeof d) == 0,
                       "'%s' does not read back as itself", again);
            free(again);
        }
    }
    free(line);
    return 0;
}
