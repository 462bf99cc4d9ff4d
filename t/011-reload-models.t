# A reload that changes the models (docs/engine-process.md, "The
# engine's life"; issue 5 point 4), on one nginx of our own with
# worker_processes 2:
#
# nginx starts with model A (the tiny default model) and a long stream
# is started; the configuration is changed to model B (a copy of the
# default model under another path and mtime, with or without the
# fixtures) and the master gets HUP.  The new workers find the old
# engine's HELLO naming other files and send DRAIN: the old engine stops
# listening and releases the lease, keeps serving the old workers' stream
# to its [DONE], and exits once they are gone; a request for model B is
# served by a new engine meanwhile.
#
# Every nginx and engine process started here is killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use File::Copy ();
use Time::HiRes qw(time);

my $t = Kvserve::Live->new('011', 'models');
my $root = $t->root;

# A: the tiny default model, its end tokens (507, 508, 511) banned so the
# stream runs to max_tokens
my $model_a = $t->model_dir . "/default.gguf";
my $bias = '{"507": -100, "508": -100, "511": -100}';
my $max_tokens = 480;

# B: another file
my $model_b = "$root/models/b.gguf";
File::Copy::copy($model_a, $model_b) or die "copy: $!";
# another identity even within the same second
my $mtime = (stat $model_a)[9] - 100;
utime $mtime, $mtime, $model_b or die "utime: $!";

sub write_conf {
    my ($name, $model) = @_;
    $t->write_conf(<<"EOC");
    kvserve_model $name $model;
    kvserve_kv_cache 64m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    # a stream long enough to outlast the reload: 64 choices
    kvserve_max_sequences 64;
EOC
}

END { $t->stop if $t }

write_conf('m', $model_a);
ok($t->start, 'nginx started');

my $serving = qr/kvserve: engine \d+ serving /;

my $pid_a = $t->engine_pid();
ok($pid_a, "engine A serves ($pid_a)");
is($t->log_count($serving), 1, 'it loaded its model once');

my $s = $t->request('POST', '/v1/completions',
                    '{"model": "m", "prompt": "Once upon a time", "n": 64, '
                    . "\"max_tokens\": $max_tokens, \"stream\": true, "
                    . "\"ignore_eos\": true, \"logit_bias\": $bias}");
my $got = $t->read_until($s, qr/data: \{/, 30);
like($got, qr/data: \{/, 'a long stream on model A started');

write_conf('b', $model_b);
kill 'HUP', $t->master_pid();
ok($t->wait_for(sub { $t->log_count(qr/gracefully shutting down/) >= 2 },
                20),
   'reload: the old workers are shutting down');

# a request for the new model: the new workers drain A and fork B
my $t0 = time;
my $r = $t->read_all($t->request('POST', '/v1/completions',
                                 '{"model": "b", "prompt": "Once", '
                                 . '"max_tokens": 8}'), 25);
like($r, qr{^HTTP/1\.1 200 .*"finish_reason"}s,
     sprintf('a request for model B is served (%.2f s)', time - $t0));
my $pid_b = $t->engine_pid();
ok($pid_b && $pid_b != $pid_a, "by a new engine ($pid_b)");
ok($t->log_count(qr/serves other models than this configuration's: /
                 . qr/DRAIN sent/),
   'a new worker sent DRAIN');
ok($t->log_count(qr/kvserve: engine $pid_a: DRAIN from client \d+: /
                 . qr/no longer accepting; removed /),
   'engine A stopped accepting and removed its socket');
ok($t->log_count(qr/kvserve: engine $pid_a: lease released/),
   'engine A released the lease');
my $still = $got !~ /\[DONE\]/ && $t->alive($pid_a);

$got = $t->read_all($s, 120, $got);
my ($head, $body, $ended) = $t->split_response($got);
like($body, qr/data: \[DONE\]\n\n\z/, 'the old stream ended with [DONE]');
unlike($body, qr/data: \{"error"/, '... and no error event');
ok($ended, '... and a proper end of the chunked body');
my @fin = $body =~ /"finish_reason":"length"/g;
is(scalar @fin, 64, '... every choice ran to max_tokens');
ok($still, '... engine A still ran after engine B served model B')
    or diag('the stream ended before engine B was up');

ok($t->wait_for(sub { $t->log_count(qr/worker process \d+ exited/) >= 2 },
                20),
   'the old workers exited');
ok($t->wait_for(sub { !$t->alive($pid_a) }, 20), 'then engine A exited');
ok($t->log_count(qr/kvserve: engine $pid_a: drained and no client left: /
                 . qr/exiting/),
   '... and said why');
ok($t->alive($pid_b), 'engine B still runs');
is($t->lease_pid(), $pid_b, 'the lease file names engine B');
is($t->log_count($serving), 2, 'two model loads in all');
is($t->log_count(qr/started engine process/), 2,
   'two engines started in all');

$r = $t->read_all($t->request('POST', '/v1/completions',
                              '{"model": "b", "prompt": "Once", '
                              . '"max_tokens": 8}'), 25);
like($r, qr{^HTTP/1\.1 200 .*"finish_reason"}s, 'model B served again');
is($t->engine_pid(), $pid_b, '... by engine B');

done_testing();
