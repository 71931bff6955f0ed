/* kace-dynlib-probe: not installed. kace loads LAPACKE, libxgboost, libmicrohttpd,
 * libcurl and libslurm with dlopen (include/kace/dynlib.h), so its NEEDED list no
 * longer names them; this program is linked with them and takes the address of
 * every function kace forwards (the dl_*.c files built with KACE_DYNLIB_PROBE),
 * so that dpkg-shlibdeps (packaging/build-deb.sh) gives the .deb the same
 * Depends, with the same minimum versions, as when kace linked them. */
#include <stdio.h>

typedef void (*const probe_list[])(void);
extern probe_list kace_probe_lapacke, kace_probe_xgboost, kace_probe_mhd, kace_probe_curl;
#ifdef KACE_HAVE_SLURM
extern probe_list kace_probe_slurm;
#endif

static size_t count(void (*const *list)(void))
{
    size_t n = 0;
    while (list[n])
        n++;
    return n;
}

int main(void)
{
    size_t n = count(kace_probe_lapacke) + count(kace_probe_xgboost) + count(kace_probe_mhd) + count(kace_probe_curl);
#ifdef KACE_HAVE_SLURM
    n += count(kace_probe_slurm);
#endif
    printf("%zu functions kace loads with dlopen\n", n);
    return 0;
}
