/* A growable, NUL-terminated text buffer for writers that build a whole
 * text before handing it over (model files, tree JSON). Once an allocation
 * fails it stays failed (oom) and ignores further writes. */
#ifndef KACE_LIB_TEXT_BUF_H
#define KACE_LIB_TEXT_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct text_buf {
    char *p;
    size_t len, cap;
    bool oom;
} text_buf;

void tb_printf(text_buf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tb_append(text_buf *t, const char *data, size_t n);

#endif
