/* Host CPU time and resident memory of process groups, from /proc
 * (include/kace/host.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kace/host.h"

/* Fields after the ')' that ends the command name, counted from 0 at the
 * state (proc(5): pgrp is field 5, utime 14, stime 15, cutime 16, cstime
 * 17, rss 24). cutime and cstime hold the time of children the process
 * waited for: a DataLoader worker that ends keeps counting there. */
enum { F_PGRP = 2, F_UTIME = 11, F_STIME = 12, F_CUTIME = 13, F_CSTIME = 14, F_RSS = 21 };

kace_status kace_host_parse_stat(kace_ctx *ctx, const char *where, const char *text, size_t len, int *pgrp,
                                 uint64_t *ticks, uint64_t *rss_pages)
{
    /* The name may hold spaces and ')': it ends at the last ')'. */
    size_t close = len;
    for (size_t i = len; i-- > 0;)
        if (text[i] == ')') {
            close = i;
            break;
        }
    if (close == len)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:1: expected 'PID (NAME) STATE ...' (no ')' ends a name)",
                         where);
    uint64_t time[4] = {0}, rss = 0; /* utime stime cutime cstime */
    long long group = 0;
    size_t at = close + 1;
    for (int field = 0; field <= F_RSS; field++) {
        if (at >= len || text[at] != ' ')
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:%zu: expected a space before field %d of %d", where,
                             at + 1, field + 3, F_RSS + 3);
        at++;
        size_t start = at;
        while (at < len && text[at] != ' ' && text[at] != '\n')
            at++;
        if (at == start)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:%zu: expected field %d, found nothing", where, start + 1,
                             field + 3);
        if (field != F_PGRP && (field < F_UTIME || field > F_CSTIME) && field != F_RSS)
            continue;
        /* Decimal integers; rss (and, in proc(5)'s type, cutime and cstime)
         * may be negative, read as 0. */
        const char *p = text + start;
        int negative = *p == '-' && field != F_PGRP;
        uint64_t v = 0;
        for (p += negative; p < text + at; p++) {
            if (!isdigit((unsigned char)*p))
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:%zu: expected a number in field %d", where,
                                 (size_t)(p - text) + 1, field + 3);
            if (v > (UINT64_MAX - 9) / 10)
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:%zu: field %d is out of range", where, start + 1,
                                 field + 3);
            v = v * 10 + (uint64_t)(*p - '0');
        }
        if (negative && at == start + 1)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:%zu: expected a number in field %d, found '-'", where,
                             start + 1, field + 3);
        if (negative)
            v = 0;
        if (field == F_PGRP) {
            if (v > INT_MAX)
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:%zu: process group %llu is out of range", where,
                                 start + 1, (unsigned long long)v);
            group = (long long)v;
        } else if (field == F_RSS) {
            rss = v;
        } else {
            time[field - F_UTIME] = v;
        }
    }
    uint64_t sum = 0;
    for (int i = 0; i < 4; i++) {
        if (time[i] > UINT64_MAX - sum)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:1: the CPU times' sum is out of range", where);
        sum += time[i];
    }
    *pgrp = (int)group;
    *ticks = sum;
    *rss_pages = rss;
    return KACE_OK;
}

static kace_status read_mem_total(kace_ctx *ctx, const char *root, double *bytes)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/meminfo", root);
    FILE *f = fopen(path, "r");
    if (!f)
        return kace_fail(ctx, KACE_ERR_IO, "%s: %s", path, strerror(errno));
    char line[256];
    unsigned long long kib = 0;
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1) {
            found = 1;
            break;
        }
    fclose(f);
    if (!found || kib == 0)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s: expected a line 'MemTotal: N kB' with N > 0", path);
    *bytes = (double)kib * 1024.0;
    return KACE_OK;
}

/* A process's proportional set size (Pss of smaps_rollup, Linux >= 4.14):
 * its resident memory with each shared page divided among the processes
 * that map it, so that a group's sum does not count a page twice (forked
 * workers share their parent's). -1 where it cannot be read. */
static double pss_bytes(const char *root, const char *pid)
{
    char path[PATH_MAX], line[256];
    snprintf(path, sizeof path, "%s/%s/smaps_rollup", root, pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    unsigned long long kib;
    double bytes = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %llu kB", &kib) == 1) {
            bytes = (double)kib * 1024.0;
            break;
        }
    fclose(f);
    return bytes;
}

/* The next line of text[*at..len) in *line and *n (without its newline); false at the end. */
static bool next_line(const char *text, size_t len, size_t *at, const char **line, size_t *n)
{
    if (*at >= len)
        return false;
    *line = text + *at;
    const char *nl = memchr(*line, '\n', len - *at);
    *n = nl ? (size_t)(nl - *line) : len - *at;
    *at += *n + 1;
    return true;
}

/* Whether the comma-separated list[0..n) holds word. */
static bool list_has(const char *list, size_t n, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && list[j] != ',')
            j++;
        if (j - i == w && memcmp(list + i, word, w) == 0)
            return true;
        i = j + 1;
    }
    return false;
}

kace_status kace_host_parse_cgroup(kace_ctx *ctx, const char *where, const char *text, size_t len, char *path,
                                   size_t path_size, bool *v2)
{
    if (path_size)
        path[0] = '\0';
    *v2 = false;
    bool have_v1 = false;
    size_t line = 0, at = 0, n;
    const char *s;
    while (next_line(text, len, &at, &s, &n)) {
        line++;
        if (n == 0)
            continue;
        size_t id_end = 0;
        while (id_end < n && isdigit((unsigned char)s[id_end]))
            id_end++;
        if (id_end == 0 || id_end == n || s[id_end] != ':')
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected 'ID:CONTROLLERS:PATH' with a numeric ID",
                             where, line, id_end + 1);
        const char *ctl = s + id_end + 1, *colon = memchr(ctl, ':', n - id_end - 1);
        if (!colon)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected ':' after the controllers", where, line,
                             n + 1);
        size_t ctl_len = (size_t)(colon - ctl), path_len = n - id_end - 2 - ctl_len;
        const char *p = colon + 1;
        if (path_len == 0 || p[0] != '/')
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected a cgroup path starting with '/'", where, line,
                             (size_t)(p - s) + 1);
        if (memchr(p, '\0', path_len))
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: a NUL byte in the cgroup path", where, line,
                             (size_t)((const char *)memchr(p, '\0', path_len) - s) + 1);
        bool memory = list_has(ctl, ctl_len, "memory");
        bool is_v2 = ctl_len == 0 && id_end == 1 && s[0] == '0';
        if (!(memory || (is_v2 && !have_v1)))
            continue;
        if (path_len >= path_size)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: a cgroup path of %zu bytes (at most %zu)", where,
                             line, (size_t)(p - s) + 1, path_len, path_size ? path_size - 1 : 0);
        memcpy(path, p, path_len);
        path[path_len] = '\0';
        *v2 = !memory;
        have_v1 |= memory;
    }
    return KACE_OK;
}

kace_status kace_host_parse_memory_limit(kace_ctx *ctx, const char *where, const char *text, size_t len,
                                         double *bytes)
{
    size_t n = len && text[len - 1] == '\n' ? len - 1 : len;
    if (n == 3 && memcmp(text, "max", 3) == 0) {
        *bytes = INFINITY;
        return KACE_OK;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)text[i]) || v > (UINT64_MAX - 9) / 10)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:%zu: expected 'max' or a number of bytes", where, i + 1);
        v = v * 10 + (uint64_t)(text[i] - '0');
    }
    if (n == 0)
        return kace_fail(ctx, KACE_ERR_PARSE, "%s:1:1: expected 'max' or a number of bytes, not an empty file",
                         where);
    *bytes = (double)v;
    return KACE_OK;
}

/* One space-separated field of a mountinfo line, its \ooo escapes decoded. */
static kace_status mountinfo_field(kace_ctx *ctx, const char *where, size_t line, size_t col, const char *f,
                                   size_t n, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = f[i];
        if (c == '\\') {
            if (i + 3 >= n || !(f[i + 1] >= '0' && f[i + 1] <= '3') || !(f[i + 2] >= '0' && f[i + 2] <= '7') ||
                !(f[i + 3] >= '0' && f[i + 3] <= '7'))
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: expected an octal escape \\ooo", where, line,
                                 col + i);
            c = (char)((f[i + 1] - '0') * 64 + (f[i + 2] - '0') * 8 + (f[i + 3] - '0'));
            i += 3;
        }
        if (c == '\0' || o + 1 >= size)
            return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: %s", where, line, col + i,
                             c == '\0' ? "a NUL byte in a path" : "a path longer than kace reads");
        out[o++] = c;
    }
    out[o] = '\0';
    return KACE_OK;
}

kace_status kace_host_parse_mountinfo(kace_ctx *ctx, const char *where, const char *text, size_t len, bool v2,
                                      char *mount_point, size_t mount_point_size, char *mount_root,
                                      size_t mount_root_size, bool *found)
{
    *found = false;
    size_t line = 0, at = 0, n;
    const char *s;
    while (next_line(text, len, &at, &s, &n)) {
        line++;
        if (n == 0)
            continue;
        /* ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS */
        enum { MAX_FIELDS = 64 };
        size_t start[MAX_FIELDS], size[MAX_FIELDS], nf = 0;
        for (size_t i = 0; i < n;) {
            while (i < n && s[i] == ' ')
                i++;
            if (i == n)
                break;
            if (nf == MAX_FIELDS)
                return kace_fail(ctx, KACE_ERR_PARSE, "%s:%zu:%zu: more than %d fields", where, line, i + 1,
                                 MAX_FIELDS);
            start[nf] = i;
            while (i < n && s[i] != ' ')
                i++;
            size[nf] = i - start[nf];
            nf++;
        }
        size_t dash = 0;
        for (size_t f = 6; f < nf && !dash; f++)
            if (size[f] == 1 && s[start[f]] == '-')
                dash = f;
        if (nf < 6 || !dash || dash + 3 >= nf)
            return kace_fail(ctx, KACE_ERR_PARSE,
                             "%s:%zu:%zu: expected 'ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS ... - FSTYPE SOURCE "
                             "SUPER_OPTIONS'", where, line, nf ? start[nf - 1] + size[nf - 1] + 1 : 1);
        const char *fstype = s + start[dash + 1], *super = s + start[dash + 3];
        size_t fstype_n = size[dash + 1], super_n = size[dash + 3];
        bool match = v2 ? fstype_n == 7 && memcmp(fstype, "cgroup2", 7) == 0
                        : fstype_n == 6 && memcmp(fstype, "cgroup", 6) == 0 && list_has(super, super_n, "memory");
        if (!match || *found)
            continue;
        kace_status st;
        if ((st = mountinfo_field(ctx, where, line, start[3] + 1, s + start[3], size[3], mount_root,
                                  mount_root_size)) ||
            (st = mountinfo_field(ctx, where, line, start[4] + 1, s + start[4], size[4], mount_point,
                                  mount_point_size)))
            return st;
        *found = true;
    }
    return KACE_OK;
}

/* Reads a small file whole; -1 (errno set) where it cannot be opened. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, buf, size - 1);
    int saved = errno;
    close(fd);
    errno = saved;
    if (len >= 0)
        buf[len] = '\0';
    return len;
}

/* A whole file into a malloc'ed buffer (*out, NUL-terminated); -1 (errno set) where it cannot be read. */
static ssize_t read_whole(const char *path, char **out)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1)
            break;
        char *grown = cap < (16u << 20) ? realloc(buf, cap * 2) : NULL;
        if (!grown) {
            free(buf);
            buf = NULL;
            errno = EFBIG;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    int failed = !buf || ferror(f);
    int saved = buf ? EIO : errno;
    fclose(f);
    if (failed) {
        free(buf);
        errno = saved;
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    return (ssize_t)n;
}

kace_status kace_host_memory_limit(kace_ctx *ctx, const char *proc_root, const char *mount_prefix, double *bytes)
{
    *bytes = INFINITY;
    const char *proc = proc_root ? proc_root : "/proc", *prefix = mount_prefix ? mount_prefix : "";
    char file[PATH_MAX], path[PATH_MAX], mount_point[PATH_MAX], mount_root[PATH_MAX];
    char *text = NULL;
    snprintf(file, sizeof file, "%s/self/cgroup", proc);
    ssize_t len = read_whole(file, &text);
    if (len < 0)
        return errno == ENOENT ? KACE_OK : kace_fail(ctx, KACE_ERR_IO, "%s: %s", file, strerror(errno));
    bool v2;
    kace_status st = kace_host_parse_cgroup(ctx, file, text, (size_t)len, path, sizeof path, &v2);
    free(text);
    if (st || !path[0])
        return st;
    /* Where the hierarchy is mounted, and which cgroup the mount shows as its root. */
    bool found = false;
    snprintf(file, sizeof file, "%s/self/mountinfo", proc);
    if ((len = read_whole(file, &text)) >= 0) {
        st = kace_host_parse_mountinfo(ctx, file, text, (size_t)len, v2, mount_point, sizeof mount_point, mount_root,
                                       sizeof mount_root, &found);
        free(text);
        if (st)
            return st;
    }
    if (!found) { /* the usual places */
        snprintf(mount_point, sizeof mount_point, "%s", v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory");
        snprintf(mount_root, sizeof mount_root, "/");
    }
    /* kace's cgroup relative to the mount's root (a container's bind mount shows its own subtree). */
    size_t root_n = strlen(mount_root);
    while (root_n > 1 && mount_root[root_n - 1] == '/')
        root_n--;
    if (root_n > 1) {
        if (strncmp(path, mount_root, root_n) != 0 || (path[root_n] != '/' && path[root_n] != '\0'))
            return KACE_OK; /* kace's cgroup is not under this mount: no limit to read */
        memmove(path, path + root_n, strlen(path + root_n) + 1);
        if (!path[0])
            snprintf(path, sizeof path, "/");
    }
    /* From kace's cgroup up to the root: a parent's limit caps its children. */
    for (;;) {
        char limit_file[PATH_MAX * 3 + 32], value[64];
        snprintf(limit_file, sizeof limit_file, "%s%s%s/%s", prefix, strcmp(mount_point, "/") == 0 ? "" : mount_point,
                 strcmp(path, "/") == 0 ? "" : path, v2 ? "memory.max" : "memory.limit_in_bytes");
        ssize_t n = read_small(limit_file, value, sizeof value);
        double limit;
        if (n >= 0) { /* missing: the root, or a path not mounted here */
            if ((st = kace_host_parse_memory_limit(ctx, limit_file, value, (size_t)n, &limit)))
                return st;
            if (limit < *bytes)
                *bytes = limit;
        }
        char *slash = strrchr(path, '/');
        if (!slash || strcmp(path, "/") == 0)
            break;
        if (slash == path)
            slash[1] = '\0'; /* up to "/" */
        else
            *slash = '\0';
    }
    return KACE_OK;
}

/* The state letter of a /proc/PID/stat line (after the ')' that ends the
 * name and a space), '?' where there is none. */
static char stat_state(const char *text, size_t len)
{
    const char *close = NULL;
    for (size_t i = len; i-- > 0;)
        if (text[i] == ')') {
            close = text + i;
            break;
        }
    if (!close || (size_t)(close - text) + 2 >= len || close[1] != ' ')
        return '?';
    return close[2];
}

kace_status kace_host_read(kace_ctx *ctx, const char *proc_root, const int *pgids, size_t n_pgids,
                           kace_host_usage *out)
{
    memset(out, 0, sizeof *out);
    const char *root = proc_root ? proc_root : "/proc";
    kace_status st = read_mem_total(ctx, root, &out->mem_total_bytes);
    if (st)
        return st;
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (tck <= 0 || page <= 0)
        return kace_fail(ctx, KACE_ERR_UNSUPPORTED, "sysconf gives no clock tick or page size");
    DIR *d = opendir(root);
    if (!d)
        return kace_fail(ctx, KACE_ERR_IO, "%s: %s", root, strerror(errno));
    uint64_t ticks = 0;
    double resident = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        if (!isdigit((unsigned char)name[0]) || strspn(name, "0123456789") != strlen(name))
            continue;
        char path[PATH_MAX], text[4096];
        snprintf(path, sizeof path, "%s/%s/stat", root, name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue; /* it ended meanwhile */
        ssize_t len = read(fd, text, sizeof text - 1);
        close(fd);
        if (len <= 0)
            continue;
        text[len] = '\0';
        /* Any process on the host may be ending while it is read. One being
         * reaped (X) has handed its times to its parent and its line may be
         * cut short: never counted. A line that cannot be read is left out
         * when its process is a zombie (Z) or gone now (it ended meanwhile);
         * only a living process's bad line is an error. */
        char state = stat_state(text, (size_t)len);
        if (state == 'X' || state == 'x')
            continue;
        int pgrp;
        uint64_t t, rss;
        if ((st = kace_host_parse_stat(ctx, path, text, (size_t)len, &pgrp, &t, &rss))) {
            char folder[PATH_MAX];
            snprintf(folder, sizeof folder, "%s/%s", root, name);
            if (state == 'Z' || access(folder, F_OK) != 0)
                continue;
            closedir(d);
            return st;
        }
        for (size_t i = 0; i < n_pgids; i++)
            if (pgids[i] > 0 && pgids[i] == pgrp) {
                double pss = pss_bytes(root, name);
                ticks += t;
                resident += pss >= 0 ? pss : (double)rss * (double)page;
                out->n_processes++;
                out->n_pss += pss >= 0;
                break;
            }
    }
    closedir(d);
    out->cpu_s = (double)ticks / (double)tck;
    out->rss_bytes = resident;
    return KACE_OK;
}

void kace_host_stats_init(kace_host_stats *s)
{
    memset(s, 0, sizeof *s);
}

void kace_host_stats_add(kace_host_stats *s, int64_t now_ns, const kace_host_usage *u)
{
    if (s->n_reads > 0 && now_ns > s->last_ns) {
        double busy = u->cpu_s - s->last_cpu_s;
        if (busy >= 0) { /* a process that ended took its CPU time with it */
            s->busy_s += busy;
            s->span_s += (double)(now_ns - s->last_ns) / 1e9;
        } else {
            s->n_skipped++;
        }
    }
    s->last_ns = now_ns;
    s->last_cpu_s = u->cpu_s;
    double of = u->mem_total_bytes;
    if (s->mem_limit_bytes > 0 && s->mem_limit_bytes < of)
        of = s->mem_limit_bytes;
    if (of > 0) {
        s->mem_pct_sum += 100.0 * u->rss_bytes / of;
        s->mem_of_bytes = of;
    }
    s->n_reads++;
}

double kace_host_stats_cpu_pct(const kace_host_stats *s)
{
    return s->span_s > 0 ? 100.0 * s->busy_s / s->span_s : NAN;
}

double kace_host_stats_mem_pct(const kace_host_stats *s)
{
    return s->n_reads ? s->mem_pct_sum / (double)s->n_reads : NAN;
}
