/* A growable text buffer (see text_buf.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text_buf.h"

/* Room for `extra` more bytes and the NUL; false (and oom) when the
 * allocation fails. */
static bool tb_reserve(text_buf *t, size_t extra)
{
    if (t->p && t->len + extra < t->cap)
        return true;
    size_t cap = (t->cap ? t->cap * 2 : 1024) + extra + 1;
    char *p = realloc(t->p, cap);
    if (!p) {
        t->oom = true;
        return false;
    }
    t->p = p;
    t->cap = cap;
    return true;
}

void tb_printf(text_buf *t, const char *fmt, ...)
{
    if (t->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if (t->p && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        if (!tb_reserve(t, (size_t)n))
            return;
    }
}

void tb_append(text_buf *t, const char *data, size_t n)
{
    if (t->oom || n == 0 || !tb_reserve(t, n))
        return;
    memcpy(t->p + t->len, data, n);
    t->len += n;
    t->p[t->len] = '\0';
}
