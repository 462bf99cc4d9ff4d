# kvserve_kv_dtype (issue 24, point 5): `nginx -t` refuses a dtype no
# backend in the configuration can store, naming it; an engine caching in
# int8 serves, and /v1/models, kvserve info and the engine's log give the
# same real bytes per token (scales included); a reload that changes the
# dtype drains the old engine, so no block written in one dtype is ever
# read as another, and its successor caches in the new one (fp8, then
# f16).
#
# The default tiny model: 2 layers, 2 KV heads of 16, blocks of 16.
# f32: 2 x 2 x 2 x 16 x 4 = 512 B per token; f16 256; int8: per block and
# layer 2 x 16 x 2 x 16 B of elements and 2 x 2 floats of scales, 1040 B,
# x 2 layers / 16 tokens = 130 B per token; fp8 the same bytes.
#
# One nginx of our own (Kvserve::Live); every process it started is
# killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use JSON::PP ();
use File::Temp ();

my $t = Kvserve::Live->new('041');
my $model = $t->model_dir . '/default.gguf';
my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";

END { $t->stop if $t }

# ---- nginx -t -------------------------------------------------------------

my ($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                                 . "kvserve_kv_dtype int4;");
ok($failed, 'nginx -t refuses kvserve_kv_dtype int4');
like($out, qr/invalid value "int4" in "kvserve_kv_dtype" directive, it must be "f32", "f16", "bf16", "int8" or "fp8"/,
     '... naming the value and the choices');

# the CUDA backend stores int8 and fp8 for heads of 8n elements (the
# default model's are 16); a model of heads of 12 is refused with it
for my $dt (qw(int8 fp8)) {
    ($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                                  . "kvserve_backend cuda;\n"
                                  . "kvserve_kv_dtype $dt;");
    ok(!$failed, "nginx -t takes $dt with kvserve_backend cuda")
        or diag($out);
}

SKIP: {
    skip "no kvserve tool at $cli", 4 unless -x $cli;
    my $odd = File::Temp::tempdir(CLEANUP => 1) . '/kvdt-heads12.gguf';
    system("'$cli' gen-model --dim 48 --ffn 96 --heads 4 --kv-heads 2 "
           . "--layers 1 --vocab 300 --ctx 64 --seed 5 --name kvdt12 "
           . "'$odd' >/dev/null 2>&1");
    ok(-f $odd, 'a model of heads of 12 elements');
    ($failed, $out) = $t->nginx_t("kvserve_model m $odd;\n"
                                  . "kvserve_backend cuda;\n"
                                  . "kvserve_kv_dtype fp8;");
    ok($failed, 'nginx -t refuses fp8 on CUDA for heads of 12');
    like($out, qr/kvserve_kv_dtype "fp8": model "m" has heads of 12\/12 elements; the CUDA backend stores it for heads of a multiple of 8/,
         '... naming the dtype, the model and its heads');
    ($failed, $out) = $t->nginx_t("kvserve_model m $odd;\n"
                                  . "kvserve_backend auto;\n"
                                  . "kvserve_kv_dtype fp8;");
    ok(!$failed, '... and takes it with kvserve_backend auto (the CPU)')
        or diag($out);
}

($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                              . "kvserve_kv_dtype f16;\n"
                              . "kvserve_kv_dtype int8;");
ok($failed, 'a second kvserve_kv_dtype is refused');
like($out, qr/"kvserve_kv_dtype" directive is duplicate/, '... as such');

for my $dt (qw(f32 f16 bf16 int8 fp8)) {
    ($failed, $out) = $t->nginx_t("kvserve_model m $model;\n"
                                  . "kvserve_kv_dtype $dt;");
    ok(!$failed, "nginx -t takes kvserve_kv_dtype $dt") or diag($out);
}

# ---- kvserve info --kv-dtype ----------------------------------------------

SKIP: {
    skip "no kvserve tool at $cli", 9 unless -x $cli;
    my %bpt;
    for my $dt (qw(f32 f16 int8 fp8)) {
        my $j = JSON::PP::decode_json(
            scalar `'$cli' info --json --kv-dtype $dt $model`);
        my $cpu = $j->{memory}{backends}{cpu};
        my $cuda = $j->{memory}{backends}{cuda};
        is($cpu->{kv_dtype}, $dt, "info --kv-dtype $dt: the CPU's dtype");
        is("$cuda->{kv_dtype}/$cuda->{kv_bytes_per_token}",
           "$dt/$cpu->{kv_bytes_per_token}",
           "... and CUDA's, the same bytes per token");
        $bpt{$dt} = $cpu->{kv_bytes_per_token};
    }
    is_deeply(\%bpt, { f32 => 512, f16 => 256, int8 => 130, fp8 => 130 },
              'info: 512, 256, 130 and 130 bytes per token');
}

# ---- an int8 engine, then a reload to f16 ---------------------------------

sub conf {
    my ($dt) = @_;
    $t->write_conf(<<"EOC");
    kvserve_model m $model;
    kvserve_backend cpu;
    kvserve_kv_dtype $dt;
    kvserve_kv_cache 4m;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
EOC
}

sub complete {
    my ($what) = @_;
    my $r = $t->read_all($t->request('POST', '/v1/completions',
        '{"model": "m", "prompt": "Once upon a time", "max_tokens": 24, '
        . '"temperature": 0, "ignore_eos": true}'), 60);
    my ($head, $body) = $t->split_response($r);
    like($head, qr{^HTTP/1\.1 200}, "$what: a completion is 200")
        or diag($r);
    my $j = eval { JSON::PP::decode_json($body) } || {};
    is($j->{usage}{completion_tokens}, 24, "$what: 24 tokens")
        or diag($body);
}

# the model's kvserve object once the engine of dtype $dt said hello
sub listed {
    my ($dt) = @_;
    my $k = {};
    $t->wait_for(sub {
        my (undef, $body) = $t->split_response($t->read_all(
            $t->request('GET', '/v1/models/m'), 10));
        my $j = eval { JSON::PP::decode_json($body) } || {};
        $k = $j->{kvserve} || {};
        return $k->{weights} && $k->{kv_dtype} eq $dt;
    }, 20);
    return $k;
}

conf('int8');
ok($t->start, 'nginx started with kvserve_kv_dtype int8');
is($t->log_count(qr/KV cache .* \(\d+ tokens, 130 B\/token\)/), 1,
   'the cache plan counts 130 B per token');
complete('int8');
my $pid = $t->engine_pid;
ok($pid, "the int8 engine serves ($pid)");

my $k = listed('int8');
is($k->{kv_dtype}, 'int8', '/v1/models: kv_dtype int8');
is($k->{kv_bytes_per_token}, 130, '... 130 bytes per token');
is($t->log_count(qr/model "m": weights on cpu: .* KV int8, 130 bytes per token/),
   1, 'the engine logged its int8 cache');

# a reload from the engine of dtype $old to $dt ($bpt bytes per token)
sub reload {
    my ($old, $dt, $bpt) = @_;
    conf($dt);
    kill 'HUP', $t->master_pid;
    ok($t->wait_for(sub {
            $t->log_count(qr/KV $dt, $bpt bytes per token/) == 1 }, 30),
       "reload to $dt: a new engine caches in $dt");
    ok($t->wait_for(sub { !$t->alive($pid) }, 30),
       "... and the $old engine exited, its blocks with it");
    complete($dt);
    $k = listed($dt);
    is($k->{kv_bytes_per_token}, $bpt,
       "/v1/models: $dt, $bpt bytes per token");
    $pid = $t->engine_pid;
}

reload('int8', 'fp8', 130);
reload('fp8', 'f16', 256);

is($t->log_count(qr/\[alert\]|\[emerg\]/), 0, 'no alert meanwhile');

done_testing();
