/* libFuzzer harness for the calls' lines that kace export --dataset reads
 * (--calls: lib/store/store_dataset.c), written into a dataset folder of an
 * empty store.
 *
 * Checks, beyond the sanitizers:
 *  - any text up to its first NUL is written without failing;
 *  - campaign/visits.tsv holds exactly that text;
 *  - the README's table of calls has one row per non-empty line (one row
 *    saying "not recorded" when there is none), each row one line;
 *  - its title names the first call's GPU: the second field of the first
 *    non-empty line up to its first comma, or says it was not recorded. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "kace/store.h"
#include "kace/store_export.h"

static char dir[512];
static kace_store *store;
static kace_ctx *ctx;

static void cleanup(void)
{
    static const char *const files[] = {"README.md", "campaign/runs.csv", "campaign/spread.csv",
                                        "campaign/visits.tsv", "kace.db", "kace.db-wal", "kace.db-shm"};
    static const char *const dirs[] = {"profiles", "colocations", "campaign", ""};
    char path[700];
    kace_store_close(&store);
    kace_ctx_free(&ctx);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, dirs[i]);
        rmdir(path);
    }
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/kace-fuzz-dataset.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    FUZZ_CHECK(mkdtemp(dir) != NULL, "cannot create %s", dir);
    ctx = kace_ctx_new();
    FUZZ_CHECK(ctx != NULL, "no context");
    char db[600];
    snprintf(db, sizeof db, "%s/kace.db", dir);
    FUZZ_CHECK(kace_store_open(ctx, db, &store) == KACE_OK, "store: %s", kace_errmsg(ctx));
    atexit(cleanup);
}

static char *read_text(const char *name)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    FUZZ_CHECK(f != NULL, "%s not written", name);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    FUZZ_CHECK(text && fread(text, 1, (size_t)n, f) == (size_t)n, "cannot read %s", name);
    text[n] = '\0';
    fclose(f);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!store)
        setup();
    char *calls = malloc(size + 1);
    if (!calls)
        return 0;
    memcpy(calls, data, size);
    calls[size] = '\0';
    kace_dataset_stats stats;
    kace_status st = kace_store_export_dataset(ctx, store, dir, calls, &stats);
    FUZZ_CHECK(st == KACE_OK, "export failed: %s", kace_errmsg(ctx));

    char *visits = read_text("campaign/visits.tsv");
    FUZZ_CHECK(strcmp(visits, calls) == 0, "visits.tsv is not the calls' text");

    /* The calls' lines that are not empty, and the first one's GPU. */
    size_t lines = 0;
    char gpu[200] = "";
    for (const char *p = calls; *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len && lines++ == 0) {
            const char *tab = memchr(p, '\t', len);
            if (tab) {
                const char *f = tab + 1, *stop = memchr(f, '\t', (size_t)(p + len - f));
                size_t flen = stop ? (size_t)(stop - f) : (size_t)(p + len - f);
                const char *comma = memchr(f, ',', flen);
                snprintf(gpu, sizeof gpu, "%.*s", (int)(comma ? (size_t)(comma - f) : flen), f);
            }
        }
        p = end ? end + 1 : p + len;
    }
    char *readme = read_text("README.md");
    char title[300];
    snprintf(title, sizeof title, "# kace's own dataset: %s\n", *gpu ? gpu : "a GPU not recorded");
    FUZZ_CHECK(strncmp(readme, title, strlen(title)) == 0, "title: %.200s", readme);
    /* After the title's line no text of the calls' comes before their table. */
    static const char head[] = "## Where and when\n\n| call (UTC start) | GPU, driver, memory | CUDA | torch | bundle |\n"
                               "|---|---|---|---|---|\n";
    const char *table = strstr(strchr(readme, '\n'), head);
    FUZZ_CHECK(table != NULL, "no table of calls");
    table += strlen(head);
    const char *after = strstr(table, "\n\n");
    FUZZ_CHECK(after != NULL, "the table of calls does not end");
    size_t rows = 0;
    for (const char *p = table; p <= after; p = strchr(p, '\n') + 1) {
        FUZZ_CHECK(p[0] == '|', "a row of the calls' table does not start with '|': %.80s", p);
        rows++;
    }
    FUZZ_CHECK(rows == (lines ? lines : 1), "%zu rows for %zu calls", rows, lines);
    free(readme);
    free(visits);
    free(calls);
    return 0;
}
