# conf/grafana-kvserve.json against a real scrape: every panel's PromQL
# query is evaluated by Prometheus over two scrapes of a running kvserve
# and must answer a series with a number (not empty, not an error, not
# NaN; route's, a gateway's hop, only a series: on an engine host it
# has no observation); the panels are the hops of docs/triage.md, in its
# order.
#
# How, offline, with Debian 12's prometheus 2.42: one nginx of our own
# (a limit zone, so the limit series exist) under 3 clients of short
# completions; `kvserve triage --save` takes the two scrapes (3 s
# apart); they become one OpenMetrics file, the first at T and the
# second at T + 15 s (fixed, old, times: the blocks outlive nothing with
# a retention of 100 years), which `promtool tsdb create-blocks-from
# openmetrics` turns into TSDB blocks; a `prometheus` started on them
# (no scrape targets, 127.0.0.1 only) answers `promtool query instant
# -o json --time T+15` for each query, with Grafana's variables
# replaced: $model by the model's name, $__rate_interval by 1m, and
# ${datasource} unused.  About 12 s.  Skipped without promtool and
# prometheus (Debian's `prometheus` package, in the Makefile's
# DEB_PKGS).
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use IO::Socket::INET ();
use JSON::PP ();
use POSIX ();
use Time::HiRes qw(sleep time);

my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
my $dash_file = "$FindBin::Bin/../conf/grafana-kvserve.json";
my $T = 1700000000;

for my $tool (qw(promtool prometheus)) {
    plan skip_all => "needs $tool (Debian's prometheus package)"
        unless grep { -x "$_/$tool" } split /:/, $ENV{PATH};
}
plan skip_all => "needs the kvserve tool ($cli)" unless -x $cli;

my $t = Kvserve::Live->new('039-grafana', 'prom');
my $root = $t->root;
my ($prom_pid, @kids);

END {
    kill 'KILL', @kids if @kids;
    if ($prom_pid) {
        kill 'TERM', $prom_pid;
        waitpid($prom_pid, 0);
    }
    $t->stop if $t;
}

# ---- the panels -------------------------------------------------------------

open my $fh, '<', $dash_file or die "$dash_file: $!";
my $dash = JSON::PP::decode_json(do { local $/; <$fh> });
close $fh;

my @hops = ('network', 'queueing', 'tokenization', 'limit', 'route',
            'prefill', 'KV cache', 'batching', 'decode');
is_deeply([map { $_->{title} } @{$dash->{panels}}],
          [map { ($_ + 1) . " $hops[$_]" } 0 .. $#hops],
          'one panel per hop, in the walk\'s order');

my @queries;
for my $p (@{$dash->{panels}}) {
    push @queries, map { [$p->{title}, $_->{refId}, $_->{expr}] }
                       @{$p->{targets} // []};
}
ok(@queries >= 18, scalar(@queries) . ' queries');

# ---- a running kvserve, scraped twice ---------------------------------------

my $model = $t->model_dir . '/default.gguf';
$t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_limit_zone "all" zone=all:1m rate=1000000t/s;
EOC
    server => <<"EOS");
        location /v1/ { kvserve; kvserve_limit zone=all nodelay; }
        location = /metrics { kvserve_metrics; }
        location = /status { kvserve_status; }
EOS
$t->start or BAIL_OUT('nginx did not start');
ok($t->engine_pid, 'the engine is up');

my $body = '{"model": "kvserve-tiny", "prompt": "once upon a time", '
         . '"max_tokens": 8}';

for (1 .. 3) {
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        my $end = time + 5;
        $t->read_all($t->request('POST', '/v1/completions', $body), 10)
            while time < $end;
        POSIX::_exit(0);
    }
    push @kids, $pid;
}

sleep 0.5;
my $url = 'http://127.0.0.1:' . $t->port . '/metrics';
my $out = `$cli triage $url --interval 3 --save $root/prom/scrape 2>&1`;
waitpid($_, 0) for @kids;
@kids = ();
ok(-s "$root/prom/scrape-1.prom" && -s "$root/prom/scrape-2.prom",
   'two scrapes saved') or diag($out);

# one OpenMetrics file: the samples of each scrape at its time
open my $om, '>', "$root/prom/om.txt" or die "om: $!";
for my $s ([1, $T], [2, $T + 15]) {
    open my $in, '<', "$root/prom/scrape-$s->[0].prom" or die "scrape: $!";
    while (<$in>) {
        next if /^#/ || /^\s*$/;
        chomp;
        print $om "$_ $s->[1]\n";
    }
    close $in;
}
print $om "# EOF\n";
close $om;

my $cmd = "promtool tsdb create-blocks-from openmetrics $root/prom/om.txt "
        . "$root/prom/data 2>&1";
$out = `$cmd`;
is($?, 0, 'promtool made TSDB blocks of the scrapes') or diag($out);

# ---- prometheus on the blocks -----------------------------------------------

my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                              LocalPort => 0) or die "port: $!";
my $pport = $s->sockport;
close $s;

open my $pc, '>', "$root/prom/prometheus.yml" or die "yml: $!";
print $pc "global:\n  scrape_interval: 1h\n";
close $pc;

$prom_pid = fork // die "fork: $!";
if ($prom_pid == 0) {
    open STDOUT, '>', "$root/prom/prometheus.log";
    open STDERR, '>&', \*STDOUT;
    exec('prometheus', "--config.file=$root/prom/prometheus.yml",
         "--storage.tsdb.path=$root/prom/data",
         '--storage.tsdb.retention.time=100y',
         "--web.listen-address=127.0.0.1:$pport") or POSIX::_exit(127);
}

my $ready = $t->wait_for(sub {
    my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $pport, Timeout => 1)
        or return 0;
    print $c "GET /-/ready HTTP/1.0\r\n\r\n";
    my $r = $t->read_all($c, 2);
    return $r =~ m{^HTTP/1\.[01] 200};
}, 20);
ok($ready, 'prometheus is ready') or BAIL_OUT('prometheus did not start');

# ---- every query ------------------------------------------------------------

for my $q (@queries) {
    my ($title, $ref, $expr) = @$q;
    $expr =~ s/\$model\b/kvserve-tiny/g;
    $expr =~ s/\$__rate_interval\b/1m/g;
    (my $arg = $expr) =~ s/'/'\\''/g;
    my $cmd = 'promtool query instant -o json --time=' . ($T + 15)
            . " http://127.0.0.1:$pport '$arg' 2>&1";
    my $json = `$cmd`;
    my $st = $?;
    my $res = $st == 0 ? eval { JSON::PP::decode_json($json) } : undef;
    my @num = grep { $_->{value}[1] !~ /^(?:NaN|[+-]?Inf)$/i } @{$res // []};
    if ($title =~ /route/) {
        # a gateway's hop: on an engine host its series are there, empty
        ok($st == 0 && @{$res // []}, "$title $ref: a series")
            or diag("$expr\n$json");
        next;
    }
    ok($st == 0 && @num, "$title $ref: a series with a number")
        or diag("$expr\n$json");
}

done_testing();
