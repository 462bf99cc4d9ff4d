# `kvserve triage` (docs/triage.md) against one nginx of our own made slow
# on purpose at two different hops, while forked clients load it:
#
#  1. healthy: one client, short completions one after another: every
#     hop within bounds, status 0, "guilty: none";
#  2. tokenization: a tokenizer thread pool of one thread (thread_pool
#     threads=1, kvserve_tokenize_threshold 1024) and 8 clients sending
#     prompts of one 240 KB word (200k tokens, refused once tokenized
#     with their max_tokens of 200000 as over the 262144-token context of
#     a model generated here: the pool's work is all there is): triage
#     names tokenization, status 1, and the KV cache hop is within
#     bounds;
#  3. KV cache: a cache of 32 blocks of 16 tokens (kvserve_kv_cache 256k)
#     and 8 clients each asking 20 prompt tokens and 90 generated (the
#     end tokens banned): each needs 7 blocks, together twice the cache,
#     so the engine preempts; triage names kv_cache, status 1, and the
#     tokenization hop is within bounds.
#
# Each triage reads 3 s between its scrapes; the whole file takes about
# 25 s.  The thresholds are the defaults, which the loads exceed several
# times over (tokenization's mean: hundreds of ms against 50; preemptions
# per request: 0.3-0.5 against 0.05), while the healthy run stays far
# under them (means under 3 ms); a loaded machine only slows the pool
# further.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use POSIX ();
use Time::HiRes qw(sleep time);

my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
plan skip_all => "needs the kvserve tool ($cli)" unless -x $cli;

my $t;
my @kids;

END {
    kill 'KILL', @kids if @kids;
    $t->stop if $t;
}

# Starts nginx on a fresh server root with $model (default.gguf when
# undef) as kvserve-tiny, $http and a 1-thread pool.
sub server {
    my ($name, $model, $http, $loc) = @_;
    $t->stop if $t;
    $t = Kvserve::Live->new($name);
    $model //= $t->model_dir . '/default.gguf';
    $t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    client_max_body_size 4m;
$http
EOC
        main => 'thread_pool one threads=1;',
        server => <<"EOS");
        location /v1/ { kvserve; $loc }
        location = /metrics { kvserve_metrics; }
        location = /status { kvserve_status; }
EOS
    $t->start or BAIL_OUT('nginx did not start');
    ok($t->engine_pid, "$name: the engine is up");
}

# POSTs $body to /v1/completions; the status.
sub post {
    my ($body) = @_;
    my $r = $t->read_all($t->request('POST', '/v1/completions', $body), 30);
    my ($status) = $r =~ m{^HTTP/1\.1 (\d+)};
    return $status // 0;
}

# $n forked clients posting $body over and over for $secs seconds.
sub load {
    my ($n, $secs, $body) = @_;
    for (1 .. $n) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            my $end = time + $secs;
            post($body) while time < $end;
            POSIX::_exit(0);
        }
        push @kids, $pid;
    }
}

sub reap {
    waitpid($_, 0) for @kids;
    @kids = ();
}

# `kvserve triage` on the server: (status, output).  With KVS_TRIAGE_SAVE
# set, the scrapes are kept as $KVS_TRIAGE_SAVE-$name-{1,2}.prom (how
# t/unit/test_triage.c's were taken).
sub triage {
    my ($name) = @_;
    my $save = $ENV{KVS_TRIAGE_SAVE} ? "--save $ENV{KVS_TRIAGE_SAVE}-$name"
                                     : '';
    my $url = 'http://127.0.0.1:' . $t->port . '/metrics';
    my $out = `$cli triage $url --interval 3 $save 2>&1`;
    my $st = $? >> 8;
    note($out);
    return ($st, $out);
}

# The status word of hop $hop in the report ("ok", "OUT", "out*", "-").
sub hop {
    my ($out, $hop) = @_;
    my ($st) = $out =~ /^\d+ \Q$hop\E\s+(\S+)/m;
    return $st // '?';
}

my $ban = '"logit_bias": {"507": -100, "508": -100, "511": -100}';

# ---- 1. healthy -------------------------------------------------------------

server('038-triage-ok', undef, "kvserve_kv_cache 16m;", '');

is(post('{"model": "kvserve-tiny", "prompt": "once upon a time", '
        . '"max_tokens": 8}'), 200, 'healthy: a completion');

load(1, 5, '{"model": "kvserve-tiny", "prompt": "once upon a time", '
           . '"max_tokens": 8}');
sleep 0.5;
my ($st, $out) = triage('ok');
reap();
is($st, 0, 'healthy: triage exits 0') or diag($out);
like($out, qr/^guilty: none/m, '... and names no hop');
like($out, qr/^1 network\s+ok .*\n2 queueing\s+ok .*\n3 tokenization\s+ok/m,
     '... the hops in order, with data') or diag($out);
unlike($out, qr/ OUT /, '... none out of bounds');

# ---- 2. a tokenizer pool of one thread --------------------------------------

# the tiny model with a context of 262144: a prompt of 200k tokens is
# tokenized whole (a text the context cannot hold is refused before, by
# its length alone), then refused by the worker with its max_tokens
my $long_model = "$ENV{TEST_NGINX_SERVROOT}-038-long.gguf";
system("$cli gen-model --preset tiny --ctx 262144 --seed 1 $long_model "
       . ">/dev/null") == 0 or BAIL_OUT("gen-model failed");

server('038-triage-tok', $long_model, "kvserve_kv_cache 128m;",
       'kvserve_tokenize_threads one; kvserve_tokenize_threshold 1024;');

# one word of 240 KB: the pre-tokenizer cannot split it, BPE takes it
# whole: about 200k tokens, 80-150 ms of one core
my @l = ('a' .. 'z');
my $word = join '', map { $l[($_ * 7 + $_ * $_ * 3) % 26] } 1 .. 240_000;
my $long = qq({"model": "kvserve-tiny", "prompt": "$word", )
         . qq("max_tokens": 200000});

is(post($long), 400, 'tokenization: prompt and max_tokens are over the '
   . 'context');

# 24 clients: on an idle machine a prompt takes about 5 ms, and the one
# thread's queue must hold the mean well past the 50 ms threshold there
# too (8 clients gave 38 ms idle, and 200 ms+ on a loaded machine)
load(24, 6, $long);
sleep 1;
($st, $out) = triage('tok');
reap();
unlink $long_model;
is($st, 1, 'tokenization: triage exits 1') or diag($out);
like($out, qr/^guilty: tokenization$/m, '... and names tokenization')
    or diag($out);
is(hop($out, 'tokenization'), 'OUT', '... out of bounds');
isnt(hop($out, 'kv_cache'), 'OUT', '... the KV cache is not');

# ---- 3. a KV cache too small for the load -----------------------------------

server('038-triage-kv', undef,
       "kvserve_kv_cache 256k;\n    kvserve_kv_block 16;\n"
       . "    kvserve_prefix_cache off;", '');

my $ids = join ',', map { 10 + $_ * 11 % 400 } 1 .. 20;
my $kv = qq({"model": "kvserve-tiny", "prompt": [$ids], "max_tokens": 90, )
       . qq("temperature": 0, $ban});

is(post($kv), 200, 'kv cache: a completion fits alone');

load(8, 6, $kv);
sleep 1;
($st, $out) = triage('kv');
reap();
is($st, 1, 'kv cache: triage exits 1') or diag($out);
like($out, qr/^guilty: kv_cache$/m, '... and names kv_cache') or diag($out);
isnt(hop($out, 'tokenization'), 'OUT', '... tokenization is not out');

done_testing();
