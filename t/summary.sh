#!/usr/bin/env bash
# The suite's summary line, from the log of `make test` (every sub-suite's
# output, in order): what ran, what passed and what was skipped, and the
# fixtures the skips asked for, so that a run without ../shared says how
# much it did not check.  It counts what each runner prints:
#
#   cmocka      "[  PASSED  ] N test(s)." and " N SKIPPED TEST(S)" (the
#               plain, ASan, clang ASan and TSan builds alike);
#   Test::Nginx "Files=F, Tests=N" per prove run, "ok N # skip" lines
#               (prove --directives) and "t/x.t .. skipped: why" files;
#   the rest    (Python interop and SDK tests) lines that start with
#               "SKIP" or "name: SKIP", other than the ones cmocka's
#               tests print before their "[  SKIPPED ]".
#
# and "time STEP: N s" lines (make test writes them) become one line of
# seconds per step.
#
#   t/summary.sh LOG
set -euo pipefail

log=${1:?usage: t/summary.sh LOG}

awk '
function reason(s,    k, m, w, f, pick) {
    # the file a skip names (after "needs", else a path under fixtures,
    # else any path), else its text
    m = split(s, w, /[ ()]+/)
    pick = ""
    for (k = 1; k < m && pick == ""; k++) {
        if (w[k] == "needs" && w[k + 1] ~ /\//) pick = w[k + 1]
    }
    for (k = 1; k <= m && pick == ""; k++) {
        if (w[k] ~ /fixtures\//) pick = w[k]
    }
    for (k = 1; k <= m && pick == ""; k++) {
        if (w[k] ~ /\// && w[k] !~ /^t\//) pick = w[k]
    }
    s = pick != "" ? pick : s
    sub(/[.,:;]+$/, "", s)
    if (!(s in why)) {
        why[s] = 1
        order[++n_why] = s
    }
}
/^\[  PASSED  \] [0-9]+ test/     { c_pass += $4 }
/^ [0-9]+ SKIPPED TEST/           { c_skip += $1 }
/^\[  SKIPPED \] test_/           { if (pending != "") reason(pending)
                                    pending = "" }
/^time [a-z-]+: [0-9]+ s$/        { sub(/:$/, "", $2); t_list = t_list \
                                    (t_list != "" ? ", " : "") $2 " " $3
                                    t_sum += $3; next }
/^Files=[0-9]+, Tests=[0-9]+/     { split($0, f, /[=,]/); p_files += f[2]
                                    p_tests += f[4] }
/^ok [0-9]+ [#] skip/               { p_skip++; reason($0) }
/ \.\.+ skipped: /                { p_fskip++; reason($0) }
{
    # a SKIP line: from cmocka when "[  SKIPPED ]" follows, else from
    # another runner
    if (pending != "" && $0 !~ /^\[  SKIPPED \]/) {
        o_skip++
        reason(pending)
        pending = ""
    }
    if ($0 ~ /^([A-Za-z0-9_.-]+: )?SKIP[: ]/) {
        pending = $0
    }
}
END {
    if (pending != "") {
        o_skip++
        reason(pending)
    }
    printf "summary: cmocka %d passed, %d skipped (every build); " \
           "Test::Nginx %d tests in %d files, %d skipped, %d files " \
           "skipped; other suites %d skips\n", c_pass, c_skip, p_tests,
           p_files, p_skip, p_fskip, o_skip
    if (t_list != "") {
        printf "seconds per step (%d in all): %s\n", t_sum, t_list
    }
    if (n_why > 0) {
        printf "skipped for want of (%d):", n_why
        for (i = 1; i <= n_why && i <= 30; i++) {
            printf "%s %s", (i > 1 ? "," : ""), order[i]
        }
        printf "%s\n", (n_why > 30 ? ", ..." : "")
    }
}
' "$log"
