# The engine's backend under nginx (issue 9 point 4), on one nginx of our
# own with worker_processes 2 and the tiny default model, on whatever host
# runs the tests (no GPU where this was written):
#
# 1. `nginx -t` refuses bad kvserve_backend and kvserve_device values,
#    quoting them, and accepts the good ones;
# 2. kvserve_backend auto (the default): completions are served, on
#    CUDA when a device answers, else on the CPU; the error log has one
#    line saying which backend and why ("backend: cpu, ... (auto: ...)");
#    nginx's master and workers map neither libcudart nor libcublas (the
#    engine process dlopens the backend), and an engine on the CPU never
#    maps cuBLAS;
# 3. kvserve_backend cuda on a host without a usable device: the engine
#    refuses to start and logs why, a completion gets a 503 with an
#    OpenAI-style error, nothing crashes and the workers stay up.
#
# Every nginx and engine process started here is killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use JSON::PP ();
use Time::HiRes qw(sleep);

my $t = Kvserve::Live->new('017-backend');
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

# ---- 1. nginx -t -------------------------------------------------------------

for my $c (
    ['kvserve_backend gpu;',
     qr/invalid value "gpu" in "kvserve_backend" directive, it must be "cuda", "cpu" or "auto"/],
    ['kvserve_backend CUDA;', qr/invalid value "CUDA" in "kvserve_backend"/],
    ['kvserve_backend "";', qr/invalid value "" in "kvserve_backend"/],
    ['kvserve_backend cpu; kvserve_backend auto;',
     qr/"kvserve_backend" directive is duplicate/],
    ['kvserve_backend cpu cuda;',
     qr/invalid number of arguments in "kvserve_backend"/],
    ['kvserve_device -1;', qr/invalid value "-1" in "kvserve_device"/],
    ['kvserve_device 1024;', qr/invalid value "1024" in "kvserve_device"/],
    ['kvserve_device one;', qr/invalid value "one" in "kvserve_device"/],
    ['kvserve_device auto;', qr/invalid value "auto" in "kvserve_device"/],
    ['kvserve_device 0; kvserve_device 1;',
     qr/"kvserve_device" directive is duplicate/],
) {
    my ($failed, $out) = $t->nginx_t($c->[0]);
    ok($failed, "nginx -t fails: $c->[0]");
    like($out, $c->[1], "... saying $c->[1]");
}

for my $good ('kvserve_backend cuda;', 'kvserve_backend cpu;',
              'kvserve_backend auto;', 'kvserve_device 0;',
              'kvserve_device 7; kvserve_backend cuda;') {
    my ($failed, $out) = $t->nginx_t($good);
    ok(!$failed, "nginx -t passes: $good") or diag $out;
}

# ---- helpers -----------------------------------------------------------------

# pids of nginx's master and workers (not the engine: its comm differs)
sub nginx_pids {
    my $m = $t->master_pid or return ();
    my @p = ($m);
    for my $stat (glob '/proc/[0-9]*/stat') {
        open my $fh, '<', $stat or next;
        my $s = <$fh> // '';
        my ($pid, $comm, $ppid) = $s =~ /^(\d+) \((.*)\) \S+ (\d+)/ or next;
        push @p, $pid if $ppid == $m && $comm eq 'nginx';
    }
    return @p;
}

# the CUDA libraries process $p maps
sub cuda_maps {
    my ($p) = @_;
    open my $fh, '<', "/proc/$p/maps" or return ();
    my %l;
    while (<$fh>) {
        $l{$1} = 1 if m{/(libcudart[^/\s]*|libcublas[^/\s]*|libcuda\.[^/\s]*)$};
    }
    return sort keys %l;
}

sub complete {
    my $r = $t->read_all($t->request('POST', '/v1/completions',
        '{"model": "kvserve-tiny", "prompt": "Once upon a time", '
        . '"max_tokens": 4, "temperature": 0}'), 30);
    my ($head, $body) = $t->split_response($r);
    my ($status) = ($head // '') =~ m{^HTTP/1\.1 (\d+)};
    return ($status // 0, $body // '');
}

# ---- 2. auto -----------------------------------------------------------------

$t->write_conf(<<"EOC");
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
EOC

ok($t->start, 'nginx started (kvserve_backend unset: auto)');
my $engine = $t->engine_pid;
ok($engine, 'the engine is up');

my ($status, $body) = complete();
is($status, 200, 'auto: a completion is served') or diag $body;
like($body, qr/"completion_tokens":\s*4/, 'auto: four tokens generated');

my $line = qr/kvserve: model "kvserve-tiny": backend: (cpu|cuda)[ ,]/;
ok($t->wait_for(sub { $t->log_count($line) >= 1 }, 5),
   'the error log says which backend serves');
is($t->log_count($line), 1, '... in one line');

my ($backend_line) = do {
    open my $fh, '<', $t->log_path or die "log: $!";
    grep { $_ =~ $line } <$fh>;
};
diag $backend_line // '(none)';
my $on_cpu = ($backend_line // '') =~ /backend: cpu/;

if ($on_cpu) {
    like($backend_line, qr/backend: cpu, 1 thread \(auto: .+\)$/,
         'auto on the CPU: the reason is given');
} else {
    like($backend_line, qr/backend: cuda, device 0: .+ \(auto: /,
         'auto on CUDA: the device is named');
}

my @nginx = nginx_pids();
is(scalar @nginx, 3, 'a master and two workers') or diag "@nginx";
for my $p (@nginx) {
    my @m = cuda_maps($p);
    is("@m", '', "nginx process $p maps no CUDA library");
}

if ($on_cpu) {
    my @m = grep { /cublas/ } cuda_maps($engine);
    is("@m", '', 'the engine on the CPU maps no cuBLAS');
}

$t->stop;
ok($t->wait_for(sub { !$t->alive($engine) }, 10), 'the engine is gone');

# ---- 3. cuda without a device ------------------------------------------------

SKIP: {
    skip 'a CUDA device answered: kvserve_backend cuda would serve', 10
        unless $on_cpu;

    $t->write_conf(<<"EOC");
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_backend cuda;
    kvserve_engine_wait 2s;
EOC
    unlink $t->log_path;

    ok($t->start, 'nginx started (kvserve_backend cuda)');

    my $refused = qr/\[alert\].*kvserve: engine: models\[0\] \(kvserve-tiny\): backend cuda \(device 0\): \S.+/;
    ok($t->wait_for(sub { $t->log_count($refused) >= 1 }, 10),
       'the engine refuses to start, saying why');

    my ($st, $b) = complete();
    is($st, 503, 'a completion gets a 503') or diag $b;
    my $j = eval { JSON::PP::decode_json($b) } // {};
    is($j->{error}{type}, 'server_error', '... an OpenAI-style error');
    like($j->{error}{message} // '', qr/engine/i, '... about the engine');
    # the engine's own reason, from its last words (m-<key>.err)
    my $why = qr/^The engine for model "kvserve-tiny" \(pid \d+\) .*/
        . qr/failed.*: models\[0\] \(kvserve-tiny\): backend cuda /
        . qr/\(device 0\): /;
    like($j->{error}{message} // '', qr/$why/,
         '... naming the model and why it could not start') or diag $b;
    is($j->{error}{code}, 'model_unavailable', '... model_unavailable');

    is($t->log_count(qr/exited on signal|segfault|core dumped/), 0,
       'nothing crashed');
    my @w = nginx_pids();
    is(scalar @w, 3, 'the master and both workers are still up');
    is(join(' ', map { cuda_maps($_) } @w), '',
       'nginx processes map no CUDA library');
}

done_testing();
