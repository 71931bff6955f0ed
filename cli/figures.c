#include "figures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int run_gnuplot(const char *out_dir, const char *script)
{
    static int warned = 0;
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        if (!warned++)
            fprintf(stderr, "kace: gnuplot not found: figures skipped (apt-get install gnuplot-nox)\n");
        return -1;
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot", out_dir);
    FILE *p = popen(cmd, "w");
    if (!p)
        return -1;
    fputs(script, p);
    int rc = pclose(p);
    if (rc != 0) {
        fprintf(stderr, "kace: gnuplot failed (exit %d) drawing figures in %s\n", rc, out_dir);
        return -1;
    }
    return 0;
}

static const char *const common =
    "set terminal pngcairo size 1000,600 noenhanced font ',11'\n"
    "set datafile separator ','\n"
    "set key outside right top\n"
    "set grid ytics\n";

int figures_splits(const char *out_dir, const char *mode, const kace_split_results *r, bool with_xu)
{
    /* fig4 draws one bar per policy from a small transposed table. */
    char path[4096];
    snprintf(path, sizeof path, "%s/policies_%s_n3.csv", out_dir, mode);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    static const kace_policy order[] = {KACE_POL_SLOWDOWN, KACE_POL_KACE, KACE_POL_XU,  KACE_POL_BEST_RULE,
                                        KACE_POL_MEMCAP,   KACE_POL_MEM,  KACE_POL_SM, KACE_POL_RANDOM};
    fprintf(f, "policy,score\n");
    for (size_t p = 0; p < sizeof order / sizeof *order; p++)
        if (with_xu || order[p] != KACE_POL_XU)
            fprintf(f, "%s,%.6f\n", kace_policy_name(order[p]), kace_eval_mean(r, 3, order[p]));
    fclose(f);

    char script[8192];
    /* Columns of summary_<mode>.csv: n_occur, kace, KACE, Xu, Best rule,
     * MEMCAP, MEM%, SM%, Random, mse, r2, fit_ms, n_fit. */
    snprintf(script, sizeof script,
             "%s"
             "set output 'fig3_training_size_%s.png'\n"
             "set title 'Normalized throughput sum vs training size (%s mode)'\n"
             "set xlabel 'n_occur (each workload in at least n training pairs)'\n"
             "set ylabel 'achieved / Oracle'\n"
             "set yrange [0:1.05]\n"
             "plot for [c in '%s'] 'summary_%s.csv' using 1:(column(int(c))) with linespoints lw 2 title columnheader(int(c))\n"
             "set output 'fig2_error_%s.png'\n"
             "set multiplot layout 1,3 title 'KACE linear model on the whole test set (%s mode)'\n"
             "unset key\n"
             "set xlabel 'training rows fitted'\n"
             "set autoscale y\n"
             "set title 'MSE (z-units)'\n"
             "plot 'summary_%s.csv' using 13:10 with linespoints lw 2\n"
             "set title 'R^2'\n"
             "plot 'summary_%s.csv' using 13:11 with linespoints lw 2\n"
             "set title 'fit time (ms)'\n"
             "plot 'summary_%s.csv' using 13:12 with linespoints lw 2\n"
             "unset multiplot\n"
             "set output 'fig4_policies_%s.png'\n"
             "set title 'Policies at n_occur=3 (%s mode)'\n"
             "set style data histograms\n"
             "set style fill solid 0.8 border -1\n"
             "set xlabel ''\n"
             "set ylabel 'achieved / Oracle'\n"
             "set yrange [0:1.05]\n"
             "plot 'policies_%s_n3.csv' using 2:xtic(1) notitle\n"
             "set key outside right top\n"
             "set terminal pngcairo size 1400,600 noenhanced font ',10'\n"
             "set output 'fig5_targets_%s.png'\n"
             "set title 'Per target at n_occur=3 (%s mode)'\n"
             "set xtics rotate by -45\n"
             "plot 'targets_%s_n3.csv' using 2:xtic(1) title 'kace', '' using 3 title 'KACE (paper)', %s'' using 6 title 'MEMCAP'\n",
             common, mode, mode, with_xu ? "2 3 4 5 6 7 8 9" : "2 3 5 6 7 8 9", mode, mode, mode, mode, mode, mode, mode, mode, mode, mode, mode, mode, with_xu ? "'' using 4 title 'Xu', " : "");
    return run_gnuplot(out_dir, script);
}

int figures_targets(const char *out_dir, const char *mode, bool with_xu)
{
    const char *xu = with_xu ? "'' using 5 title 'Xu', " : "";
    char script[4096];
    /* Columns: target, candidates, kace, KACE, Xu, Best rule, MEMCAP, MEM%, SM%, Random. */
    snprintf(script, sizeof script,
             "%s"
             "set terminal pngcairo size 1400,600 noenhanced font ',10'\n"
             "set style data histograms\n"
             "set style fill solid 0.8 border -1\n"
             "set ylabel 'achieved / Oracle'\n"
             "set yrange [0:1.05]\n"
             "set xtics rotate by -45\n"
             "set output 'fig_unseen_%s.png'\n"
             "set title 'Unseen workload families, pairs (%s mode)'\n"
             "plot 'unseen_%s.csv' using 3:xtic(1) title 'kace', '' using 4 title 'KACE (paper)', %s'' using 7 title 'MEMCAP', "
             "'' using 10 title 'Random'\n"
             "if (system(\"test -f triples_%s.csv && echo 1\") eq \"1\") {\n"
             "  set output 'fig_triples_%s.png'\n"
             "  set title 'Three workloads at once (%s mode)'\n"
             "  plot 'triples_%s.csv' using 3:xtic(1) title 'kace', '' using 4 title 'KACE (paper)', %s'' using 7 title 'MEMCAP', "
             "'' using 10 title 'Random'\n"
             "}\n",
             common, mode, mode, mode, xu, mode, mode, mode, mode, xu);
    return run_gnuplot(out_dir, script);
}

int figures_gnuplot(const char *out_dir, const char *script)
{
    return run_gnuplot(out_dir, script);
}

int figures_beyond(const char *out_dir, bool groups, bool splits)
{
    char script[4096];
    int rc = 0;
    if (groups) {
        snprintf(script, sizeof script,
                 "%s"
                 "set output 'fig_groups.png'\n"
                 "set title 'Best group around a target: measured sum / Oracle (mean over targets)'\n"
                 "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
                 "set yrange [0:1.05]\nset ylabel 'normalized throughput sum'\n"
                 "plot for [c=2:6] 'groups_summary.csv' using c:xtic(sprintf('k=%%d', column(1))) title columnhead(c)\n",
                 common);
        rc |= run_gnuplot(out_dir, script);
    }
    if (splits) {
        snprintf(script, sizeof script,
                 "%s"
                 "set output 'fig_splits.png'\n"
                 "set title 'MPS thread split: chosen split / best measured split (leave-one-pair-out)'\n"
                 "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
                 "set yrange [0:1.05]\nset ylabel 'fraction of Oracle'\n"
                 "plot for [c=2:4] 'splits_advisor.csv' using c:xtic(1) title columnhead(c)\n"
                 "set output 'fig_splits_latency.png'\n"
                 "set title 'Latency-sensitive target met (cases where a measured split meets it)'\n"
                 "set xlabel 'LS target (%% of exclusive throughput)'\nset ylabel 'rate'\n"
                 "plot for [c=3:6] 'splits_latency.csv' using c:xtic(1) title columnhead(c)\n",
                 common);
        rc |= run_gnuplot(out_dir, script);
    }
    return rc ? -1 : 0;
}
