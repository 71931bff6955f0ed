/* Workload catalogs: the workloads a device campaign profiles and measures,
 * and the command that runs each (workloads/catalog.txt is one).
 *
 * One entry a line:  NAME KIND COMMAND...
 *   NAME     a workload name (include/kace/workload_name.h)
 *   KIND     cuda, torch, llm or cmd
 *   COMMAND  its words, split and quoted as xargs does, which is how the
 *            device scripts read them: words are separated by spaces and
 *            tabs; '...' and "..." quote everything up to the same quote
 *            (a backslash inside them is an ordinary byte); outside quotes a
 *            backslash makes the next byte ordinary. Nothing is expanded or
 *            globbed. Then the placeholders @W@, @PY@ and @KACE@ are replaced,
 *            in that order, in every word.
 * An empty line, a line of blanks and a line whose first non-blank byte is
 * '#' hold nothing; '#' elsewhere is an ordinary byte. A line may end in
 * "\r\n". Two lines may not name the same workload: the first one stays.
 *
 * Errors name origin:line:column and what was expected. The library only
 * reads: it never prints. */
#ifndef KACE_CATALOG_H
#define KACE_CATALOG_H

#include <stddef.h>

#include "kace/kace.h"
#include "kace/workload_name.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kace_catalog_kind {
    KACE_CATALOG_CUDA,  /* a CUDA C program (workloads/build/kace_kernels) */
    KACE_CATALOG_TORCH, /* a PyTorch model */
    KACE_CATALOG_LLM,   /* a language model generating tokens */
    KACE_CATALOG_CMD    /* any other command */
} kace_catalog_kind;

typedef struct kace_catalog_entry {
    char name[KACE_WORKLOAD_NAME_MAX + 1];
    kace_catalog_kind kind;
    int argc;     /* >= 1 */
    char **argv;  /* argc words, placeholders replaced, then NULL */
    char *text;   /* the line as written, without its line end: placeholders
                     as written, so it is the same wherever a bundle is unpacked */
    char *origin; /* the file (or origin) the entry came from */
    int line;     /* its line there, from 1 */
} kace_catalog_entry;

typedef struct kace_catalog {
    kace_catalog_entry *entries; /* in the order of the lines read */
    size_t n;
    /* Lines left out under KACE_CATALOG_LEAVE_OUT, each an error message
     * ("origin:line:col: ..."), in the order met. */
    char **left_out;
    size_t n_left_out;
} kace_catalog;

/* The placeholders' values. NULL leaves that placeholder as written. */
typedef struct kace_catalog_values {
    const char *workloads; /* @W@: the workloads folder */
    const char *python;    /* @PY@: the Python interpreter */
    const char *kace;      /* @KACE@: the kace program */
} kace_catalog_values;

/* Flags of kace_catalog_parse. */
enum {
    /* A bad line (a name that breaks the rule or an earlier line has, an
     * unknown kind, no command, a quote that does not close) is left out and
     * its message added to left_out, as the device scripts do, instead of
     * failing the whole call. */
    KACE_CATALOG_LEAVE_OUT = 1u << 0
};

/* Appends the entries of text[0..len) to *cat (zero it before the first
 * call); names already in *cat count as earlier lines, so a second catalog
 * read into the same one cannot repeat the first's names. values may be NULL.
 * On failure *cat is as it was before the call: KACE_ERR_PARSE for a bad
 * line (without KACE_CATALOG_LEAVE_OUT), KACE_ERR_NOMEM. */
kace_status kace_catalog_parse(kace_ctx *ctx, kace_catalog *cat, const char *text, size_t len, const char *origin,
                               const kace_catalog_values *values, unsigned flags);
/* The same for a file (origin: its path); KACE_ERR_IO when it cannot be read. */
kace_status kace_catalog_load(kace_ctx *ctx, kace_catalog *cat, const char *path, const kace_catalog_values *values,
                              unsigned flags);
/* Frees what *cat holds and zeroes it. */
void kace_catalog_free(kace_catalog *cat);

/* The entry named name, or NULL. */
const kace_catalog_entry *kace_catalog_find(const kace_catalog *cat, const char *name);
/* "cuda", "torch", "llm" or "cmd". */
const char *kace_catalog_kind_name(kace_catalog_kind kind);

#ifdef __cplusplus
}
#endif

#endif
