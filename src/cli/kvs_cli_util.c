/*
 * kvs_cli_util: argument parsing shared by the sub-commands.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvs_cli.h"


int
kvs_cli_num(const char *cmd, const char *opt, const char *s, double lo,
    double hi, int integer, double *out)
{
    char    *end;
    double   d;

    errno = 0;
    d = strtod(s, &end);

    if (end == s || *end != '\0' || errno != 0 || !isfinite(d)
        || d < lo || d > hi || (integer && d != floor(d)))
    {
        fprintf(stderr, "kvserve %s: %s: expected %s between %.17g "
                "and %.17g, got \"%s\"\n", cmd, opt,
                integer ? "an integer" : "a number", lo, hi, s);
        return 2;
    }

    *out = d;

    return 0;
}
